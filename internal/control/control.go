// Package control runs the loop that moves jobs: it loads a snapshot from the
// store, asks the scheduler for a plan, applies the plan with guarded store
// changes, launches and stops attempts through the executor, and records the
// executor's events as guarded transitions.
//
// Only the loop goroutine (Run) touches the Controller's maps, so they need no
// locking. The loop is the single writer of job state, except that the service
// layer cancels queued jobs directly — a guarded update, so the two never
// overwrite each other.
package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"trainyard/internal/blob"
	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/logs"
	"trainyard/internal/scheduler"
	"trainyard/internal/scheduler/incremental"
	"trainyard/internal/store"
)

// Actors recorded on transitions made by the loop.
const (
	actorScheduler = "system:scheduler"
	actorExecutor  = "system:executor"
)

// Config wires a Controller.
type Config struct {
	Store    Store
	Executor executor.Executor
	Clock    clock.Clock
	Logger   *slog.Logger
	Logs     logs.Layout
	// StateDir holds the loop's own files on disk (the attempts whose
	// outputs are owed, artifacts.go); empty: "state" beside Logs.Root.
	StateDir string
	// BaseEnv is the environment every job starts from (PATH, LANG, TZ);
	// the job's own variables are added on top.
	BaseEnv []string
	// Grace is how long a stopped or timed-out process gets between SIGTERM
	// and SIGKILL when its job sets no policy.grace (default 10s); MaxGrace
	// caps a job's policy.grace, and Grace (default domain.MaxGraceDefault).
	Grace    time.Duration
	MaxGrace time.Duration
	// LogLimit is the server's log limit per attempt: the default and
	// ceiling of jobs in pools without their own (domain.EffectiveLogLimit);
	// 0 is none.
	LogLimit domain.ByteSize
	// RetryBackoff is the delay before the first retry; it doubles per
	// attempt up to MaxBackoff (defaults 10s and 5m).
	RetryBackoff time.Duration
	MaxBackoff   time.Duration
	// Interval is the longest the loop sleeps without a wake-up (default 2s).
	Interval time.Duration
	// LaunchConcurrency bounds parallel executor.Launch calls (default 8).
	LaunchConcurrency int
	// Scheduler tunes the scheduler (fair-share half-life, preemption bound).
	Scheduler scheduler.Config
	// JobTokens issues each attempt a token that may only report for that
	// attempt (exported as TRAINYARD_JOB_TOKEN) and revokes it when the
	// attempt ends. Nil: jobs get no token.
	JobTokens JobTokens
	// APIURL is the server's URL, exported to jobs as TRAINYARD_API.
	APIURL string
	// UsageRefresh is how often fair-share usage is recomputed from the
	// attempt history (default 1m); usage moves slowly.
	UsageRefresh time.Duration
	// Resync is how often the loop checks every live job's revision
	// against its view (default 1m), reading again the rows of those
	// that differ (store.LiveJobRevs); in between it reads only the jobs
	// written since its last look (store.ChangedJobs).
	Resync time.Duration
	// CheckPass, when set (tests), is given each pass's plan together with
	// the plan a full scheduler.Schedule makes of the same snapshot; they
	// must be equal.
	CheckPass func(pass, full scheduler.Plan)
	// Secrets resolves the secrets a job names (its project's, else global
	// ones) to "NAME=value" environment entries and the values to redact
	// from its log. nil: jobs naming secrets fail to launch.
	Secrets func(ctx context.Context, project string, names []string) (env []string, values []string, err error)
	// Observer is told about passes, placements and attempt ends (for
	// metrics). nil: nobody is told.
	Observer Observer
	// Blobs holds code packages; the executor unpacks a fresh copy for
	// each attempt of a job submitted with --context (code.go). nil: such
	// jobs fail to launch.
	Blobs blob.Store
	// AdoptAfter is how old an active attempt this loop neither launched
	// nor reattached to must be before the loop reattaches to it (launch is
	// idempotent): one a deposed leader launched after this leader's
	// start. Default 30s.
	AdoptAfter time.Duration
	// Fence, when set, reports an error once this replica may no longer
	// lead (several replicas share a store): checked after the plan's
	// commit — itself fenced by the term in its transaction (the Run
	// context's store.WithFence) — and before launching, so a deposed
	// leader never launches what it planned.
	Fence func(ctx context.Context) error
	// CopyCheckpoints copies every registered checkpoint to Blobs (an
	// object store), under checkpoints/<job>/<name>/.
	CopyCheckpoints bool
	// PreemptionGuard holds a job preempted too often from further
	// preemption (guard.go). Zero: off; the server sets
	// DefaultPreemptionGuard unless configured.
	PreemptionGuard PreemptionGuard
	// Currency names the server's currency in budget messages.
	Currency string
	// RetryStorm pauses the retries of similar jobs failing together
	// (storm.go). Zero: off; the server sets DefaultRetryStorm unless
	// configured.
	RetryStorm RetryStorm
	// GrantWarning is how long before a compute grant ends the Observer
	// is told which running jobs its end will preempt (grants.go). Zero:
	// no warning.
	GrantWarning time.Duration
	// GPUSamples gives the latest GPU utilisation of running attempts, for
	// the pools' idle stop (idle.go). Nil: no pool's idle stop acts.
	GPUSamples GPUSampler
}

// Observer is told what the loop does, for metrics and alerts. It is
// called from the loop goroutine, so it must return quickly, and it must
// neither keep nor change the maps and slices it is given.
type Observer interface {
	// Pass reports one scheduling pass and how long the scheduler took.
	// The loop makes a pass only when something it decides on changed.
	Pass(took time.Duration)
	// View reports the live work after a cycle in which it changed: the
	// pools, the queue (by what entered and left it) and the active
	// attempts.
	View(v View)
	// Placed reports a job the scheduler placed: waited is how long it was
	// queued, since submission for a first attempt and since it was queued
	// again for a later one.
	Placed(project, pool string, attempt int, waited time.Duration)
	// AttemptEnded reports an attempt's end once the store recorded it: the
	// job as stored after the end, and the attempt with its final State,
	// Reason, Message and FinishedAt.
	AttemptEnded(job domain.Job, attempt domain.Attempt)
	// PreemptionHeld reports a hold from preemption that began (the
	// PreemptionGuard): the job as the loop last saw it, and the hold.
	PreemptionHeld(job domain.Job, hold domain.PreemptionHold)
	// PreemptionReleased reports that a job's hold ended: it expired, or
	// the job is no longer live.
	PreemptionReleased(jobID int64)
	// LogLimited reports that the log of the job's current, active attempt
	// reached its limit at the given time (the executor's LogLimited
	// event; limit 0 when unknown). It may come again for the same attempt
	// after a restart.
	LogLimited(job domain.Job, attempt int, limit int64, at time.Time)
	// GrantsExpiring reports every running job whose attempt a compute
	// grant ending within Config.GrantWarning will preempt (grants.go):
	// the whole list, each time it changes (empty: none).
	GrantsExpiring(notices []domain.GrantNotice)
}

