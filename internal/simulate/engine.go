// Package simulate runs the scheduler over a synthetic workload in virtual
// time and reports what it did: utilisation per pool, wait times,
// preemptions and each project's GPU-hours against its fair share.
//
// The simulation is a discrete-event loop. The simulator is the clock: it
// reads no wall time and never sleeps, and every random draw comes from the
// workload's seed, so the same file gives the same report. Each scheduling
// pass hands the scheduler a scheduler.Snapshot exactly as the control loop
// would, through incremental.Scheduler told which jobs changed (as the
// control loop does), and applies the plan: placements start jobs,
// preemptions stop them (they re-queue and resume from their last
// checkpoint). With Options.Check it also checks the scheduler's invariants
// after every pass (check.go). The package imports no store, executor or
// server.
package simulate

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/scheduler"
	"trainyard/internal/scheduler/incremental"
)

// Epoch is virtual time zero. Reports give times as offsets from it.
var Epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// maxPassesPerInstant bounds the passes run at one virtual instant (a pass
// that starts or stops work is followed by another at the same instant).
const maxPassesPerInstant = 64

// jobState is where one simulated job is.
type jobState int

const (
	statePending jobState = iota
	stateRunning
	stateStopping // preempted, still holding its resources
	stateSucceeded
	stateFailed // ran past its timeout
)

// job is one simulated job.
type job struct {
	id        int64
	stream    int
	key       int     // index of its (project, pool) in sim.keys
	rate      float64 // scheduler.CostRate in its pool
	res       domain.Resources
	runtime   time.Duration // work needed in all
	done      time.Duration // work saved at the last checkpoint
	submitted time.Time
	queuedAt  time.Time // when it was last queued (submitted or requeued)
	state     jobState

	// current or last attempt
	attempt     int
	startedAt   time.Time
	firstStart  time.Time // zero until it first starts
	nodes       []scheduler.NodeAlloc
	borrowed    bool
	record      int // index of the attempt's usage record
	preemptions int
	beneficiary bool          // jobs were preempted for it since it last started (Pending.Beneficiary)
	lost        time.Duration // work lost to preemption

	// Why it waits, from the plans' Waiting entries: the current reason
	// since when, and the time waited per reason so far.
	reason      domain.Reason
	reasonSince time.Time
	waited      map[domain.Reason]time.Duration

	// unentitled (check mode): at some pass of its wait, the job could not
	// have run within its project's guarantee (see checker.entitle).
	unentitled bool
}

// noteReason records that j waits for reason r from now on ("" once it
// starts).
func (j *job) noteReason(r domain.Reason, now time.Time) {
	if r == j.reason {
		return
	}
	if j.reason != "" {
		if j.waited == nil {
			j.waited = map[domain.Reason]time.Duration{}
		}
		j.waited[j.reason] += now.Sub(j.reasonSince)
	}
	j.reason, j.reasonSince = r, now
}

type eventKind int

const (
	evSubmit eventKind = iota // stream submits (a burst or the next arrival)
	evEnd                     // an attempt reaches its end (success or timeout)
	evStop                    // a preempted attempt releases its resources
	evTick                    // periodic scheduling pass
)

type event struct {
	at      time.Time
	seq     int64
	kind    eventKind
	stream  int
	job     *job
	attempt int
}

// events is a min-heap ordered by time, then insertion sequence.
type events []event

func (h events) Len() int { return len(h) }
func (h events) Less(i, j int) bool {
	if c := h[i].at.Compare(h[j].at); c != 0 {
		return c < 0
	}
	return h[i].seq < h[j].seq
}
func (h events) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *events) Push(x any)   { *h = append(*h, x.(event)) }
func (h *events) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// streamState is the generator state of one job stream.
type streamState struct {
	spec      StreamSpec
	rng       *rand.Rand
	submitted int
	queued    int  // jobs of this stream now pending (for backlog streams)
	pending   bool // an evSubmit for this stream is in the heap
}

