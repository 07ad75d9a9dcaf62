package control

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// Workflows: jobs held for their dependencies (reason Dependency) and
// sweep members held for their sweep's max_parallel (reason SweepLimit).
// Each cycle looks only at what changed: the jobs that ended since the
// last (their waiters, their sweep), and the waiting jobs that appeared.
// After a full read of the view (a start, a resync) nothing is known of
// what changed between, and every waiting job and sweep is looked at.

// flows is what the view told of the jobs that changed, for workflows.
type flows struct {
	full    bool    // look at every waiting job and sweep
	ended   []int64 // jobs that ended (or may have: left the view)
	waiting []int64 // jobs seen held for a dependency
	limited []int64 // jobs seen held for their sweep's max_parallel
	sweeps  []int64 // sweeps seen with members held for max_parallel
}

// note takes in a job the view read as changed. A member newly held for
// its sweep's max_parallel (submitted so, or released by a person after
// a hold) has its sweep looked at: a place may have opened meanwhile.
func (f *flows) note(j domain.Job) {
	switch {
	case j.State.Terminal():
		f.ended = append(f.ended, j.ID)
	case j.State == domain.JobHeld && j.Reason == domain.ReasonDependency:
		f.waiting = append(f.waiting, j.ID)
	case j.State == domain.JobHeld && j.Reason == domain.ReasonSweepLimit:
		f.limited = append(f.limited, j.ID)
	}
}

// resolveWorkflows releases the waiting jobs whose dependencies are met,
// fails those whose dependencies can no longer be met, and releases the
// held members of sweeps with room under their max_parallel. A write
// that fails leaves the look to the next full one.
func (c *Controller) resolveWorkflows(ctx context.Context, now time.Time) {
	f := c.flows
	c.flows = flows{}
	waiting := map[int64]bool{}
	sweeps := map[int64]bool{}
	for _, id := range f.waiting {
		waiting[id] = true
	}
	for _, id := range f.sweeps {
		sweeps[id] = true
	}
	fail := func(what string, err error) {
		c.log.Error(what, "err", err)
		c.flows.full = true // look at everything again next cycle
	}
	if f.full {
		ids, err := c.cfg.Store.WaitingJobs(ctx)
		if err != nil {
			fail("list the jobs waiting for dependencies", err)
			return
		}
		for _, id := range ids {
			waiting[id] = true
		}
		sws, err := c.cfg.Store.WaitingSweeps(ctx)
		if err != nil {
			fail("list the sweeps with waiting members", err)
			return
		}
		for _, id := range sws {
			sweeps[id] = true
		}
	}
	if len(f.ended)+len(f.limited) > 0 {
		// One read for the sweeps of every job that ended or was held
		// for its sweep this cycle.
		sws, err := c.cfg.Store.SweepsOf(ctx, slices.Concat(f.ended, f.limited))
		if err != nil {
			fail("read the sweeps of ended jobs", err)
			return
		}
		for _, sw := range sws {
			sweeps[sw] = true
		}
	}
	if len(f.ended) > 0 {
		ws, err := c.cfg.Store.WaitersOn(ctx, f.ended, false)
		if err != nil {
			fail("list the jobs waiting for ended jobs", err)
			return
		}
		for _, w := range ws {
			waiting[w] = true
		}
	}
	var endedSweeps []int64
	for _, sw := range slices.Sorted(maps.Keys(sweeps)) {
		counts, err := c.fillSweep(ctx, sw, now)
		if err != nil {
			fail(fmt.Sprintf("release the waiting members of sweep %d", sw), err)
			return
		}
		if domain.SweepState(counts).Terminal() {
			endedSweeps = append(endedSweeps, sw)
		}
	}
	if len(endedSweeps) > 0 {
		ws, err := c.cfg.Store.WaitersOn(ctx, endedSweeps, true)
		if err != nil {
			fail("list the jobs waiting for ended sweeps", err)
			return
		}
		for _, w := range ws {
			waiting[w] = true
		}
	}
	for _, id := range slices.Sorted(maps.Keys(waiting)) {
		if err := c.judgeWaiting(ctx, id, now); err != nil {
			fail(fmt.Sprintf("decide whether job %d may start", id), err)
			return
		}
	}
}

// fillSweep releases as many of the sweep's members held for its
// max_parallel as it has room for, and returns its members' counts as
// they were before.
func (c *Controller) fillSweep(ctx context.Context, id int64, now time.Time) (map[domain.JobState]int, error) {
	counts, err := c.cfg.Store.SweepCounts(ctx, id)
	if err != nil {
		return nil, err
	}
	if counts[domain.JobHeld] == 0 {
		return counts, nil
	}
	sw, err := c.cfg.Store.GetSweep(ctx, id)
	if err != nil {
		return nil, err
	}
	if !sw.CanceledAt.IsZero() {
		return counts, nil // its members are being canceled
	}
	room := sw.MaxParallel - counts[domain.JobQueued] - counts[domain.JobStarting] - counts[domain.JobRunning]
	if sw.MaxParallel == 0 {
		room = counts[domain.JobHeld]
	}
	if room <= 0 {
		return counts, nil
	}
	ids, err := c.cfg.Store.HeldSweepMembers(ctx, id, domain.ReasonSweepLimit, room)
	if err != nil {
		return nil, err
	}
	changes := make([]store.Change, len(ids))
	for i, jid := range ids {
		changes[i] = store.Change{JobID: jid, Move: domain.MoveRelease().Only(domain.JobHeld),
			Reason: domain.ReasonReleased, Message: fmt.Sprintf("a place opened among the %d members of sweep %d that may run at once", sw.MaxParallel, id),
			Actor: actorScheduler, At: now}
	}
	if len(changes) > 0 {
		if _, err := c.cfg.Store.Apply(ctx, changes); err != nil {
			return nil, err
		}
		c.Wake()
	}
	return counts, nil
}