// nopObserver is the Observer when none is configured.
type nopObserver struct{}

func (nopObserver) Pass(time.Duration)                               {}
func (nopObserver) View(View)                                        {}
func (nopObserver) Placed(string, string, int, time.Duration)        {}
func (nopObserver) AttemptEnded(domain.Job, domain.Attempt)          {}
func (nopObserver) PreemptionHeld(domain.Job, domain.PreemptionHold) {}
func (nopObserver) PreemptionReleased(int64)                         {}
func (nopObserver) LogLimited(domain.Job, int, int64, time.Time)     {}
func (nopObserver) GrantsExpiring([]domain.GrantNotice)              {}

// Controller is the control loop.
type Controller struct {
	cfg      Config
	log      *slog.Logger
	wake     chan struct{}
	launched chan launchResult
	sem      chan struct{}

	// Loop-goroutine state.
	flows    flows              // what changed for workflows: workflow.go
	early    earlyStops         // early stopping of sweep members: earlystop.go
	jobs     map[int64]*jobInfo // immutable parts of active and queued jobs
	stopping map[executor.Ref]bool
	reasons  map[int64]pendingReason // last pending reason written, to skip no-op writes
	usage    []scheduler.Usage
	sched    incremental.Scheduler // reuses the queue order between passes; loop goroutine only
	preview  scheduler.Scratch     // PreviewQueue's full passes' working memory
	// spentWaiting is the waiting list of the plan published before the
	// queue view's, handed back to sched at the next pass.
	spentWaiting []scheduler.Waiting
	usageAt      time.Time
	// view is every live job as of the last cycle, by id; viewIDs its
	// ids ascending; viewRead the cursor of the read each job's row is
	// from. It is read in full at the start and after an error (resync:
	// at the next cycle), checked against every live job's revision
	// every Resync (viewAt), and kept current in between from what the
	// store says changed since cursor (view.go).
	view     map[int64]domain.Job
	viewIDs  []int64
	viewRead map[int64]store.JobCursor
	cursor   store.JobCursor
	viewAt   time.Time
	resync   bool
	// Kept from the view as jobs change (view.go): the scheduler's
	// pending list by id (pendingSpare: the list before it, reused), the
	// queued jobs by pool and project, the queued jobs' retry backoffs
	// still running, and the jobs whose cancel or preemption the loop must
	// act on (stop their attempt, once: stop).
	pending      []scheduler.Pending
	pendingSpare []scheduler.Pending
	queuedBy     map[PoolProject]int
	backoffs     map[int64]time.Time
	cancels      []int64
	// What the Observer is told next (observeView): the queue's entries
	// and exits since the last View, whether a job changed, and the pools
	// and running allocations it was last told; viewReset: the first View.
	entered     []QueuedJob
	left        []int64
	viewChanged bool
	viewReset   bool
	viewPools   []domain.Pool
	viewRun     []scheduler.Allocation
	// The inputs of the last pass other than the jobs, and whether one
	// ran (needPass); pendingDirty: the pending list changed since it;
	// passAt: a pass is due by then (zero: none is).
	passed       bool
	passPools    []domain.Pool
	passQuotas   []domain.Quota
	passProjects []domain.Project
	passUsage    time.Time
	passNow      time.Time
	pendingDirty bool
	passAt       time.Time
	// unwrittenReasons are reasons of waiting jobs a pass decided and the
	// store has yet to take (writeReasons).
	unwrittenReasons []store.Change
	// reasonsLost: reasons the last pass decided were not recorded, so
	// the next pass looks up every waiting job's.
	reasonsLost bool
	// What changed since the snapshot of the last pass, for
	// Scheduler.ScheduleChanged: the jobs the view took in (hintIDs),
	// or, after too many changes, everything (hintFull);
	// and that pass's running allocations (hintRun), which also depend on
	// attempts.
	hintIDs  []int64
	hintFull bool
	hintRun  []scheduler.Allocation
	// Health and metrics, per active attempt: last progress time, how far
	// its metric log was read, and whether a health check stopped it.
	progress      map[executor.Ref]time.Time
	unstored      []domain.MetricPoint // metric points the store refused (storePoints)
	healthStopped map[executor.Ref]bool

	// Recording what ended attempts left behind runs off the loop, a few
	// at a time (artifacts.go).
	outputSem chan struct{}
	outputsWG sync.WaitGroup
	// finishing are the ended attempts whose outputs are being recorded:
	// their end is recorded after (recordThenEnd). recorded delivers each
	// end once its outputs are; ends are those not yet in the store (a
	// failed write is tried again). finishing and ends: loop goroutine only.
	finishing map[executor.Ref]bool
	// sealed holds the outputs the executor's agent recorded for attempts
	// whose end is not handled yet (OutputsSealed); loop goroutine only.
	sealed   map[executor.Ref]*executor.SealedOutputs
	recorded chan store.Change
	ends     []store.Change
	// poolFacts are what launches read of the pools, as of the last
	// snapshot (poolFactsOf). Loop goroutine only.
	poolFacts map[string]poolFacts
	// known are the active attempts this loop launched or reattached to;
	// others are adopted (adoptStrays). Loop goroutine only.
	known  map[executor.Ref]bool
	runCtx context.Context // Run's context, set before the loop starts
	// guard holds jobs preempted too often from further preemption
	// (guard.go). Loop goroutine only.
	guard *guard
	// beneficiaries are the queued jobs others were preempted for since
	// they last started (scheduler.Pending.Beneficiary). Loop goroutine
	// only; a new leader starts without them.
	beneficiaries map[int64]bool
	// budget enforces the projects' money budgets (budget.go). Loop
	// goroutine only.
	budget *budgets
	// storm pauses the retries of similar jobs failing together
	// (storm.go). Loop goroutine only.
	storm *storms
	// idle is what the idle stop knows of running GPU attempts (idle.go).
	// Loop goroutine only.
	idle map[executor.Ref]*idleRun
	// grants follows the compute grants in force, to reclaim what each
	// added when it lapses (grants.go). Loop goroutine only.
	grants grantWatch
	// endJobs holds the job each attempt end not yet stored was decided
	// on (ended), for what follows its write (observeEnd, recordThenEnd);
	// dropped once the store took or refused the end. Loop goroutine only.
	endJobs map[executor.Ref]domain.Job
	// envs are the environment versions launches read (envs.go).
	envs envCache
	// settings are the pools, quotas, projects and grants (settings.go),
	// and attempts the active attempts (attempts.go), kept between
	// cycles. Loop goroutine only.
	settings settings
	attempts activeAttempts

	// The last pass's waiting jobs and their labels, from which Queue
	// builds the queue view an API request reads: nothing is built for a
	// pass nobody asks about. The loop replaces queueWaiting with each
	// pass's and edits labels as jobs change; readers copy out under
	// queueMu and keep no reference.
	queueMu      sync.Mutex
	queueWaiting []scheduler.Waiting
	labels       map[int64]queueLabel
}