// sim is one run. Only Run's goroutine touches it, so there is no locking.
type sim struct {
	w        Workload
	opt      Options
	cfg      scheduler.Config
	pools    []domain.Pool
	poolIdx  map[string]int
	nodes    []map[string]*domain.Node // per pool, by name
	quotas   []domain.Quota
	projects []domain.Project
	end      time.Time

	now     time.Time
	seq     int64
	heap    events
	streams []*streamState
	jobs    []*job // by id-1
	pending []*job // by id
	running []*job // by id: running and stopping
	// snapPending and snapRunning are pending and running as the scheduler
	// sees them, index for index; changed lists the ids whose entries
	// changed since the last pass (incremental.Scheduler.ScheduleChanged). Keeping
	// them between passes makes a pass cost what changed, not the queue.
	snapPending []scheduler.Pending
	snapRunning []scheduler.Allocation
	changed     []int64
	sched       incremental.Scheduler
	// schedule decides a pass; tests replace it to feed the checks plans
	// that break the invariants.
	schedule func(scheduler.Snapshot, []int64) scheduler.Plan
	stopNow  []*job // this pass's victims without a stop delay

	records []scheduler.UsageRecord
	recJobs []*job     // the job of each usage record
	keys    []usageKey // every (project, pool) a stream submits to, sorted
	// closed folds the usage records of ended attempts per key into one
	// decayed value (see usage).
	closed   []decayed
	lambda   float64 // decay rate per hour: ln 2 / half-life
	usageAt  time.Time
	usageNow []scheduler.Usage // usage at usageAt, when usageOK
	usageOK  bool

	passes      int
	preemptions int
	lastEnd     time.Time
	drained     bool     // every job ended and no stream will submit more
	chk         *checker // nil unless Options.Check
}

// Options are what a run does besides simulating the workload.
type Options struct {
	// Events, when set, receives every start, preemption, requeue and end
	// as it happens, in order.
	Events func(Event)
	// Check checks the scheduler's invariants after every pass (see
	// docs/simulate.md) and puts what it found in Report.Check. A checked
	// run is about twice as slow.
	Check bool
}

// Run simulates w and returns its report. It fails only when the scheduler
// breaks its contract (e.g. places a job on GPUs another job holds); such
// an error names the pass, the job and the conflict.
func Run(w Workload) (*Report, error) { return RunWith(w, Options{}) }

// RunWith is Run with options: an event log, invariant checks. Broken
// invariants do not fail the run; they are in Report.Check.
func RunWith(w Workload, opt Options) (*Report, error) {
	s := newSim(w, opt)
	if err := s.loop(); err != nil {
		return nil, err
	}
	if s.chk != nil {
		s.chk.finish()
	}
	return s.report(), nil
}

func newSim(w Workload, opt Options) *sim {
	s := &sim{
		w:   w,
		opt: opt,
		cfg: scheduler.Config{
			FairShareHalfLife:      w.Scheduler.FairShareHalfLife.D(),
			MaxPreemptionsPerCycle: w.Scheduler.MaxPreemptionsPerCycle,
			ReservationsPerPool:    w.Scheduler.ReservationsPerPool,
		},
		pools:    w.domainPools(),
		poolIdx:  map[string]int{},
		quotas:   w.domainQuotas(),
		projects: w.domainProjects(),
		now:      Epoch,
		end:      Epoch.Add(w.Duration.D()),
	}
	var last scheduler.Plan
	s.schedule = func(snap scheduler.Snapshot, changed []int64) scheduler.Plan {
		// The last pass's plan is applied and done with: its storage
		// serves this one.
		s.sched.Recycle(last)
		last = s.sched.ScheduleChanged(snap, s.cfg, changed)
		return last
	}
	hl := s.cfg.FairShareHalfLife
	if hl <= 0 {
		hl = scheduler.DefaultFairShareHalfLife
	}
	s.lambda = math.Ln2 / hl.Hours()
	for i := range s.pools {
		p := &s.pools[i]
		s.poolIdx[p.Name] = i
		// The scheduler orders nodes by name; handing them over in that
		// order makes its sort a single sweep.
		slices.SortStableFunc(p.Nodes, func(a, b domain.Node) int { return strings.Compare(a.Name, b.Name) })
		byName := make(map[string]*domain.Node, len(p.Nodes))
		for k := range p.Nodes {
			byName[p.Nodes[k].Name] = &p.Nodes[k]
		}
		s.nodes = append(s.nodes, byName)
	}
	for _, spec := range w.Streams {
		k := usageKey{spec.Project, spec.Pool}
		if !slices.Contains(s.keys, k) {
			s.keys = append(s.keys, k)
		}
	}
	slices.SortFunc(s.keys, func(a, b usageKey) int {
		return cmp.Or(strings.Compare(a.project, b.project), strings.Compare(a.pool, b.pool))
	})
	s.closed = make([]decayed, len(s.keys))
	if opt.Check {
		s.chk = newChecker(s)
	}
	for i, spec := range w.Streams {
		// One generator per stream, seeded by the workload seed and the
		// stream's index: adding a stream does not change the others' draws.
		st := &streamState{spec: spec, rng: rand.New(rand.NewPCG(uint64(w.Seed), uint64(i)))}
		s.streams = append(s.streams, st)
		first := Epoch.Add(spec.SubmitAt.D())
		if spec.Rate > 0 {
			first = first.Add(s.interArrival(st))
		}
		s.scheduleSubmit(i, first)
	}
	s.push(event{at: Epoch, kind: evTick})
	return s
}