// judgeWaiting decides job id, if it is still held for its dependencies:
// release it (or, as a member of a sweep with a max_parallel, hold it for
// that instead) when every dependency is met; fail it when one can never
// be; otherwise say what it still waits for.
func (c *Controller) judgeWaiting(ctx context.Context, id int64, now time.Time) error {
	job, err := c.cfg.Store.GetJob(ctx, id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		return err
	}
	if job.State != domain.JobHeld || job.Reason != domain.ReasonDependency {
		return nil
	}
	deps, err := c.cfg.Store.WaitsOf(ctx, id)
	if err != nil {
		return err
	}
	states := make(map[string]domain.JobState, len(deps))
	var pending []domain.Dependency
	var never []string
	for i, d := range deps {
		st, err := c.targetState(ctx, d)
		if err != nil {
			return err
		}
		states[d.Target()] = st
		switch d.Judge(st) {
		case domain.DependNever:
			never = append(never, fmt.Sprintf("%s %s, and after[%d] needed it to %s", d.Target(), st, i, d.Verb()))
		case domain.DependPending:
			pending = append(pending, d)
		}
	}
	var ch store.Change
	switch {
	case len(never) > 0:
		ch = store.Change{JobID: id, Move: domain.MoveUnmet().Only(domain.JobHeld), Reason: domain.ReasonDependencyFailed,
			Message: strings.Join(never, "; ") + "; this job will never run (re-run it once the dependency is fixed)", Actor: actorScheduler, At: now}
	case len(pending) > 0:
		msg := domain.WaitMessage(pending, states)
		if msg == job.Message {
			return nil
		}
		ch = store.Change{JobID: id, In: []domain.JobState{domain.JobHeld}, SetReason: true, Reason: domain.ReasonDependency, Message: msg, At: now}
	default:
		met := "its dependencies are met: " + metList(deps, states)
		sw, err := c.cfg.Store.SweepOf(ctx, id)
		if err != nil {
			return err
		}
		var limit int
		if sw != 0 {
			s, err := c.cfg.Store.GetSweep(ctx, sw)
			if err != nil {
				return err
			}
			limit = s.MaxParallel
		}
		if limit > 0 {
			ch = store.Change{JobID: id, In: []domain.JobState{domain.JobHeld}, SetReason: true, Reason: domain.ReasonSweepLimit,
				Message: met + fmt.Sprintf("; waits for a place among the %d members of sweep %d that may run at once", limit, sw), At: now}
			c.flows.sweeps = append(c.flows.sweeps, sw)
		} else {
			ch = store.Change{JobID: id, Move: domain.MoveRelease().Only(domain.JobHeld), Reason: domain.ReasonReleased,
				Message: met, Actor: actorScheduler, At: now}
		}
	}
	if _, err := c.cfg.Store.Apply(ctx, []store.Change{ch}); err != nil {
		return err
	}
	c.Wake()
	return nil
}

// targetState is the state of what d waits for: a job's, or its sweep's
// (domain.SweepState).
func (c *Controller) targetState(ctx context.Context, d domain.Dependency) (domain.JobState, error) {
	if d.Sweep != 0 {
		counts, err := c.cfg.Store.SweepCounts(ctx, d.Sweep)
		if err != nil {
			return "", err
		}
		return domain.SweepState(counts), nil
	}
	j, err := c.cfg.Store.GetJob(ctx, d.Job)
	if err != nil {
		return "", err
	}
	return j.State, nil
}

func metList(deps []domain.Dependency, states map[string]domain.JobState) string {
	parts := make([]string, len(deps))
	for i, d := range deps {
		parts[i] = d.Target() + " " + string(states[d.Target()])
	}
	return strings.Join(parts, ", ")
}

// workflowEnv is what a job learns of its workflow: its sweep and index
// (TRAINYARD_SWEEP_ID, TRAINYARD_ARRAY_INDEX) and where each input is
// (TRAINYARD_INPUT_<NAME>, the name upper-cased with '-' as '_').
func workflowEnv(spec domain.Spec) []string {
	var env []string
	if v, ok := spec.Labels[domain.SweepLabel]; ok {
		env = append(env, "TRAINYARD_SWEEP_ID="+v)
	}
	if v, ok := spec.Labels[domain.ArrayIndexLabel]; ok {
		env = append(env, "TRAINYARD_ARRAY_INDEX="+v)
	}
	for _, in := range spec.Inputs {
		env = append(env, "TRAINYARD_INPUT_"+strings.ToUpper(strings.ReplaceAll(in.Name, "-", "_"))+"="+in.Path)
	}
	return env
}