// jobInfo is the immutable part of a job the loop needs; cached because specs
// never change once stored.
type jobInfo struct {
	spec      domain.Spec
	outputDir string
	code      *domain.CodeRef // the code package to unpack (code.go); nil: none
	// job is the job as info read it: its identity, Spec, Code and
	// OutputDir never change; the rest is as of that read (knownJob).
	job domain.Job
}

type launchResult struct {
	ref executor.Ref
	err error
}

// New returns a Controller; call Run to start it.
func New(cfg Config) *Controller {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Grace <= 0 {
		cfg.Grace = 10 * time.Second
	}
	if cfg.Currency == "" {
		cfg.Currency = domain.DefaultCurrency
	}
	if cfg.MaxGrace <= 0 {
		cfg.MaxGrace = domain.MaxGraceDefault
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = 10 * time.Second
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = 5 * time.Minute
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 2 * time.Second
	}
	if cfg.LaunchConcurrency <= 0 {
		cfg.LaunchConcurrency = 8
	}
	if cfg.Resync <= 0 {
		cfg.Resync = time.Minute
	}
	if cfg.UsageRefresh <= 0 {
		cfg.UsageRefresh = time.Minute
	}
	if cfg.AdoptAfter <= 0 {
		cfg.AdoptAfter = 30 * time.Second
	}
	if cfg.Scheduler.FairShareHalfLife <= 0 {
		cfg.Scheduler.FairShareHalfLife = 24 * time.Hour
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	return &Controller{
		cfg:           cfg,
		log:           cfg.Logger.With("component", "control"),
		wake:          make(chan struct{}, 1),
		launched:      make(chan launchResult, 64),
		sem:           make(chan struct{}, cfg.LaunchConcurrency),
		outputSem:     make(chan struct{}, 2),
		finishing:     map[executor.Ref]bool{},
		sealed:        map[executor.Ref]*executor.SealedOutputs{},
		recorded:      make(chan store.Change, 16),
		known:         map[executor.Ref]bool{},
		guard:         newGuard(cfg.PreemptionGuard),
		budget:        newBudgets(),
		storm:         newStorms(cfg.RetryStorm),
		idle:          map[executor.Ref]*idleRun{},
		beneficiaries: map[int64]bool{},
		jobs:          map[int64]*jobInfo{},
		stopping:      map[executor.Ref]bool{},
		reasons:       map[int64]pendingReason{},

		progress:      map[executor.Ref]time.Time{},
		healthStopped: map[executor.Ref]bool{},
		// The loop and the queue view only read plans: a pass takes
		// the pools nothing changed in from the last plan.
		sched: incremental.Scheduler{ReadOnlyPlans: true},
	}
}

// Wake asks the loop to run a cycle soon. It never blocks.
func (c *Controller) Wake() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Run recovers attempts left active by a previous server, then loops until
// ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	c.runCtx = ctx
	defer c.outputsWG.Wait()
	if err := c.recover(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while it recovered: not a failure
		}
		return err
	}
	events := c.cfg.Executor.Events()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.wake:
		case <-timer.C:
		case ev := <-events:
			batch := []executor.Event{ev}
		drain:
			for len(batch) < 512 {
				select {
				case ev := <-events:
					batch = append(batch, ev)
				default:
					break drain
				}
			}
			if !c.handleEvents(ctx, batch, false) {
				continue // recorded no end; nothing to schedule: the timer stands
			}
		case r := <-c.launched:
			c.handleLaunchFailure(ctx, r)
		case ch := <-c.recorded:
			c.ends = append(c.ends, ch)
		ends: // and those whose outputs were read meanwhile: one write
			for len(c.ends) < 512 {
				select {
				case ch := <-c.recorded:
					c.ends = append(c.ends, ch)
				default:
					break ends
				}
			}
		}
		c.applyEnds(ctx)
		next := c.cycle(ctx)
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

// recover reattaches to every attempt the store believes active. Launch is
// idempotent: an attempt already running is watched, one that ended while the
// server was down reports its exit, one never started is started now.
func (c *Controller) recover(ctx context.Context) error {
	atts, err := c.cfg.Store.ActiveAttempts(ctx)
	if err != nil {
		return fmt.Errorf("load active attempts: %w", err)
	}
	if err := c.seedProgress(ctx); err != nil {
		return err
	}
	c.rebuildGuard(ctx)
	refs := make([]executor.Ref, len(atts))
	for i, a := range atts {
		refs[i] = executor.Ref{JobID: a.JobID, Attempt: a.Number}
	}
	toks, err := c.issueTokens(ctx, refs)
	if err != nil {
		return err
	}
	for i, a := range atts {
		info, err := c.info(ctx, a.JobID)
		if err != nil {
			return err
		}
		c.known[refs[i]] = true
		l, err := c.launchFor(ctx, a.JobID, info, a.Number, executor.Local(a.Node, a.GPUs), toks[i])
		if errors.Is(err, errSecrets) {
			// An attempt that runs already keeps the secrets it was
			// launched with (Launch only reattaches); failing it here for
			// a key or secret that changed since would end a healthy job.
			c.log.Warn("reattaching without the job's secrets", "attempt", l.Ref.String(), "err", err)
			err = nil
		}
		if err == nil {
			if restore := c.restoreIfUnstarted(a); restore != nil { // tier.go
				restore(ctx, l)
			}
			err = c.cfg.Executor.Launch(ctx, l)
		}
		if err != nil {
			c.handleLaunchFailure(ctx, launchResult{ref: l.Ref, err: err})
		}
	}
	if len(atts) > 0 {
		c.log.Info("reattached to active attempts", "count", len(atts))
	}
	c.resumeOutputs()
	return nil
}

// pendingReason is why a queued job waits, as last written.
type pendingReason struct {
	reason  domain.Reason
	message string
}

// info returns the cached immutable part of a job, loading it once.
func (c *Controller) info(ctx context.Context, id int64) (*jobInfo, error) {
	if ji := c.jobs[id]; ji != nil {
		return ji, nil
	}
	job, err := c.cfg.Store.GetJob(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("load job %d: %w", id, err)
	}
	ji := &jobInfo{spec: job.Spec, outputDir: job.OutputDir, code: job.Code, job: job}
	c.jobs[id] = ji
	return ji, nil
}