func (s *sim) push(e event) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.heap, e)
}

// interArrival draws the next Poisson gap of a rate stream.
func (s *sim) interArrival(st *streamState) time.Duration {
	return time.Duration(st.rng.ExpFloat64() / st.spec.Rate * float64(time.Hour))
}

// scheduleSubmit queues the stream's next submission if it is within the
// stream's window and the simulation.
func (s *sim) scheduleSubmit(i int, at time.Time) {
	st := s.streams[i]
	until := Epoch.Add(st.spec.Until.D())
	if st.pending || at.After(until) || at.After(s.end) || (st.spec.Count > 0 && st.submitted >= st.spec.Count) {
		return
	}
	if st.spec.Rate == 0 && st.spec.Backlog == 0 && st.submitted > 0 {
		return // a burst submits once
	}
	st.pending = true
	s.push(event{at: at, kind: evSubmit, stream: i})
}

// submit creates one job of stream i at now.
func (s *sim) submit(i int) {
	st := s.streams[i]
	spec := st.spec
	rt := spec.Runtime.Min
	if spec.Runtime.Max > spec.Runtime.Min {
		rt += time.Duration(st.rng.Int64N(int64(spec.Runtime.Max-spec.Runtime.Min) + 1))
	}
	j := &job{
		id:        int64(len(s.jobs) + 1),
		stream:    i,
		key:       s.keyOf(spec.Project, spec.Pool),
		res:       domain.Resources{GPUs: spec.GPUs, CPUs: spec.CPUs, Memory: spec.Memory, Nodes: spec.Nodes},
		runtime:   rt,
		submitted: s.now,
		queuedAt:  s.now,
		record:    -1,
	}
	j.rate = scheduler.CostRate(s.pools[s.poolIdx[spec.Pool]], j.res)
	s.jobs = append(s.jobs, j)
	s.enqueue(j) // ids grow, so this appends
	if s.chk != nil {
		s.chk.submitted(j)
	}
	st.submitted++
	st.queued++
}

func (s *sim) keyOf(project, pool string) int {
	i, _ := slices.BinarySearchFunc(s.keys, usageKey{project, pool}, func(a, b usageKey) int {
		return cmp.Or(strings.Compare(a.project, b.project), strings.Compare(a.pool, b.pool))
	})
	return i
}

// spec is the stream spec of j.
func (s *sim) spec(j *job) *StreamSpec { return &s.streams[j.stream].spec }

// pendingOf and allocOf are j as the scheduler sees it.
func (s *sim) pendingOf(j *job) scheduler.Pending {
	spec := s.spec(j)
	return scheduler.Pending{
		JobID: j.id, Project: spec.Project, Pool: spec.Pool, Priority: spec.Priority,
		SubmittedAt: j.submitted, Resources: j.res, Timeout: spec.Timeout.D(),
		Preemptible: spec.Preemptible, Preemptions: j.preemptions, Beneficiary: j.beneficiary,
	}
}

