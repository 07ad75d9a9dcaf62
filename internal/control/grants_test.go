package control_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/clock"
	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
)

// grantObserver records what the loop says about ending grants.
type grantObserver struct {
	*holdObserver
	mu      sync.Mutex
	notices [][]domain.GrantNotice
}

func (o *grantObserver) GrantsExpiring(n []domain.GrantNotice) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.notices = append(o.notices, slices.Clone(n))
}

func (o *grantObserver) last() (calls int, last []domain.GrantNotice) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.notices) == 0 {
		return 0, nil
	}
	return len(o.notices), o.notices[len(o.notices)-1]
}

// running keeps every attempt running until it is stopped.
func running(l executor.Launch) []executor.Event {
	return []executor.Event{{Kind: executor.Started, At: time.Now().UTC(), PID: 1000 + int(l.Ref.JobID)}}
}

// When an approved grant's date passes, the job running beyond the
// project's quota without it — the younger one, though not preemptible —
// is preempted with a message naming the grant and its expiry, requeues
// and waits under the quota; the job within the quota keeps running. A
// grant that lapsed while no loop ran is reclaimed by the next loop.
func TestExpiredGrantReclaimsItsCapacity(t *testing.T) {
	t.Run("while the loop runs", func(t *testing.T) { testGrantReclaim(t, false) })
	t.Run("while no loop ran", func(t *testing.T) { testGrantReclaim(t, true) })
}

func testGrantReclaim(t *testing.T, restart bool) {
	start := time.Date(2026, 5, 1, 9, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	obs := &grantObserver{holdObserver: &holdObserver{}}
	r := newTunedRig(t, &executortest.Fake{Script: running}, func(c *control.Config) {
		c.Clock, c.Interval, c.Observer, c.GrantWarning = clk, 5*time.Millisecond, obs, 30*time.Minute
	})
	ctx := context.Background()
	if _, err := r.svc.Pools.SetQuota(ctx, admin, domain.Quota{Project: "default", Pool: "default",
		Guaranteed: domain.Limits{GPUs: 1}, MaxPriority: domain.PriorityUrgent}); err != nil {
		t.Fatal(err)
	}
	// A second project's quota keeps the pool from being open to all.
	if _, err := r.svc.Pools.SetQuota(ctx, admin, domain.Quota{Project: "other", Pool: "default", Guaranteed: domain.Limits{GPUs: 1}}); err != nil {
		t.Fatal(err)
	}
	until := start.Add(time.Hour)
	rec := domain.AuditRecord{At: start, Actor: "user:admin", Action: "quota.request", Target: "quota/default/default", Result: domain.AuditOK}
	g, err := r.st.CreateRequest(ctx, domain.QuotaRequest{Project: "default", Pool: "default", Extra: domain.Limits{GPUs: 1},
		Until: until, Reason: "paper deadline", Requester: "alice", State: domain.RequestPending, CreatedAt: start}, rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.st.DecideRequest(ctx, g.ID, domain.RequestApproved, "boss", start, "ok", rec); err != nil {
		t.Fatal(err)
	}

	spec := "entrypoint: [train]\nresources: {gpus: 1}\npolicy: {preemptible: false}\n"
	within := r.submit("name: within\n" + spec)
	r.wait(within.ID, domain.JobRunning)
	beyond := r.submit("name: beyond\n" + spec) // runs on the grant
	r.wait(beyond.ID, domain.JobRunning)

	if calls, last := obs.last(); calls == 0 || len(last) != 0 {
		t.Fatalf("before the warning: %d calls, last %+v; want an empty list told", calls, last)
	}
	// Within grant_warning of its end, the job its end will preempt is
	// told, once; the job within the quota is not.
	clk.Advance(40 * time.Minute)
	r.ctl.Wake()
	poll(t, "the warning", func() bool { _, last := obs.last(); return len(last) == 1 })
	if _, last := obs.last(); last[0].Job.ID != beyond.ID || last[0].Attempt != 1 || last[0].Grant.ID != g.ID {
		n := last[0]
		t.Fatalf("notice = job %d attempt %d grant %d, want job %d attempt 1 grant %d", n.Job.ID, n.Attempt, n.Grant.ID, beyond.ID, g.ID)
	}
	if restart {
		r.stop()
		r.stop = nil
		clk.Advance(20 * time.Minute)
		r.start()
	} else {
		clk.Advance(20 * time.Minute)
		r.ctl.Wake()
	}
	r.wait(beyond.ID, domain.JobQueued)
	wantMsg := fmt.Sprintf("compute grant %d (+1 GPUs for project default in pool default) expired at 2026-05-01 10:00:00 UTC", g.ID)
	atts := r.attempts(beyond.ID)
	if len(atts) != 1 || atts[0].State != domain.AttemptPreempted || !strings.Contains(atts[0].Message, wantMsg) {
		t.Fatalf("attempts of the job beyond the quota = %+v, want one preempted, naming the grant", atts)
	}
	events, err := r.st.ListEvents(ctx, beyond.ID)
	if err != nil || !strings.Contains(events[len(events)-1].Message, wantMsg) || events[len(events)-1].Reason != domain.ReasonPreempted {
		t.Fatalf("last event = %+v, %v; want the requeue naming the grant", events[len(events)-1], err)
	}
	why, err := r.svc.Jobs.Explain(ctx, admin, beyond.ID)
	if err != nil || !slices.ContainsFunc(why.Evidence, func(e string) bool {
		return strings.HasPrefix(e, "attempt 1 was preempted: "+wantMsg)
	}) {
		t.Errorf("why = %q, %v; want the preemption naming the grant among the evidence", why.Evidence, err)
	}
	// It waits under the quota, and the job within it keeps running.
	deadline := time.Now().Add(10 * time.Second)
	for {
		j, err := r.st.GetJob(ctx, beyond.ID)
		if err != nil {
			t.Fatal(err)
		}
		if j.State != domain.JobQueued {
			t.Fatalf("the preempted job is %s again (%s) though the quota is used", j.State, j.Message)
		}
		if j.Reason == domain.ReasonQuotaExceeded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the preempted job waits with %s (%s), want QuotaExceeded", j.Reason, j.Message)
		}
		time.Sleep(time.Millisecond) // polling the store
	}
	if j := r.wait(within.ID, domain.JobRunning, domain.JobQueued); j.State != domain.JobRunning || len(r.attempts(within.ID)) != 1 {
		t.Fatalf("the job within the quota is %s after %d attempts, want running its first", j.State, len(r.attempts(within.ID)))
	}
	if n := len(r.ex.Stops()); n != 1 {
		t.Errorf("%d stops, want 1 (the job beyond the quota)", n)
	}
	// The notice was told once, and withdrawn once the job was preempted.
	obs.mu.Lock()
	defer obs.mu.Unlock()
	told := 0
	for _, n := range obs.notices {
		if len(n) > 0 {
			told++
		}
	}
	if last := obs.notices[len(obs.notices)-1]; told != 1 || len(last) != 0 {
		t.Errorf("notices told %d times, last %+v; want once, then none", told, last)
	}
}
