package service_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite/sqlitetest"
)

// ResourceHistory is read as the job is: its submitter and a viewer of
// its project read it, another member is refused, as is a job of a
// project one has no role in. Attempt 0 is the latest; an attempt the job
// does not have is not found; none is kept without SampleHistory.
func TestResourceHistoryReadsAsTheJob(t *testing.T) {
	ctx := context.Background()
	st := sqlitetest.Open(t, t.TempDir())
	at := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	var asked []string
	svc := service.New(service.Config{Store: st, SampleHistory: func(id int64, attempt int) []domain.ResourceSample {
		asked = append(asked, fmt.Sprintf("%d/%d", id, attempt))
		return []domain.ResourceSample{{At: at, CPUSeconds: 3, RSSBytes: 1 << 30}, {At: at.Add(15 * time.Second), CPUSeconds: 18, RSSBytes: 2 << 30}}
	}})
	spec := domain.Spec{Name: "plain", Project: "vision", Pool: "default", Entrypoint: []string{"train"},
		Resources: domain.Resources{CPUs: 1, Memory: 1 << 30, Nodes: 1}}
	job := storeJob(t, st, spec) // submitted by alice

	// Queued, never started: nothing, and the sampler is not asked.
	if h, err := svc.Jobs.ResourceHistory(ctx, admin, job.ID, 0); err != nil || h != nil || len(asked) != 0 {
		t.Fatalf("queued job: %+v, %v (asked %v); want none", h, err, asked)
	}
	for n := 1; n <= 2; n++ {
		move := domain.MoveStart()
		if n == 2 {
			// Attempt 1 fails and the job is queued again, then started.
			fail := store.Change{JobID: job.ID, Move: domain.MoveRequeue(), At: time.Now(),
				Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptFailed}}
			if errs, err := st.Apply(ctx, []store.Change{fail}); err != nil || errs[0] != nil {
				t.Fatalf("retry: %v %v", err, errs)
			}
		}
		start := store.Change{JobID: job.ID, Move: move, At: time.Now(),
			Attempt: &store.AttemptChange{Number: n, Create: true, To: domain.AttemptStarting, Node: "n1"}}
		if errs, err := st.Apply(ctx, []store.Change{start}); err != nil || errs[0] != nil {
			t.Fatalf("start attempt %d: %v %v", n, err, errs)
		}
	}

	owner := service.Principal{Subject: "alice", Projects: []domain.ProjectRole{{Project: "vision", Role: domain.RoleMember}}}
	viewer := service.Principal{Subject: "carol", Projects: []domain.ProjectRole{{Project: "vision", Role: domain.RoleViewer}}}
	for name, p := range map[string]service.Principal{"admin": admin, "owner": owner, "viewer": viewer} {
		asked = nil
		h, err := svc.Jobs.ResourceHistory(ctx, p, job.ID, 0)
		if err != nil || len(h) != 2 || h[1].CPUSeconds != 18 {
			t.Errorf("%s: %+v, %v; want the two readings", name, h, err)
		}
		if want := []string{fmt.Sprintf("%d/2", job.ID)}; !slices.Equal(asked, want) {
			t.Errorf("%s: asked the sampler for %v, want %v (attempt 0 is the latest)", name, asked, want)
		}
	}
	asked = nil
	if _, err := svc.Jobs.ResourceHistory(ctx, owner, job.ID, 1); err != nil || !slices.Equal(asked, []string{fmt.Sprintf("%d/1", job.ID)}) {
		t.Errorf("attempt 1: %v, asked %v", err, asked)
	}

	asked = nil
	refused := map[string]service.Principal{
		"another member":  {Subject: "bob", Projects: []domain.ProjectRole{{Project: "vision", Role: domain.RoleMember}}},
		"another project": {Subject: "dave", Projects: []domain.ProjectRole{{Project: "nlp", Role: domain.RoleLead}}},
	}
	for name, p := range refused {
		// A refused read does not tell the job exists: not found.
		if h, err := svc.Jobs.ResourceHistory(ctx, p, job.ID, 0); h != nil || !errors.Is(err, domain.ErrForbidden) && !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("%s: %+v, %v; want refused", name, h, err)
		}
		// Refused exactly as reading the job is.
		_, jobErr := svc.Jobs.Show(ctx, p, job.ID)
		if _, err := svc.Jobs.ResourceHistory(ctx, p, job.ID, 0); jobErr == nil || err.Error() != jobErr.Error() {
			t.Errorf("%s: refused with %v; reading the job is refused with %v", name, err, jobErr)
		}
	}
	if len(asked) != 0 {
		t.Errorf("the sampler was asked for refused callers: %v", asked)
	}

	for _, n := range []int{3, -1} {
		if _, err := svc.Jobs.ResourceHistory(ctx, admin, job.ID, n); !errors.Is(err, domain.ErrNotFound) {
			t.Errorf("attempt %d: %v, want not found", n, err)
		}
	}
	if _, err := svc.Jobs.ResourceHistory(ctx, admin, job.ID+100, 0); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("no such job: %v, want not found", err)
	}
	off := service.New(service.Config{Store: st})
	if h, err := off.Jobs.ResourceHistory(ctx, admin, job.ID, 0); err != nil || h != nil {
		t.Errorf("without SampleHistory: %+v, %v; want none", h, err)
	}
}