func (s *sim) allocOf(j *job) scheduler.Allocation {
	spec := s.spec(j)
	return scheduler.Allocation{
		JobID: j.id, Project: spec.Project, Pool: spec.Pool, Priority: spec.Priority,
		Resources: j.res, Nodes: j.nodes, StartedAt: j.startedAt, Timeout: spec.Timeout.D(),
		Preemptible: spec.Preemptible, Borrowed: j.borrowed, Stopping: j.state == stateStopping,
	}
}

// searchJobs finds id in jobs ordered by id.
func searchJobs(js []*job, id int64) (int, bool) {
	return slices.BinarySearchFunc(js, id, func(a *job, id int64) int { return cmp.Compare(a.id, id) })
}

// enqueue adds j to the queue; dequeue takes it out. addRunning,
// dropRunning and markStopping do the same for running jobs. Each keeps
// the scheduler's view in step and notes the change for the next pass.
func (s *sim) enqueue(j *job) {
	i, _ := searchJobs(s.pending, j.id)
	s.pending = slices.Insert(s.pending, i, j)
	s.snapPending = slices.Insert(s.snapPending, i, s.pendingOf(j))
	s.changed = append(s.changed, j.id)
}

func (s *sim) dequeue(j *job) {
	if i, ok := searchJobs(s.pending, j.id); ok {
		s.pending = slices.Delete(s.pending, i, i+1)
		s.snapPending = slices.Delete(s.snapPending, i, i+1)
		s.changed = append(s.changed, j.id)
	}
}

func (s *sim) addRunning(j *job) {
	i, _ := searchJobs(s.running, j.id)
	s.running = slices.Insert(s.running, i, j)
	s.snapRunning = slices.Insert(s.snapRunning, i, s.allocOf(j))
	s.changed = append(s.changed, j.id)
}

func (s *sim) dropRunning(j *job) {
	if i, ok := searchJobs(s.running, j.id); ok {
		s.running = slices.Delete(s.running, i, i+1)
		s.snapRunning = slices.Delete(s.snapRunning, i, i+1)
		s.changed = append(s.changed, j.id)
	}
}

func (s *sim) markStopping(j *job) {
	j.state = stateStopping
	if i, ok := searchJobs(s.running, j.id); ok {
		s.snapRunning[i].Stopping = true
		s.changed = append(s.changed, j.id)
	}
}

// handleSubmit runs a stream's submission event.
func (s *sim) handleSubmit(i int) {
	st := s.streams[i]
	st.pending = false
	spec := st.spec
	switch {
	case spec.Rate > 0:
		s.submit(i)
		s.scheduleSubmit(i, s.now.Add(s.interArrival(st)))
	case spec.Backlog > 0:
		s.refill(i)
	default:
		for range spec.Count {
			s.submit(i)
		}
	}
}

// refill tops a backlog stream up to its backlog, if it is active.
func (s *sim) refill(i int) {
	st := s.streams[i]
	spec := st.spec
	if s.now.Before(Epoch.Add(spec.SubmitAt.D())) || s.now.After(Epoch.Add(spec.Until.D())) {
		return
	}
	for st.queued < spec.Backlog && (spec.Count == 0 || st.submitted < spec.Count) {
		s.submit(i)
	}
}

// loop processes events until the end of the simulation or of the work.
func (s *sim) loop() error {
	for s.heap.Len() > 0 {
		at := s.heap[0].at
		if at.After(s.end) {
			break
		}
		s.now = at
		tick := false
		for s.heap.Len() > 0 && s.heap[0].at.Equal(at) {
			e := heap.Pop(&s.heap).(event)
			switch e.kind {
			case evSubmit:
				s.handleSubmit(e.stream)
			case evEnd:
				s.handleEnd(e.job, e.attempt)
			case evStop:
				s.handleStop(e.job, e.attempt)
			case evTick:
				tick = true
			}
		}
		for range maxPassesPerInstant {
			changed, err := s.pass()
			if err != nil {
				return err
			}
			if !changed {
				break
			}
		}
		if s.idle() {
			s.drained = true
			break
		}
		if tick {
			if next := s.now.Add(s.w.Simulation.Tick.D()); !next.After(s.end) {
				s.push(event{at: next, kind: evTick})
			}
		}
	}
	if !s.drained {
		s.now = s.end
	}
	return nil
}

