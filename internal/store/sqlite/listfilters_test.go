package sqlite

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"slices"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// A list by submitter, pool or a piece of the name answers from the
// detail cache what the database answers: the first page (ids from the
// database, rows from the cache) and a page after a cursor (the cache
// alone, which applies the filter itself). The name matches as SQLite's
// LIKE does: ASCII letters of either case, every other letter only as
// written (no Unicode case folding: not É for é, not the Kelvin sign for
// K, not ß for SS).
func TestCachedListsByOwnerPoolAndName(t *testing.T) {
	s := openTest(t)
	ctx := context.Background()
	subs := []struct{ name, submitter, pool string }{
		{"train-Resnet", "alice", "standard"}, // 0
		{"train_resnet", "bob", "gpu"},        // 1
		{"100%-done", "alice", "gpu"},         // 2
		{"trainXresnet", "alice", "standard"}, // 3
		{"1000-done", "bob", "standard"},      // 4
		{`back\slash`, "carol", "gpu"},        // 5
		{"Éclair", "alice", "gpu"},            // 6
		{"éclair", "bob", "standard"},         // 7
		{"\u212a-run", "carol", "standard"},   // 8: the Kelvin sign
		{"k-run", "alice", "gpu"},             // 9
		{"STRASSE", "bob", "gpu"},             // 10
		{"straße", "alice", "standard"},       // 11
	}
	ids := make([]int64, len(subs))
	for i, x := range subs {
		p := testNewJob(t, x.name)
		p.Spec.Pool = x.pool
		b, err := json.Marshal(p.Spec)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		p.SpecJSON, p.SpecHash = b, "sha256:"+hex.EncodeToString(sum[:])
		p.Submitter, p.Actor = x.submitter, "user:"+x.submitter
		j, _, err := s.CreateJob(ctx, p, testAudit)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = j.ID
	}
	if errs, err := s.Apply(ctx, []store.Change{{JobID: ids[9], Move: domain.MoveHold(), Actor: "test", At: t0}}); err != nil || errs[0] != nil {
		t.Fatalf("hold: %v, %v", errs, err)
	}
	for _, id := range ids { // every job cached
		if _, err := s.JobDetail(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	pick := func(is ...int) []int64 {
		var out []int64
		for _, i := range is {
			out = append(out, ids[i])
		}
		return out
	}
	held := []domain.JobState{domain.JobHeld}
	for _, tc := range []struct {
		f    store.JobFilter
		want []int64 // the whole list, newest first
	}{
		{store.JobFilter{Owner: "bob"}, pick(10, 7, 4, 1)},
		{store.JobFilter{Pool: "gpu"}, pick(10, 9, 6, 5, 2, 1)},
		{store.JobFilter{NameContains: "RESNET"}, pick(3, 1, 0)},
		{store.JobFilter{NameContains: "train_"}, pick(1)},
		{store.JobFilter{NameContains: "0%-d"}, pick(2)},
		{store.JobFilter{NameContains: `\`}, pick(5)},
		{store.JobFilter{NameContains: "ÉCLAIR"}, pick(6)},
		{store.JobFilter{NameContains: "é"}, pick(7)},
		{store.JobFilter{NameContains: "K-RUN"}, pick(9)},
		{store.JobFilter{NameContains: "\u212a"}, pick(8)},
		{store.JobFilter{NameContains: "ss"}, pick(10)},
		{store.JobFilter{NameContains: "ß"}, pick(11)},
		{store.JobFilter{Owner: "alice", Pool: "gpu", NameContains: "R"}, pick(9, 6)},
		{store.JobFilter{Owner: "alice", NameContains: "k", States: held}, pick(9)},
		{store.JobFilter{Pool: "standard", States: []domain.JobState{domain.JobQueued, domain.JobHeld}}, pick(11, 8, 7, 4, 3, 0)},
	} {
		for _, page := range []struct {
			limit  int
			before int64
		}{{5, 0}, {100, 0}, {5, ids[len(ids)-1] + 1}, {3, ids[8]}, {2, ids[4]}} {
			f := tc.f
			f.Limit, f.BeforeID = page.limit, page.before
			var want []int64
			for _, id := range tc.want {
				if (f.BeforeID == 0 || id < f.BeforeID) && len(want) < f.Limit {
					want = append(want, id)
				}
			}
			before := s.DetailCacheStats()
			cached, cerr := s.ListJobs(ctx, f)
			after := s.DetailCacheStats()
			fresh, ferr := s.Shared.ListJobs(ctx, f)
			if cerr != nil || ferr != nil || !reflect.DeepEqual(cached, fresh) {
				t.Errorf("ListJobs(%+v): from the cache %+v, %v;\nfrom the database %+v, %v", f, cached, cerr, fresh, ferr)
				continue
			}
			var got []int64
			for _, j := range cached {
				got = append(got, j.ID)
			}
			if !slices.Equal(got, want) {
				t.Errorf("ListJobs(%+v) ids = %v, want %v", f, got, want)
			}
			// Every page here comes from the cache: every job is cached,
			// and a cursor's page scans few enough ids.
			if after.Misses != before.Misses || after.Hits-before.Hits != int64(len(got)) {
				t.Errorf("ListJobs(%+v): %d misses and %d hits, want none and %d", f,
					after.Misses-before.Misses, after.Hits-before.Hits, len(got))
			}
			if wantPages := int64(min(f.BeforeID, 1)); after.CursorPages-before.CursorPages != wantPages {
				t.Errorf("ListJobs(%+v): %d pages from the cache alone, want %d", f, after.CursorPages-before.CursorPages, wantPages)
			}
		}
	}
}
