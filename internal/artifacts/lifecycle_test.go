package artifacts

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
)

func intp(n int) *int { return &n }

func TestPlanLifecycle(t *testing.T) {
	now := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
	day := func(n int) time.Time { return now.AddDate(0, 0, -n) }
	ck := func(name string, age int, tiers string) domain.CheckpointRecord {
		c := domain.CheckpointRecord{Name: name, At: day(age), Size: int64(age)}
		if strings.Contains(tiers, "o") {
			c.Object = day(age)
		}
		if !strings.Contains(tiers, "l") {
			c.LocalGone = day(age)
		}
		return c
	}
	policies := []LifecyclePolicy{
		{KeepLocal: intp(2), DeleteAfter: domain.Duration(30 * 24 * time.Hour)},
		{Project: "vision", KeepLocal: intp(0)},
		{Project: "nlp", DeleteAfter: domain.Duration(7 * 24 * time.Hour)},
	}
	jobs := []LifecycleJob{
		// Default policy: s1 is past 30 days; of the rest the two newest
		// local ones stay; s3, already only in the object store, stays.
		{ID: 1, Project: "p", Checkpoints: []domain.CheckpointRecord{
			ck("s1", 40, "lo"), ck("s2", 20, "l"), ck("s3", 15, "o"), ck("s4", 10, "lo"), ck("s5", 5, "l"), ck("s6", 1, "l")}},
		// vision keeps none locally, except the one a running attempt resumed from.
		{ID: 2, Project: "vision", InUse: "v1", Checkpoints: []domain.CheckpointRecord{ck("v1", 3, "l"), ck("v2", 2, "l"), ck("v3", 100, "o")}},
		// nlp moves nothing.
		{ID: 3, Project: "nlp", Checkpoints: []domain.CheckpointRecord{ck("n1", 8, "l"), ck("n2", 6, "l")}},
	}
	var got []string
	for _, d := range PlanLifecycle(jobs, policies, now) {
		got = append(got, fmt.Sprintf("%d:%s:%s", d.JobID, d.Kind, d.Path))
	}
	want := "1:checkpoint:s1 1:move:s2 1:move:s4 2:move:v2 3:checkpoint:n1"
	if strings.Join(got, " ") != want {
		t.Fatalf("plan = %v\nwant   %s", got, want)
	}
}

func TestValidateLifecycle(t *testing.T) {
	for _, c := range []struct {
		ps     []LifecyclePolicy
		object bool
		want   string
	}{
		{[]LifecyclePolicy{{}}, true, "checkpoint_lifecycle[0]: set keep_local"},
		{[]LifecyclePolicy{{KeepLocal: intp(-1)}}, true, "checkpoint_lifecycle[0].keep_local: -1 is negative"},
		{[]LifecyclePolicy{{KeepLocal: intp(1)}}, false, "keep_local: moving checkpoints needs an object store"},
		{[]LifecyclePolicy{{DeleteAfter: -1}}, false, "delete_after: must be 0"},
		{[]LifecyclePolicy{{Project: "a", DeleteAfter: 1}, {Project: "a", KeepLocal: intp(1)}}, true, "checkpoint_lifecycle[1]: repeats the selector"},
		{[]LifecyclePolicy{{DeleteAfter: 1}, {Pool: "a", KeepLocal: intp(3)}}, true, ""},
	} {
		err := ValidateLifecycle(c.ps, c.object)
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("ValidateLifecycle(%+v) = %v, want %q", c.ps, err, c.want)
		}
	}
}