// cycle runs one round and returns how long the loop may sleep. It reads
// what changed since the last round; it makes a scheduling pass only when
// something the scheduler decides on changed, or a time it depends on
// came (needPass).
func (c *Controller) cycle(ctx context.Context) (next time.Duration) {
	now := c.cfg.Clock.Now()
	next = c.cfg.Interval
	for _, h := range c.guard.expire(now) { // before the snapshot, which reads the holds
		c.log.Info("preemption hold ended", "job", h.JobID, "held_since", h.At)
		c.cfg.Observer.PreemptionReleased(h.JobID)
	}
	snap, byID, atts, err := c.snapshot(ctx, now)
	if err != nil {
		c.log.Error("load scheduling snapshot", "err", err)
		return next
	}
	c.resolveWorkflows(ctx, now)   // workflow.go
	c.checkEarlyStop(ctx, now)     // earlystop.go
	for id := range c.guard.held { // few: each is a preemption loop stopped
		if _, ok := byID[id]; !ok {
			c.guard.forget(id)
			c.cfg.Observer.PreemptionReleased(id)
		}
	}
	if !c.guard.next.IsZero() {
		next = min(next, max(c.guard.next.Sub(now), 0))
	}
	for _, id := range c.cancels {
		j, ok := byID[id]
		if !ok || j.State == domain.JobQueued || j.Attempts == 0 {
			continue
		}
		switch ref := (executor.Ref{JobID: id, Attempt: j.Attempts}); {
		case j.CancelRequested:
			c.stop(ctx, ref, cancelRequest(j))
		case j.PreemptRequested:
			c.stop(ctx, ref, preemptRequest(j))
		}
	}
	c.cancels = c.cancels[:0]
	backoffDue := false
	for id, t := range c.backoffs { // few: the queued jobs waiting to retry
		if !t.After(now) {
			delete(c.backoffs, id)
			backoffDue = true
			continue
		}
		next = min(next, t.Sub(now))
	}
	// Forget what no longer needs remembering.
	for id := range c.jobs {
		if _, ok := byID[id]; !ok {
			delete(c.jobs, id)
			delete(c.reasons, id)
		}
	}
	for ref := range c.stopping {
		if _, ok := byID[ref.JobID]; !ok {
			delete(c.stopping, ref)
		}
	}
	for ref := range c.progress {
		if _, ok := byID[ref.JobID]; !ok {
			c.forgetAttempt(ref)
		}
	}
	next = c.checkHealth(ctx, now, atts, byID, next)
	c.checkIdle(ctx, snap.Pools, byID) // idle.go
	c.adoptStrays(ctx, now, atts)

	releases, err := c.loadBudgets(ctx, now)
	if err != nil {
		c.log.Error("load budgets", "err", err)
		return next
	}
	rates := make(map[string]domain.Rates, len(snap.Pools))
	for _, p := range snap.Pools {
		rates[p.Name] = p.Rates
	}
	c.suspendOverBudget(ctx, now)
	c.reclaimGrants(ctx, now, &snap, byID) // grants.go
	c.warnGrants(now, snap, byID)
	c.observeView(snap) // view.go

	if !c.needPass(now, snap, backoffDue) {
		if !c.passAt.IsZero() {
			next = min(next, max(c.passAt.Sub(now), 0))
		}
		if len(releases) > 0 {
			if _, err := c.cfg.Store.Apply(ctx, releases); err != nil {
				c.log.Error("release jobs held for a budget", "err", err)
				c.budget.loaded = false // release them next cycle
			}
		}
		return c.writeReasons(ctx, now, next)
	}
	c.passAt = time.Time{}
	passStart := time.Now() // Observer (metrics): the scheduler's own duration
	plan := c.schedule(snap)
	c.cfg.Observer.Pass(time.Since(passStart))
	c.publishQueue(plan)

	var changes []store.Change
	var starts []scheduler.Placement
	extra := releases // budget releases and holds, applied after the plan's own changes
	for _, pl := range plan.Start {
		j := byID[pl.JobID]
		if ok, why, wait := c.admit(ctx, j, rates, now); !ok {
			key := pendingReason{domain.ReasonBudgetExceeded, why}
			switch {
			case why == "": // the budget could not be read: try again next cycle
				c.passDue(now)
			case !wait:
				extra = append(extra, store.Change{JobID: pl.JobID, Move: domain.MoveHold().Only(domain.JobQueued),
					Reason: domain.ReasonBudgetExceeded, Message: why, Actor: actorScheduler, At: now})
			default:
				// It waits for running jobs to end (a pass follows) or
				// for the spend to be read again.
				c.passDue(now.Add(budgetRefresh))
				if c.reasons[pl.JobID] != key && (j.Reason != key.reason || j.Message != key.message) {
					c.reasons[pl.JobID] = key
					extra = append(extra, store.Change{JobID: pl.JobID, In: []domain.JobState{domain.JobQueued},
						SetReason: true, Reason: domain.ReasonBudgetExceeded, Message: why, At: now})
				}
			}
			continue
		}
		names := make([]string, len(pl.Nodes))
		for i, n := range pl.Nodes {
			names[i] = n.Node
		}
		msg := "placed in pool " + pl.Pool + " on " + strings.Join(names, ",")
		var node string
		var gpus []int
		if len(pl.Nodes) > 0 {
			node, gpus = pl.Nodes[0].Node, pl.Nodes[0].GPUs
			if len(gpus) > 0 {
				msg += " with GPUs " + joinInts(gpus)
			}
		}
		if pl.Borrowed {
			msg += " (borrowed capacity: may be preempted to reclaim it)"
		}
		if h, ok := c.guard.held[pl.JobID]; ok {
			msg += "; " + h.String()
		}
		changes = append(changes, store.Change{
			JobID: pl.JobID, Move: domain.MoveStart(),
			Reason: domain.ReasonScheduled, Message: msg, Actor: actorScheduler, At: now,
			Attempt: &store.AttemptChange{Create: true, Number: j.Attempts + 1, To: domain.AttemptStarting,
				Node: node, GPUs: gpus, Borrowed: pl.Borrowed},
		})
		starts = append(starts, pl)
	}
	preempts := len(changes)
	for _, pe := range plan.Preempt {
		changes = append(changes, store.Change{JobID: pe.JobID, In: []domain.JobState{domain.JobStarting, domain.JobRunning},
			RequestPreempt: true, SetReason: true, Reason: domain.ReasonPreempted, Message: pe.Message, At: now})
	}
	changes = append(changes, extra...)
	reasons := len(changes)
	// A waiting job where the last pass had it, for the same reason, has
	// that reason recorded (or queued to be) unless a write failed since:
	// a walk beside the last plan spares a lookup per waiting job.
	prev := c.spentWaiting
	if c.reasonsLost {
		prev, c.reasonsLost = nil, false
	}
	for i, w := range plan.Waiting {
		if i < len(prev) && prev[i].JobID == w.JobID && prev[i].Reason == w.Reason && prev[i].Message == w.Message {
			continue
		}
		key := pendingReason{w.Reason, w.Message}
		if c.reasons[w.JobID] == key {
			continue
		}
		j := byID[w.JobID]
		c.reasons[w.JobID] = key
		if j.Reason == w.Reason && j.Message == w.Message {
			continue
		}
		changes = append(changes, store.Change{JobID: w.JobID, In: []domain.JobState{domain.JobQueued},
			SetReason: true, Reason: w.Reason, Message: w.Message, At: now})
	}
	// The plan's starts, preemptions and holds first, and the launches;
	// then why the others wait, a batch a cycle (writeReasons): a first
	// pass over a long queue writes a reason for every job, which must
	// neither delay launches nor make one huge transaction. Each start
	// stores its attempt's job token with it.
	toks, err := c.grantTokens(ctx, changes[:len(starts)])
	var errs []error
	if err == nil && reasons > 0 {
		errs, err = c.cfg.Store.Apply(ctx, changes[:reasons])
	}
	if err != nil {
		c.log.Error("apply plan", "err", err)
		c.unwritten(changes[reasons:])
		if len(releases) > 0 {
			c.budget.loaded = false // release them next cycle
		}
		c.passDue(now)
		return next
	}
	c.unwrittenReasons = append(c.unwrittenReasons, changes[reasons:]...)
	defer func() { next = c.writeReasons(ctx, now, next) }()
	if len(starts) > 0 && c.cfg.Fence != nil {
		if err := c.cfg.Fence(ctx); err != nil {
			c.log.Error("not launching: this replica no longer leads", "err", err)
			return next
		}
	}
	refs := make([]executor.Ref, 0, len(starts))
	placed := make([]scheduler.Placement, 0, len(starts))
	for i, pl := range starts {
		if errs[i] == nil { // else the job moved (e.g. canceled) since the snapshot
			refs = append(refs, executor.Ref{JobID: pl.JobID, Attempt: byID[pl.JobID].Attempts + 1})
			placed = append(placed, pl)
		}
	}
	for k, pl := range placed {
		ref := refs[k]
		delete(c.reasons, pl.JobID)
		// Observer (metrics): a queued job's UpdatedAt is when it entered the queue.
		c.cfg.Observer.Placed(byID[pl.JobID].Project, byID[pl.JobID].Pool, ref.Attempt, now.Sub(byID[pl.JobID].UpdatedAt))
		if len(pl.Nodes) > 1 && !c.cfg.Executor.Capabilities().MultiNode {
			c.handleLaunchFailure(ctx, launchResult{ref: ref, err: errors.New("this executor runs single-node jobs; multi-node jobs need the Slurm or Kubernetes executor")})
			continue
		}
		ji, err := c.info(ctx, pl.JobID)
		if err != nil {
			c.handleLaunchFailure(ctx, launchResult{ref: ref, err: err})
			continue
		}
		var place executor.Placement
		for _, n := range pl.Nodes {
			place.Nodes = append(place.Nodes, executor.PlacedNode{Name: n.Node, GPUs: n.GPUs})
		}
		l, err := c.launchFor(ctx, pl.JobID, ji, ref.Attempt, place, toks[ref])
		if err != nil {
			c.handleLaunchFailure(ctx, launchResult{ref: l.Ref, err: err})
			continue
		}
		c.known[l.Ref] = true
		c.launchAfter(ctx, l, c.restoreForResume) // tier.go
	}
	for k, pe := range plan.Preempt {
		if errs[preempts+k] != nil {
			continue
		}
		j := byID[pe.JobID]
		c.log.Info("preempting", "job", pe.JobID, "attempt", j.Attempts, "for", pe.For)
		c.stop(ctx, executor.Ref{JobID: pe.JobID, Attempt: j.Attempts},
			executor.StopRequest{Reason: domain.ReasonPreempted, Message: fmt.Sprintf("preempted for job %d", pe.For)})
		c.markBeneficiary(pe.For) // view.go
		if h, ok := c.guard.record(pe.JobID, pe.For, now); ok {
			c.log.Warn("holding a job from preemption: it was preempted too often (a preemption loop?)",
				"job", pe.JobID, "preemptions", h.Count, "window", h.Window, "for", h.For, "until", h.Until)
			c.cfg.Observer.PreemptionHeld(j, h)
		}
	}
	return next
}