// idle reports whether nothing is queued, running or still to be submitted.
func (s *sim) idle() bool {
	if len(s.pending) > 0 || len(s.running) > 0 {
		return false
	}
	for _, st := range s.streams {
		if st.pending {
			return false
		}
	}
	return true
}

// pass runs one scheduling pass at s.now and applies its plan. It reports
// whether the plan started or stopped anything.
func (s *sim) pass() (bool, error) {
	if len(s.pending) == 0 {
		return false, nil
	}
	s.passes++
	if s.chk != nil {
		s.chk.entitle()
	}
	snap := s.snapshot()
	plan := s.schedule(snap, s.changed)
	s.changed = s.changed[:0]
	if s.chk != nil {
		s.chk.beforeApply(plan)
	}

	changed := false
	for _, pl := range plan.Start {
		if err := s.start(pl); err != nil {
			return false, fmt.Errorf("pass %d at %s: %w", s.passes, s.offset(s.now), err)
		}
		changed = true
	}
	for _, pr := range plan.Preempt {
		if err := s.preempt(pr); err != nil {
			return false, fmt.Errorf("pass %d at %s: %w", s.passes, s.offset(s.now), err)
		}
		changed = true
	}
	if s.chk != nil {
		s.chk.afterApply(plan)
	}
	s.stopPreempted()
	for _, w := range plan.Waiting {
		if j := s.job(w.JobID); j != nil && j.state == statePending {
			j.noteReason(w.Reason, s.now)
		}
	}
	for i, st := range s.streams {
		if st.spec.Backlog > 0 {
			before := st.submitted
			s.refill(i)
			changed = changed || st.submitted > before
		}
	}
	return changed, nil
}

// snapshot is the scheduler's input now. Its slices are the sim's own: the
// scheduler does not modify a snapshot, and the sim changes them only
// between passes.
func (s *sim) snapshot() scheduler.Snapshot {
	return scheduler.Snapshot{
		Now:      s.now,
		Pools:    s.pools,
		Quotas:   s.quotas,
		Projects: s.projects,
		Usage:    s.usage(),
		Pending:  s.snapPending,
		Running:  s.snapRunning,
	}
}

func (s *sim) offset(t time.Time) string { return domain.FormatDuration(t.Sub(Epoch)) }

func (s *sim) job(id int64) *job {
	if id < 1 || id > int64(len(s.jobs)) {
		return nil
	}
	return s.jobs[id-1]
}

// start applies one placement after checking it against the contract.
func (s *sim) start(pl scheduler.Placement) error {
	j := s.job(pl.JobID)
	if j == nil || j.state != statePending {
		return fmt.Errorf("scheduler started job %d, which is not pending", pl.JobID)
	}
	spec := s.spec(j)
	if pl.Pool != spec.Pool {
		return fmt.Errorf("scheduler placed job %d in pool %q; it was submitted to %q", j.id, pl.Pool, spec.Pool)
	}
	if err := s.checkFits(j, pl.Nodes); err != nil {
		return err
	}
	j.beneficiary = false
	waitedFor := j.reason
	j.noteReason("", s.now)
	s.dequeue(j)
	j.state = stateRunning
	j.attempt++
	j.startedAt = s.now
	if j.firstStart.IsZero() {
		j.firstStart = s.now
	}
	// The plan is valid only until the next pass: keep a copy.
	j.nodes = make([]scheduler.NodeAlloc, len(pl.Nodes))
	for k, na := range pl.Nodes {
		j.nodes[k] = scheduler.NodeAlloc{Node: na.Node, GPUs: slices.Clone(na.GPUs)}
	}
	j.borrowed = pl.Borrowed
	j.record = len(s.records)
	s.records = append(s.records, scheduler.UsageRecord{Project: spec.Project, Pool: spec.Pool, Rate: j.rate, Start: s.now})
	s.recJobs = append(s.recJobs, j)
	s.addRunning(j)
	s.streams[j.stream].queued--

	attemptLen := j.runtime - j.done
	if t := spec.Timeout.D(); t > 0 && attemptLen > t {
		attemptLen = t
	}
	s.push(event{at: s.now.Add(attemptLen), kind: evEnd, job: j, attempt: j.attempt})
	if s.opt.Events != nil {
		s.emitStart(j, waitedFor)
	}
	return nil
}

