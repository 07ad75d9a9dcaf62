package control

import (
	"context"
	"fmt"
	"time"

	"trainyard/internal/cost"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/store"
)

// budgetRefresh is how old a project's priced spend may be before a start
// of one of its jobs reads the history again. In between, the jobs
// admitted count at their worst case, and running attempts already count
// at theirs, so the committed spend never reads lower than it is.
const budgetRefresh = 15 * time.Second

// budgets enforces the projects' blocking budgets at the starts the
// scheduler plans (admit) and suspends what runs over a suspend budget.
// Loop goroutine only.
type budgets struct {
	byProject map[string]domain.Budget // every budget, as of the last pass
	// seen is each budget's version as of the last pass: a change
	// releases the project's held jobs, to be admitted again.
	seen      map[string]budgetVersion
	uses      map[string]*budgetUse
	suspended map[int64]bool // jobs stopped for a suspend budget, not yet requeued
	loaded    bool
}

// budgetUse is a project's priced spend, computed at, and the worst cases
// of the jobs admitted since.
type budgetUse struct {
	at       time.Time
	use      cost.Use
	admitted cost.Admitted
}

func newBudgets() *budgets {
	return &budgets{byProject: map[string]domain.Budget{}, seen: map[string]budgetVersion{},
		uses: map[string]*budgetUse{}, suspended: map[int64]bool{}}
}

// budgetVersion is what a budget change (every write sets UpdatedAt) or
// a period roll changes; period is "" while the budget is not in force.
type budgetVersion struct {
	updated time.Time
	period  string
}

func versionOf(b domain.Budget, now time.Time) budgetVersion {
	_, _, period, _ := b.Window(now)
	return budgetVersion{b.UpdatedAt, period}
}

// loadBudgets reads the budgets for this pass and returns the releases of
// the jobs held for a budget that changed, rolled into a new period or
// went (on the first pass: every held one, as the budgets may have
// changed while no loop ran).
func (c *Controller) loadBudgets(ctx context.Context, now time.Time) ([]store.Change, error) {
	bs, err := c.cfg.Store.ListBudgets(ctx)
	if err != nil {
		return nil, err
	}
	g := c.budget
	changed := map[string]bool{}
	next := make(map[string]domain.Budget, len(bs))
	for _, b := range bs {
		next[b.Project] = b
		v := versionOf(b, now)
		if g.seen[b.Project] != v {
			changed[b.Project] = true
			g.seen[b.Project] = v
			delete(g.uses, b.Project)
		}
	}
	for p := range g.byProject {
		if _, ok := next[p]; !ok {
			changed[p] = true
			delete(g.seen, p)
			delete(g.uses, p)
		}
	}
	g.byProject = next
	first := !g.loaded
	g.loaded = true
	if len(changed) == 0 && !first {
		return nil, nil
	}
	// Held jobs are few; read them only when a budget moved.
	held, err := c.cfg.Store.ListJobs(ctx, store.JobFilter{States: []domain.JobState{domain.JobHeld}})
	if err != nil {
		return nil, err
	}
	var out []store.Change
	for _, j := range held {
		if j.Reason != domain.ReasonBudgetExceeded || !first && !changed[j.Project] {
			continue
		}
		out = append(out, store.Change{JobID: j.ID, Move: domain.MoveRelease().Only(domain.JobHeld),
			Reason: domain.ReasonReleased, Message: "budget of project " + j.Project + " changed or its period began: queued again",
			Actor: actorScheduler, At: now})
	}
	return out, nil
}

// attemptEnded forgets the priced spend of project when its budget
// limits the spend rate: the running jobs' rate fell, and a job waiting
// for it should not wait for the next refresh. (Under an amount alone a
// stale reading only counts the ended attempt at its worst case.)
func (g *budgets) attemptEnded(project string) {
	if b, ok := g.byProject[project]; ok && b.MaxRate > 0 {
		delete(g.uses, project)
	}
}