// reasonBatch is how many waiting jobs' reasons a cycle writes.
const reasonBatch = 500

// writeReasons records why jobs wait: the next reasonBatch of those the
// passes left to write. With more left, the next cycle is due at once
// (the loop still takes wake-ups and events in between).
func (c *Controller) writeReasons(ctx context.Context, now time.Time, next time.Duration) time.Duration {
	if len(c.unwrittenReasons) == 0 {
		return next
	}
	n := min(len(c.unwrittenReasons), reasonBatch)
	if _, err := c.cfg.Store.Apply(ctx, c.unwrittenReasons[:n]); err != nil {
		c.log.Error("record why jobs wait", "err", err)
		c.unwritten(c.unwrittenReasons)
		c.unwrittenReasons = c.unwrittenReasons[:0]
		c.passDue(now)
		return next
	}
	c.unwrittenReasons = c.unwrittenReasons[n:]
	if len(c.unwrittenReasons) == 0 {
		c.unwrittenReasons = nil // let the written ones go
		return next
	}
	return 0
}

// unwritten forgets the reasons of changes the store did not take, so
// that the next pass writes them.
func (c *Controller) unwritten(changes []store.Change) {
	for _, ch := range changes {
		delete(c.reasons, ch.JobID)
	}
	c.reasonsLost = true
}

// passDue makes a pass due by at.
func (c *Controller) passDue(at time.Time) {
	if c.passAt.IsZero() || at.Before(c.passAt) {
		c.passAt = at
	}
}