// checkFits verifies that a placement uses distinct nodes of the job's pool
// with free capacity and free GPUs: the simulator's invariant check.
func (s *sim) checkFits(j *job, nodes []scheduler.NodeAlloc) error {
	if len(nodes) != max(j.res.Nodes, 1) {
		return fmt.Errorf("scheduler placed job %d on %d node(s); it asks for %d", j.id, len(nodes), max(j.res.Nodes, 1))
	}
	pi := s.poolIdx[s.spec(j).Pool]
	pool := s.pools[pi]
	for k, na := range nodes {
		node := s.nodes[pi][na.Node]
		if node == nil {
			return fmt.Errorf("scheduler placed job %d on node %q, which is not in pool %q", j.id, na.Node, pool.Name)
		}
		if slices.ContainsFunc(nodes[:k], func(o scheduler.NodeAlloc) bool { return o.Node == na.Node }) {
			return fmt.Errorf("scheduler placed two members of job %d's gang on node %q", j.id, na.Node)
		}
		if len(na.GPUs) != j.res.GPUs {
			return fmt.Errorf("scheduler gave job %d %d GPU(s) on node %q; it asks for %d", j.id, len(na.GPUs), na.Node, j.res.GPUs)
		}
		cpus, mem := node.CPUs, node.Memory
		for _, o := range s.running {
			for _, ona := range o.nodes {
				if ona.Node != na.Node || s.spec(o).Pool != pool.Name {
					continue
				}
				cpus -= o.res.CPUs
				mem -= o.res.Memory
				for _, g := range na.GPUs {
					if slices.Contains(ona.GPUs, g) {
						return fmt.Errorf("scheduler placed job %d on GPU %d of node %q, which job %d holds", j.id, g, na.Node, o.id)
					}
				}
			}
		}
		for _, g := range na.GPUs {
			if !slices.Contains(node.GPUs, g) {
				return fmt.Errorf("scheduler placed job %d on GPU %d of node %q, which has no such GPU", j.id, g, na.Node)
			}
		}
		if j.res.CPUs > cpus+1e-9 || j.res.Memory > mem {
			return fmt.Errorf("scheduler placed job %d on node %q, which has only %g CPUs and %s memory free", j.id, na.Node, max(cpus, 0), max(mem, 0))
		}
	}
	return nil
}

// preempt marks a victim as stopping; it releases its resources after the
// stop delay (without one, at the end of the pass).
func (s *sim) preempt(pr scheduler.Preemption) error {
	j := s.job(pr.JobID)
	if j == nil || j.state != stateRunning {
		return fmt.Errorf("scheduler preempted job %d, which is not running (or is already stopping)", pr.JobID)
	}
	if !s.spec(j).Preemptible && !j.borrowed {
		return fmt.Errorf("scheduler preempted job %d, which is neither preemptible nor borrowing", j.id)
	}
	s.markStopping(j)
	s.preemptions++
	if b := s.job(pr.For); b != nil && b.state == statePending && !b.beneficiary {
		// Re-queue it in the scheduler's view with the mark.
		s.dequeue(b)
		b.beneficiary = true
		s.enqueue(b)
	}
	if s.opt.Events != nil {
		s.emitPreempt(j, pr.For, pr.Message)
	}
	if d := s.w.Simulation.StopDelay.D(); d > 0 {
		s.push(event{at: s.now.Add(d), kind: evStop, job: j, attempt: j.attempt})
		return nil
	}
	s.stopNow = append(s.stopNow, j)
	return nil
}

