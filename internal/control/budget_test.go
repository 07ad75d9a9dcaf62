package control_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
)

// runForever keeps every attempt running until it is stopped.
func runForever(l executor.Launch) []executor.Event {
	return []executor.Event{{Kind: executor.Started, At: time.Now().UTC(), PID: 1000 + int(l.Ref.JobID)}}
}

// rated gives the rig's pool a price of 10.00 per GPU-hour.
func (r *rig) rated() {
	r.t.Helper()
	ctx := context.Background()
	p, err := r.st.GetPool(ctx, "default")
	if err != nil {
		r.t.Fatal(err)
	}
	p.Rates = domain.Rates{GPUHour: 10 * domain.MoneyUnit}
	if _, _, err := r.svc.Pools.PutPool(ctx, admin, p); err != nil {
		r.t.Fatal(err)
	}
	// A pass under way may have read the pools before the change and
	// plan a job submitted next at no cost; the loop's next start reads
	// them afresh.
	r.restart()
}

func (r *rig) budget(amount domain.Money, action domain.BudgetAction) {
	r.t.Helper()
	if _, err := r.svc.Cost.SetBudget(context.Background(), admin, domain.Budget{Project: "default", Amount: amount,
		Period: domain.BudgetMonthly, Action: action}); err != nil {
		r.t.Fatal(err)
	}
}

// A block budget admits a job while its worst case fits on top of what
// the project has committed, holds the next one with the numbers, and
// releases it when the budget is raised.
func TestBlockBudgetHoldsWhatWouldCrossIt(t *testing.T) {
	r := newRig(t, &executortest.Fake{Script: runForever})
	r.rated()
	r.budget(100*domain.MoneyUnit, domain.BudgetBlock)
	// 1 GPU for at most 5 h: 50.00 at worst.
	a := r.submit("name: a\nentrypoint: [train]\nresources: {gpus: 1}\npolicy: {timeout: 5h}\n")
	r.wait(a.ID, domain.JobRunning)
	// 1 GPU for 6 h: 60.00 more, past 100.00 with a's 50.00.
	b := r.submit("name: b\nentrypoint: [train]\nresources: {gpus: 1}\npolicy: {timeout: 6h}\n")
	held := r.wait(b.ID, domain.JobHeld)
	for _, want := range []string{"of its 100.00", "budget for " + time.Now().UTC().Format("2006-01"), "up to 60.00 more"} {
		if held.Reason != domain.ReasonBudgetExceeded || !strings.Contains(held.Message, want) {
			t.Fatalf("held job: %s %q; want BudgetExceeded saying %q", held.Reason, held.Message, want)
		}
	}
	why, err := r.svc.Jobs.Explain(context.Background(), admin, b.ID)
	if err != nil || !strings.Contains(why.Hint, "trainyard budget set default") || !strings.Contains(strings.Join(why.Evidence, "; "), "up to 60.00 more") {
		t.Fatalf("why = %+v, %v; want the budget's numbers and how to raise it", why, err)
	}
	// 1 GPU for 4 h (40.00) still fits beside a.
	c := r.submit("name: c\nentrypoint: [train]\nresources: {gpus: 1}\npolicy: {timeout: 4h}\n")
	r.wait(c.ID, domain.JobRunning)
	if j, _ := r.st.GetJob(context.Background(), b.ID); j.State != domain.JobHeld {
		t.Fatalf("b is %s after c started, want still held", j.State)
	}
	r.budget(200*domain.MoneyUnit, domain.BudgetBlock)
	r.wait(b.ID, domain.JobRunning)
}

// A notify budget never holds a job.
func TestNotifyBudgetNeverHolds(t *testing.T) {
	r := newRig(t, &executortest.Fake{Script: runForever})
	r.rated()
	r.budget(domain.MoneyUnit, domain.BudgetNotify)
	j := r.submit("name: a\nentrypoint: [train]\nresources: {gpus: 1}\npolicy: {timeout: 5h}\n")
	r.wait(j.ID, domain.JobRunning)
}

// A suspend budget that is spent stops the project's running preemptible
// jobs as preemptions and holds them when they would start again.
func TestSuspendBudgetStopsAndHoldsPreemptibleJobs(t *testing.T) {
	r := newRig(t, &executortest.Fake{Script: runForever})
	r.rated()
	j := r.submit("name: a\nentrypoint: [train]\nresources: {gpus: 1}\npolicy: {timeout: 5h, preemptible: true, reentrant: true}\n")
	r.wait(j.ID, domain.JobRunning)
	// Any spend at all reaches a budget of a millionth.
	r.budget(1, domain.BudgetSuspend)
	held := r.wait(j.ID, domain.JobHeld)
	if held.Reason != domain.ReasonBudgetExceeded {
		t.Fatalf("suspended job: %s %q; want held for BudgetExceeded", held.Reason, held.Message)
	}
	atts := r.attempts(j.ID)
	if len(atts) != 1 || atts[0].State != domain.AttemptPreempted {
		t.Fatalf("attempts = %+v; want one, preempted", atts)
	}
	reqs := r.ex.StopRequests()
	if len(reqs) != 1 || !strings.Contains(reqs[0].Message, "suspended: project default has spent") {
		t.Fatalf("stop requests = %+v", reqs)
	}
}

// A spend-rate limit keeps a job queued, saying why, while the project's
// running jobs cost too much per hour to add it, and starts it once one
// of them ends.
func TestSpendRateLimitWaitsForRunningJobs(t *testing.T) {
	r := newRig(t, &executortest.Fake{Script: runForever})
	r.rated()
	if _, err := r.svc.Cost.SetBudget(context.Background(), admin, domain.Budget{Project: "default", Amount: 1000 * domain.MoneyUnit,
		Period: domain.BudgetMonthly, Action: domain.BudgetBlock, MaxRate: 15 * domain.MoneyUnit}); err != nil {
		t.Fatal(err)
	}
	a := r.submit("name: a\nentrypoint: [train]\nresources: {gpus: 1}\npolicy: {timeout: 5h}\n")
	r.wait(a.ID, domain.JobRunning)
	b := r.submit("name: b\nentrypoint: [train]\nresources: {gpus: 1}\npolicy: {timeout: 5h}\n")
	deadline := time.Now().Add(10 * time.Second)
	for {
		j, err := r.st.GetJob(context.Background(), b.ID)
		if err != nil {
			t.Fatal(err)
		}
		if j.State == domain.JobQueued && j.Reason == domain.ReasonBudgetExceeded {
			if !strings.Contains(j.Message, "cost 10.00 USD an hour, and this job would add 10.00, past its limit of 15.00") {
				t.Fatalf("waiting message %q", j.Message)
			}
			break
		}
		if j.State != domain.JobQueued || time.Now().After(deadline) {
			t.Fatalf("b is %s (%s: %s), want queued for the rate limit", j.State, j.Reason, j.Message)
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := r.svc.Jobs.Cancel(context.Background(), admin, a.ID, ""); err != nil {
		t.Fatal(err)
	}
	r.wait(b.ID, domain.JobRunning)
}