// needPass reports whether the scheduler must make a pass: the first, or
// one after too many changes to hint, or when something it decides on
// changed since
// the last — a pending job, a retry backoff that ran out, the running
// jobs of a pool where jobs wait, the pools, quotas, projects or usage —
// or a pass is due (passAt). Otherwise the last pass's plan stands: its
// starts and preemptions were applied, and its waiting jobs' reasons
// written.
func (c *Controller) needPass(now time.Time, snap scheduler.Snapshot, backoffDue bool) bool {
	if !c.passed || c.hintFull || c.pendingDirty || backoffDue || !c.passAt.IsZero() && !now.Before(c.passAt) ||
		!c.usageAt.Equal(c.passUsage) || !reflect.DeepEqual(snap.Pools, c.passPools) ||
		!reflect.DeepEqual(snap.Quotas, c.passQuotas) || !reflect.DeepEqual(snap.Projects, c.passProjects) {
		return true
	}
	// A running job that started, ended or changed matters only where
	// jobs wait: pools are scheduled apart.
	prev, cur := c.hintRun, snap.Running
	i, k := 0, 0
	for i < len(prev) || k < len(cur) {
		switch {
		case k == len(cur) || i < len(prev) && prev[i].JobID < cur[k].JobID:
			if c.poolWaits(prev[i].Pool) {
				return true
			}
			i++
		case i == len(prev) || cur[k].JobID < prev[i].JobID:
			if c.poolWaits(cur[k].Pool) {
				return true
			}
			k++
		default:
			if !prev[i].Equal(&cur[k]) && (c.poolWaits(prev[i].Pool) || c.poolWaits(cur[k].Pool)) {
				return true
			}
			i++
			k++
		}
	}
	return false
}

// snapshot loads what the scheduler decides on: pools, quotas, projects,
// fair-share usage, the queue and the active attempts.
func (c *Controller) snapshot(ctx context.Context, now time.Time) (scheduler.Snapshot, map[int64]domain.Job, []domain.Attempt, error) {
	snap := scheduler.Snapshot{Now: now}
	// The view first: its read of what changed brings the settings
	// revision and the changed jobs' attempts (view.go).
	if err := c.refreshView(ctx, now); err != nil {
		return snap, nil, nil, err
	}
	if err := c.loadSettings(ctx, now); err != nil { // settings.go
		return snap, nil, nil, err
	}
	st := &c.settings
	snap.Pools, snap.Quotas, snap.Projects = st.pools, st.effective, st.projects
	c.grants.now, c.grants.base = st.grants, st.quotas // grants.go
	var err error
	if now.Sub(c.usageAt) >= c.cfg.UsageRefresh || c.usage == nil {
		if c.usage, err = c.loadUsage(ctx, now, snap.Pools); err != nil {
			return snap, nil, nil, err
		}
		c.usageAt = now
	}
	snap.Usage = c.usage
	atts, err := c.refreshAttempts(ctx) // attempts.go
	if err != nil {
		return snap, nil, nil, err
	}
	byID := c.view
	for id := range c.beneficiaries {
		if j, ok := byID[id]; !ok || j.State != domain.JobQueued {
			delete(c.beneficiaries, id) // started, or gone
		}
	}
	snap.Pending = c.pending // kept as jobs change (view.go); the scheduler keeps no reference
	for _, a := range atts {
		j, ok := byID[a.JobID]
		if !ok {
			continue // ended between the two reads; its resources are free
		}
		r := j.Resources
		r.Nodes = 1
		snap.Running = append(snap.Running, scheduler.Allocation{JobID: j.ID, Project: j.Project, Pool: j.Pool,
			Priority: j.Priority, Resources: r, Nodes: []scheduler.NodeAlloc{{Node: a.Node, GPUs: a.GPUs}},
			StartedAt: a.CreatedAt, Timeout: j.Timeout.D(), Preemptible: j.Preemptible && !c.guard.isHeld(j.ID),
			Borrowed: a.Borrowed, Stopping: j.CancelRequested || j.PreemptRequested})
	}
	return snap, byID, atts, nil
}

// schedule runs the pass, telling the scheduler which jobs changed since
// the last one when the view knows.
func (c *Controller) schedule(snap scheduler.Snapshot) scheduler.Plan {
	// The plan before the queue view's is done with: its storage serves
	// this one.
	c.sched.Recycle(scheduler.Plan{Waiting: c.spentWaiting})
	c.spentWaiting = nil
	var plan scheduler.Plan
	if c.hintFull {
		plan = c.sched.Schedule(snap, c.cfg.Scheduler)
	} else {
		plan = c.sched.ScheduleChanged(snap, c.cfg.Scheduler, appendRunningChanges(c.hintIDs, c.hintRun, snap.Running))
	}
	if c.cfg.CheckPass != nil {
		c.cfg.CheckPass(plan, scheduler.Schedule(snap, c.cfg.Scheduler))
	}
	c.hintIDs, c.hintFull = c.hintIDs[:0], false
	// The snapshot's node lists are built afresh each cycle, so keeping
	// them needs no copy; nor do its pools, quotas and projects, which
	// nothing modifies: a slice is replaced, never written (settings.go).
	c.hintRun = append(c.hintRun[:0], snap.Running...)
	c.passed, c.pendingDirty = true, false
	c.passPools, c.passQuotas, c.passProjects, c.passUsage, c.passNow = snap.Pools, snap.Quotas, snap.Projects, c.usageAt, snap.Now
	return plan
}

// appendRunningChanges appends the ids of allocations that appear,
// disappear or differ between two running lists in job id order.
func appendRunningChanges(ids []int64, prev, cur []scheduler.Allocation) []int64 {
	i, k := 0, 0
	for i < len(prev) || k < len(cur) {
		switch {
		case k == len(cur) || i < len(prev) && prev[i].JobID < cur[k].JobID:
			ids = append(ids, prev[i].JobID)
			i++
		case i == len(prev) || cur[k].JobID < prev[i].JobID:
			ids = append(ids, cur[k].JobID)
			k++
		default:
			if !prev[i].Equal(&cur[k]) {
				ids = append(ids, cur[k].JobID)
			}
			i++
			k++
		}
	}
	return ids
}

// loadUsage computes decayed fair-share usage from the attempt history.
func (c *Controller) loadUsage(ctx context.Context, now time.Time, pools []domain.Pool) ([]scheduler.Usage, error) {
	halfLife := c.cfg.Scheduler.FairShareHalfLife
	spans, err := c.cfg.Store.AttemptSpans(ctx, now.Add(-8*halfLife))
	if err != nil {
		return nil, err
	}
	byName := make(map[string]domain.Pool, len(pools))
	for _, p := range pools {
		byName[p.Name] = p
	}
	recs := make([]scheduler.UsageRecord, 0, len(spans))
	for _, sp := range spans {
		pool, ok := byName[sp.Pool]
		if !ok {
			continue
		}
		recs = append(recs, scheduler.UsageRecord{Project: sp.Project, Pool: sp.Pool,
			Rate: scheduler.CostRate(pool, sp.Resources), Start: sp.StartedAt, End: sp.FinishedAt})
	}
	return scheduler.DecayUsage(recs, now, halfLife), nil
}