// stopPreempted stops this pass's victims that have no stop delay.
func (s *sim) stopPreempted() {
	for _, j := range s.stopNow {
		s.stop(j)
	}
	s.stopNow = s.stopNow[:0]
}

// handleEnd ends an attempt that ran its course (unless it was stopped first).
func (s *sim) handleEnd(j *job, attempt int) {
	if j.attempt != attempt || (j.state != stateRunning && j.state != stateStopping) {
		return // a stale event: the attempt was preempted
	}
	s.release(j)
	j.done += s.now.Sub(j.startedAt)
	if j.done >= j.runtime {
		j.state = stateSucceeded
	} else {
		j.state = stateFailed
	}
	s.lastEnd = s.now
	if s.opt.Events != nil {
		s.emitEnd(j)
	}
}

// handleStop releases a preempted attempt after its stop delay.
func (s *sim) handleStop(j *job, attempt int) {
	if j.attempt != attempt || j.state != stateStopping {
		return // it ended on its own first
	}
	s.stop(j)
}

// stop ends a preempted attempt now: the job keeps the work up to its last
// checkpoint and goes back to the queue.
func (s *sim) stop(j *job) {
	s.release(j)
	ran := s.now.Sub(j.startedAt)
	saved := time.Duration(0)
	if c := s.w.Simulation.CheckpointInterval.D(); c > 0 {
		saved = ran / c * c
	}
	j.done = min(j.done+saved, j.runtime)
	j.lost += ran - saved
	j.preemptions++
	j.state = statePending
	j.nodes = nil
	j.borrowed = false
	j.queuedAt = s.now
	s.enqueue(j)
	s.streams[j.stream].queued++
	if s.opt.Events != nil {
		s.emitRequeue(j, ran, saved)
	}
}

// release frees an attempt's resources and closes its usage record.
func (s *sim) release(j *job) {
	rec := &s.records[j.record]
	rec.End = s.now
	s.dropRunning(j)

	d := &s.closed[j.key]
	// ∫ rate·e^(-λ·age) over the attempt, seen from its end.
	v := rec.Rate / s.lambda * (1 - math.Exp(-s.lambda*rec.End.Sub(rec.Start).Hours()))
	d.value = d.value*math.Exp(-s.lambda*s.now.Sub(d.at).Hours()) + v
	d.at = s.now
}

// usageKey is a (project, pool) pair.
type usageKey struct{ project, pool string }

// decayed is a decayed usage total as of a time.
type decayed struct {
	value float64
	at    time.Time
}

// usage is the snapshot's Usage: what scheduler.DecayUsage gives over every
// attempt's record, computed without passing the records one by one.
// Decay is exponential, so the ended attempts' total at a later time is
// their total at an earlier time times e^(-λ·elapsed): each key's ended
// attempts are one decayed value (closed). A running attempt adds
// rate/λ·(1-e^(-λ·age)). A pass thus costs O(running jobs) rather than
// O(history), and the value is computed once per instant: an attempt that
// starts now adds nothing yet, and one that ends now moves its value from
// running to closed unchanged.
func (s *sim) usage() []scheduler.Usage {
	if s.usageOK && s.usageAt.Equal(s.now) {
		return s.usageNow
	}
	sums := make([]float64, len(s.keys))
	for k, d := range s.closed {
		if d.value > 0 {
			sums[k] = d.value * math.Exp(-s.lambda*s.now.Sub(d.at).Hours())
		}
	}
	for _, j := range s.running {
		if age := s.now.Sub(j.startedAt).Hours(); age > 0 && j.rate > 0 {
			sums[j.key] += j.rate / s.lambda * (1 - math.Exp(-s.lambda*age))
		}
	}
	out := make([]scheduler.Usage, 0, len(s.keys))
	for k, v := range sums {
		if v > 0 {
			out = append(out, scheduler.Usage{Project: s.keys[k].project, Pool: s.keys[k].pool, Value: v})
		}
	}
	s.usageAt, s.usageNow, s.usageOK = s.now, out, true
	return out
}
