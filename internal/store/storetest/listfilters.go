package storetest

import (
	"context"
	"slices"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// testListJobsFilters lists jobs by submitter (Owner), pool and a piece of
// the name (NameContains), alone, together, with states, a limit and a
// cursor. The names hold LIKE's wildcards (% and _) and its escape
// character (\), which must match only themselves, and letters of both
// cases, which match either.
func testListJobsFilters(t *testing.T, s store.Store) {
	ctx := context.Background()
	subs := []struct{ name, submitter, pool string }{
		{"train-Resnet", "alice", "standard"}, // 0, held
		{"train_resnet", "bob", "gpu"},        // 1
		{"100%-done", "alice", "gpu"},         // 2
		{"trainXresnet", "alice", "standard"}, // 3: "train_" unescaped would match it
		{"1000-done", "bob", "standard"},      // 4: "0%-d" unescaped would match it
		{`back\slash`, "carol", "gpu"},        // 5
		{"TRAIN-resnet-2", "alice", "gpu"},    // 6, held
		{"eval-resnet", "alice", "standard"},  // 7
	}
	ids := make([]int64, len(subs))
	for i, x := range subs {
		spec := testSpec(x.name, "p")
		spec.Pool = x.pool
		ids[i] = create(t, s, newJob(t, spec, x.submitter, at(i))).ID
	}
	mustApply(t, s,
		store.Change{JobID: ids[0], Move: domain.MoveHold(), Actor: "user:alice", At: at(10)},
		store.Change{JobID: ids[6], Move: domain.MoveHold(), Actor: "user:alice", At: at(11)},
	)
	pick := func(is ...int) []int64 {
		var out []int64
		for _, i := range is {
			out = append(out, ids[i])
		}
		return out
	}
	queuedHeld := states(domain.JobQueued, domain.JobHeld)
	tests := map[string]struct {
		f    store.JobFilter
		want []int64
	}{
		"owner":                  {store.JobFilter{Owner: "alice"}, pick(7, 6, 3, 2, 0)},
		"owner is exact":         {store.JobFilter{Owner: "Alice"}, nil},
		"owner is not a piece":   {store.JobFilter{Owner: "ali"}, nil},
		"pool":                   {store.JobFilter{Pool: "gpu"}, pick(6, 5, 2, 1)},
		"pool is exact":          {store.JobFilter{Pool: "gp"}, nil},
		"name":                   {store.JobFilter{NameContains: "resnet"}, pick(7, 6, 3, 1, 0)},
		"name in capitals":       {store.JobFilter{NameContains: "RESNET"}, pick(7, 6, 3, 1, 0)},
		"name in mixed case":     {store.JobFilter{NameContains: "Train-R"}, pick(6, 0)},
		"name whole":             {store.JobFilter{NameContains: "eval-resnet"}, pick(7)},
		"name longer than any":   {store.JobFilter{NameContains: "eval-resnet-"}, nil},
		"underscore is literal":  {store.JobFilter{NameContains: "train_"}, pick(1)},
		"lone underscore":        {store.JobFilter{NameContains: "_"}, pick(1)},
		"percent is literal":     {store.JobFilter{NameContains: "0%-d"}, pick(2)},
		"lone percent":           {store.JobFilter{NameContains: "%"}, pick(2)},
		"backslash is literal":   {store.JobFilter{NameContains: `k\s`}, pick(5)},
		"lone backslash":         {store.JobFilter{NameContains: `\`}, pick(5)},
		"escaped percent":        {store.JobFilter{NameContains: `\%`}, nil},
		"no name matches":        {store.JobFilter{NameContains: "nomatch"}, nil},
		"owner and pool":         {store.JobFilter{Owner: "alice", Pool: "gpu"}, pick(6, 2)},
		"all three":              {store.JobFilter{Owner: "bob", Pool: "gpu", NameContains: "RESNET"}, pick(1)},
		"with project":           {store.JobFilter{Project: "p", Owner: "bob"}, pick(4, 1)},
		"with other project":     {store.JobFilter{Project: "q", Owner: "bob"}, nil},
		"with a state":           {store.JobFilter{Owner: "alice", NameContains: "resnet", States: states(domain.JobHeld)}, pick(6, 0)},
		"with a state and limit": {store.JobFilter{Owner: "alice", NameContains: "resnet", States: states(domain.JobHeld), Limit: 1}, pick(6)},
		"with states and limit":  {store.JobFilter{NameContains: "resnet", States: queuedHeld, Limit: 2}, pick(7, 6)},
		"with states and cursor": {store.JobFilter{Pool: "gpu", States: queuedHeld, BeforeID: ids[6], Limit: 5}, pick(5, 2, 1)},
		"queued only":            {store.JobFilter{NameContains: "resnet", States: states(domain.JobQueued), Limit: 10}, pick(7, 3, 1)},
		"limit":                  {store.JobFilter{NameContains: "resnet", Limit: 2}, pick(7, 6)},
		"cursor":                 {store.JobFilter{NameContains: "resnet", BeforeID: ids[6], Limit: 2}, pick(3, 1)},
		"last page":              {store.JobFilter{NameContains: "resnet", BeforeID: ids[3], Limit: 2}, pick(1, 0)},
		"cursor past the last":   {store.JobFilter{NameContains: "resnet", BeforeID: ids[0], Limit: 2}, nil},
		"cursor without a limit": {store.JobFilter{Owner: "alice", Pool: "standard", BeforeID: ids[7]}, pick(3, 0)},
		"ascending":              {store.JobFilter{Ascending: true, Pool: "gpu", Limit: 3}, pick(1, 2, 5)},
		"restricted and own":     {store.JobFilter{Restrict: true, Submitter: "bob", Owner: "bob", NameContains: "done"}, pick(4)},
		"restricted to another":  {store.JobFilter{Restrict: true, Submitter: "carol", Owner: "bob"}, nil},
		"restricted by project":  {store.JobFilter{Restrict: true, Projects: []string{"p"}, Owner: "carol", Limit: 3}, pick(5)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := s.ListJobs(ctx, tc.f)
			if err != nil {
				t.Fatalf("ListJobs(%+v): %v", tc.f, err)
			}
			if gotIDs := jobIDs(got); !slices.Equal(gotIDs, tc.want) {
				t.Errorf("ListJobs(%+v) ids = %v, want %v", tc.f, gotIDs, tc.want)
			}
		})
	}

	// Paging by cursor through a filtered list visits what one unpaged
	// read returns, once each, in order.
	for _, f := range []store.JobFilter{
		{NameContains: "RESNET"}, {Owner: "alice", States: queuedHeld}, {Pool: "standard", NameContains: "e"},
	} {
		all, err := s.ListJobs(ctx, f)
		if err != nil {
			t.Fatalf("ListJobs(%+v): %v", f, err)
		}
		var paged []domain.Job
		page := f
		page.Limit = 2
		for range len(ids) {
			got, err := s.ListJobs(ctx, page)
			if err != nil {
				t.Fatalf("ListJobs(%+v): %v", page, err)
			}
			paged = append(paged, got...)
			if len(got) < page.Limit {
				break
			}
			page.BeforeID = got[len(got)-1].ID
		}
		if !slices.Equal(jobIDs(paged), jobIDs(all)) {
			t.Errorf("pages of 2 of %+v: ids %v, one read: %v", f, jobIDs(paged), jobIDs(all))
		}
	}
}