// publishQueue keeps the pass's waiting jobs for the queue view (Queue):
// the plan's list itself, handed back to the scheduler only once the next
// pass's replaces it here.
func (c *Controller) publishQueue(plan scheduler.Plan) {
	c.queueMu.Lock()
	c.spentWaiting, c.queueWaiting = c.queueWaiting, plan.Waiting
	c.queueMu.Unlock()
}

// PreviewQueue plans one pass over the store's current state without acting
// on it, and keeps its queue view for Queue: a replica that does not lead
// (and so runs no loop) answers queue questions this way. It must not be
// called concurrently with itself or with Run on the same Controller.
func (c *Controller) PreviewQueue(ctx context.Context) error {
	snap, _, _, err := c.snapshot(ctx, c.cfg.Clock.Now())
	if err != nil {
		return err
	}
	// Nothing acts on what changed here, nor is the Observer told.
	c.entered, c.left, c.cancels, c.hintIDs = c.entered[:0], c.left[:0], c.cancels[:0], c.hintIDs[:0]
	c.publishQueue(scheduler.ScheduleIn(snap, c.cfg.Scheduler, &c.preview))
	c.spentWaiting = nil // not the incremental scheduler's
	return nil
}

// Queue returns the last pass's waiting jobs of one pool ("" for all), in
// queue order. A job's position is counted within its pool over the jobs
// still queued, whatever the filter: the plan keeps each pool's entries in
// queue order. Safe for concurrent use.
func (c *Controller) Queue(ctx context.Context, pool string) ([]domain.QueueEntry, error) {
	c.queueMu.Lock()
	defer c.queueMu.Unlock()
	out := make([]domain.QueueEntry, 0, len(c.queueWaiting))
	positions := map[string]int{} // entries seen so far per pool
	for _, w := range c.queueWaiting {
		l, ok := c.labels[w.JobID]
		if !ok {
			continue // not queued any more
		}
		positions[l.pool]++
		if pool != "" && l.pool != pool {
			continue // another pool's
		}
		out = append(out, domain.QueueEntry{JobID: w.JobID, Name: l.name, Project: l.project, Submitter: l.submitter, Pool: l.pool,
			Priority: l.priority, Position: positions[l.pool], Reason: w.Reason, Message: w.Message,
			Submitted: l.submitted, EstimatedStart: w.EstimatedStart, Resources: l.resources})
	}
	return out, nil
}

func (c *Controller) launchAsync(ctx context.Context, l executor.Launch) { c.launchAfter(ctx, l, nil) }

// launchAfter launches l off the loop, after before (when not nil) has
// prepared it there.
func (c *Controller) launchAfter(ctx context.Context, l executor.Launch, before func(context.Context, executor.Launch)) {
	c.sem <- struct{}{}
	go func() {
		defer func() { <-c.sem }()
		if before != nil {
			before(ctx, l)
		}
		if err := c.cfg.Executor.Launch(ctx, l); err != nil {
			c.launched <- launchResult{ref: l.Ref, err: err}
		}
	}()
}

// stop asks the executor to stop an attempt, once; req says why (its zero
// Grace leaves the attempt the grace it was launched with).
func (c *Controller) stop(ctx context.Context, ref executor.Ref, req executor.StopRequest) {
	if c.stopping[ref] || c.finishing[ref] { // finishing: it has ended
		return
	}
	c.stopping[ref] = true
	if err := c.cfg.Executor.Stop(ctx, ref, req); err != nil {
		c.log.Warn("stop attempt", "attempt", ref.String(), "err", err)
	}
}

// poolLogLimit is the log limit of the named pool (0: none, or no such
// pool): from the last snapshot, or the store before the first (recover).
// poolFacts are what a launch reads of its pool.
type poolFacts struct {
	logLimit domain.ByteSize
	executor string
}

func factsOf(p domain.Pool) poolFacts { return poolFacts{logLimit: p.LogLimit, executor: p.Executor} }

// poolFactsOf returns the log limit and executor of pool name, from the
// last snapshot or, for a pool created since, the store; a pool that no
// longer exists has neither.
func (c *Controller) poolFactsOf(ctx context.Context, name string) (poolFacts, error) {
	if f, ok := c.poolFacts[name]; ok {
		return f, nil
	}
	p, err := c.cfg.Store.GetPool(ctx, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return poolFacts{}, nil
	case err != nil:
		return poolFacts{}, fmt.Errorf("read pool %q: %w", name, err)
	}
	return factsOf(p), nil
}