// budgetUse returns the project's current spend against b (in force at
// now), reading the history when what it has is older than budgetRefresh
// or of another period.
func (c *Controller) budgetUse(ctx context.Context, b domain.Budget, now time.Time) (*budgetUse, error) {
	g := c.budget
	u := g.uses[b.Project]
	if u != nil && now.Sub(u.at) < budgetRefresh && now.Before(u.use.To) {
		return u, nil
	}
	uses, err := store.BudgetUses(ctx, c.cfg.Store, []domain.Budget{b}, now)
	if err != nil {
		return nil, err
	}
	u = &budgetUse{at: now, use: uses[b.Project]}
	g.uses[b.Project] = u
	return u, nil
}

// admit decides whether job j may start under its project's budget, and
// counts its worst case and rate when it may. A job of a project without a
// blocking budget in force always may. why is the message; wait says the
// job waits queued for running jobs to end (a spend-rate limit) rather
// than held until the budget changes.
func (c *Controller) admit(ctx context.Context, j domain.Job, rates map[string]domain.Rates, now time.Time) (ok bool, why string, wait bool) {
	b, has := c.budget.byProject[j.Project]
	if !has || !b.Action.Blocks() {
		return true, "", false
	}
	if _, _, _, in := b.Window(now); !in {
		return true, "", false
	}
	u, err := c.budgetUse(ctx, b, now)
	if err != nil {
		// Without the history the budget cannot be checked: the job waits
		// for the next pass rather than spending past it.
		c.log.Error("read attempt history for a budget", "project", j.Project, "err", err)
		return false, "", true
	}
	jc := cost.JobCost(j.Resources, rates[j.Pool], j.Timeout.D())
	if ok, why, wait = cost.Admit(u.use, u.admitted, jc, c.cfg.Currency); ok {
		u.admitted.Add(jc)
	}
	return ok, why, wait
}

// suspendOverBudget stops, as preemptions, the running preemptible jobs of
// projects whose suspend budget is spent: they checkpoint and requeue, and
// admit holds them when they would start again.
func (c *Controller) suspendOverBudget(ctx context.Context, now time.Time) {
	g := c.budget
	for id := range g.suspended {
		if j, ok := c.view[id]; !ok || j.State != domain.JobRunning && j.State != domain.JobStarting {
			delete(g.suspended, id)
		}
	}
	var over map[string]string
	for _, b := range g.byProject {
		if b.Action != domain.BudgetSuspend {
			continue
		}
		if _, _, _, in := b.Window(now); !in {
			continue
		}
		u, err := c.budgetUse(ctx, b, now)
		if err != nil {
			c.log.Error("read attempt history for a budget", "project", b.Project, "err", err)
			continue
		}
		if u.use.Spent >= b.Amount {
			if over == nil {
				over = map[string]string{}
			}
			over[b.Project] = fmt.Sprintf("suspended: project %s has spent %s of its %s %s budget for %s",
				b.Project, u.use.Spent, b.Amount, c.cfg.Currency, u.use.Period)
		}
	}
	if over == nil {
		return
	}
	var changes []store.Change
	var jobs []domain.Job
	for _, id := range c.viewIDs {
		j := c.view[id]
		msg, ok := over[j.Project]
		if !ok || j.State != domain.JobRunning || !j.Preemptible || j.PreemptRequested || j.CancelRequested || g.suspended[id] {
			continue
		}
		changes = append(changes, store.Change{JobID: id, In: []domain.JobState{domain.JobStarting, domain.JobRunning},
			RequestPreempt: true, SetReason: true, Reason: domain.ReasonBudgetExceeded, Message: msg, At: now})
		jobs = append(jobs, j)
	}
	if len(changes) == 0 {
		return
	}
	errs, err := c.cfg.Store.Apply(ctx, changes)
	if err != nil {
		c.log.Error("suspend jobs over budget", "err", err)
		return
	}
	for i, j := range jobs {
		if errs[i] != nil {
			continue
		}
		g.suspended[j.ID] = true
		c.log.Info("suspending a job over its project's budget", "job", j.ID, "project", j.Project)
		c.stop(ctx, executor.Ref{JobID: j.ID, Attempt: j.Attempts},
			executor.StopRequest{Reason: domain.ReasonPreempted, Message: changes[i].Message})
	}
}