// launchFor builds the executor's view of one attempt, creating the job's
// output and checkpoint directories first; tok is the attempt's job token
// (issueTokens), "" for none. The job's secrets are resolved
// now, at every launch, so a retry gets the latest version; their values go
// into the environment and into Redact. The device and rank environment
// (CUDA_VISIBLE_DEVICES, RANK, MASTER_PORT…) is the executor's to set, from
// place.
func (c *Controller) launchFor(ctx context.Context, id int64, ji *jobInfo, attempt int, place executor.Placement, tok string) (executor.Launch, error) {
	ref := executor.Ref{JobID: id, Attempt: attempt}
	spec := ji.spec
	pool, err := c.poolFactsOf(ctx, spec.Pool)
	if err != nil {
		return executor.Launch{Ref: ref}, err
	}
	ckpt := filepath.Join(ji.outputDir, checkpointsDir)
	env := slices.Clone(c.cfg.BaseEnv)
	for _, k := range sortedKeys(spec.EnvVars) {
		env = append(env, k+"="+spec.EnvVars[k])
	}
	for _, k := range sortedKeys(spec.Params) {
		env = append(env, "TRAINYARD_PARAM_"+strings.ToUpper(k)+"="+spec.Params[k])
	}
	env = append(env, workflowEnv(spec)...) // workflow.go
	env = append(env,
		"TRAINYARD_JOB_ID="+strconv.FormatInt(id, 10),
		"TRAINYARD_JOB_NAME="+spec.Name,
		"TRAINYARD_PROJECT="+spec.Project,
		"TRAINYARD_ATTEMPT="+strconv.Itoa(attempt),
		"TRAINYARD_OUTPUT_DIR="+ji.outputDir,
		"TRAINYARD_CHECKPOINT_DIR="+ckpt,
	) // TRAINYARD_RESUME_FROM is the executor's to set, from Resume
	resume, err := c.resumeCandidates(ctx, id) // checkpoints.go
	if err == nil {
		resume, err = c.withResumeFrom(ctx, id, spec, resume) // another job's checkpoint: resumefrom.go
	}
	if err != nil {
		return executor.Launch{Ref: ref}, err
	}
	if c.cfg.APIURL != "" {
		env = append(env, "TRAINYARD_API="+c.cfg.APIURL)
	}
	var redact []string
	if tok != "" {
		env = append(env, "TRAINYARD_JOB_TOKEN="+tok)
		redact = append(redact, tok)
	}
	workdir := spec.Workdir
	if workdir == "" {
		workdir = c.cfg.Logs.WorkDir(id, attempt)
	}
	code, codeEnv := c.codeFor(ji, id, attempt) // code.go
	env = append(env, codeEnv...)
	l := executor.Launch{
		Ref: ref, Project: spec.Project, Pool: spec.Pool, Executor: pool.executor, Argv: spec.Entrypoint, Env: env, WorkDir: workdir,
		Dir: c.cfg.Logs.AttemptDir(id, attempt), LogPath: c.cfg.Logs.LogPath(id, attempt),
		LogLimit: int64(domain.EffectiveLogLimit(spec.Policy.LogLimit, pool.logLimit, c.cfg.LogLimit)),
		Writable: []string{ji.outputDir, ckpt},
		Timeout:  spec.Policy.Timeout.D(), Grace: domain.EffectiveGrace(spec.Policy.Grace.D(), c.cfg.Grace, c.cfg.MaxGrace),
		Resources: spec.Resources, Placement: place, Redact: redact, Code: code,
		OutputDir: ji.outputDir, CheckpointDir: ckpt, Resume: resume,
	}
	applyStopPolicy(&l, spec)                         // warning, stop signal: stop.go
	if err := c.applyEnv(ctx, &l, spec); err != nil { // PATH prefix, variables, check: envs.go
		return l, err
	}
	if len(spec.Secrets) > 0 {
		if c.cfg.Secrets == nil {
			return l, fmt.Errorf("%w: the job names secrets, but this server has no secret store", errSecrets)
		}
		senv, values, err := c.cfg.Secrets(ctx, spec.Project, spec.Secrets)
		if err != nil {
			return l, fmt.Errorf("%w: %w", errSecrets, err)
		}
		l.Env = append(l.Env, senv...)
		l.Redact = append(l.Redact, values...)
	}
	return l, nil
}

// adoptStrays reattaches to active attempts this loop did not launch and
// has not reattached to, once they are AdoptAfter old: attempts a deposed
// leader launched after this one took over (its fence check came just
// before it lost the lead). It also forgets attempts no longer active.
func (c *Controller) adoptStrays(ctx context.Context, now time.Time, atts []domain.Attempt) {
	active := make(map[executor.Ref]bool, len(atts))
	for _, a := range atts {
		ref := executor.Ref{JobID: a.JobID, Attempt: a.Number}
		active[ref] = true
		if _, live := c.view[a.JobID]; c.known[ref] || now.Sub(a.CreatedAt) < c.cfg.AdoptAfter || !live {
			continue
		}
		c.known[ref] = true
		ji, err := c.info(ctx, a.JobID)
		if err != nil {
			continue
		}
		toks, err := c.issueTokens(ctx, []executor.Ref{ref})
		if err != nil {
			c.log.Warn("reattach to an attempt another replica launched", "attempt", ref.String(), "err", err)
			continue
		}
		l, err := c.launchFor(ctx, a.JobID, ji, a.Number, executor.Local(a.Node, a.GPUs), toks[0])
		if errors.Is(err, errSecrets) {
			err = nil // as in recover: a running attempt keeps what it was launched with
		}
		if err != nil {
			c.log.Warn("reattach to an attempt another replica launched", "attempt", ref.String(), "err", err)
			continue
		}
		c.log.Info("reattaching to an attempt another replica launched", "attempt", ref.String())
		c.launchAfter(ctx, l, c.restoreIfUnstarted(a)) // tier.go
	}
	for ref := range c.known {
		if !active[ref] {
			delete(c.known, ref)
		}
	}
}

// JobTokens makes per-attempt job tokens. The token of an attempt the loop
// starts is stored by the change that creates the attempt, and deleted by
// the change that ends it, so that neither write costs one of its own and
// no token outlives its attempt for want of a second write.
type JobTokens interface {
	// Grant returns new tokens of attempts about to start, not stored:
	// each one's secret, in order, and what the change creating the
	// attempt stores (store.AttemptChange.Token).
	Grant(ctx context.Context, refs []executor.Ref) ([]string, []store.TokenGrant, error)
	// Issue stores new tokens of attempts that exist (those the loop
	// reattaches to), in one write, and returns their secrets in order.
	Issue(ctx context.Context, refs []executor.Ref) ([]string, error)
	// End returns the audit record of the end of an attempt's tokens,
	// which the change ending the attempt appends as it deletes them
	// (store.AttemptChange.EndTokens).
	End(ctx context.Context, ref executor.Ref) domain.AuditRecord
	// Ended tells that such changes are stored for attempts refs:
	// cached authentications of their tokens must go.
	Ended(refs []executor.Ref)
}

// issueTokens issues the job tokens of existing attempts refs in one
// write and returns their secrets in order: all "" when this loop issues
// none.
func (c *Controller) issueTokens(ctx context.Context, refs []executor.Ref) ([]string, error) {
	if c.cfg.JobTokens == nil || len(refs) == 0 {
		return make([]string, len(refs)), nil
	}
	toks, err := c.cfg.JobTokens.Issue(ctx, refs)
	if err != nil {
		return nil, fmt.Errorf("issue the attempt's job token: %w", err)
	}
	return toks, nil
}

// grantTokens gives each change, which creates an attempt, that attempt's
// new job token to store with it, and returns the tokens' secrets by
// attempt: none when this loop issues none.
func (c *Controller) grantTokens(ctx context.Context, changes []store.Change) (map[executor.Ref]string, error) {
	if c.cfg.JobTokens == nil || len(changes) == 0 {
		return nil, nil
	}
	refs := make([]executor.Ref, len(changes))
	for i, ch := range changes {
		refs[i] = executor.Ref{JobID: ch.JobID, Attempt: ch.Attempt.Number}
	}
	secrets, grants, err := c.cfg.JobTokens.Grant(ctx, refs)
	if err != nil {
		return nil, fmt.Errorf("issue the attempts' job tokens: %w", err)
	}
	byRef := make(map[executor.Ref]string, len(refs))
	for i := range changes {
		changes[i].Attempt.Token = &grants[i]
		byRef[refs[i]] = secrets[i]
	}
	return byRef, nil
}

// errSecrets marks a launch whose secrets could not be resolved; the
// returned Launch is complete except for them.
var errSecrets = errors.New("cannot resolve the job's secrets")

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	})
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
