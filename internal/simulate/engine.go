// Package simulate runs the scheduler over a synthetic workload in virtual
// time and reports what it did: utilisation per pool, wait times,
// preemptions and each project's GPU-hours against its fair share.
//
// The simulation is a discrete-event loop. The simulator is the clock: it
// reads no wall time and never sleeps, and every random draw comes from the
// workload's seed, so the same file gives the same report. Each scheduling
// pass builds a scheduler.Snapshot exactly as the control loop would, calls
// the pure scheduler.Schedule and applies the plan: placements start jobs,
// preemptions stop them (they re-queue and resume from their last
// checkpoint). The package imports no store, executor or server.
package simulate

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/scheduler"
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
	res       domain.Resources
	runtime   time.Duration // work needed in all
	done      time.Duration // work saved at the last checkpoint
	submitted time.Time
	state     jobState

	// current or last attempt
	attempt     int
	startedAt   time.Time
	firstStart  time.Time // zero until it first starts
	nodes       []scheduler.NodeAlloc
	borrowed    bool
	record      int // index of the attempt's usage record
	preemptions int
	lost        time.Duration // work lost to preemption

	// Why it waits, from the plans' Waiting entries: the current reason
	// since when, and the time waited per reason so far.
	reason      domain.Reason
	reasonSince time.Time
	waited      map[domain.Reason]time.Duration
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
	cfg      scheduler.Config
	pools    []domain.Pool
	poolIdx  map[string]int
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
	records []scheduler.UsageRecord
	recJobs []*job // the job of each usage record
	// closed folds the usage records of ended attempts per (project, pool)
	// into one decayed value (see usage).
	closed     map[usageKey]*decayed
	closedKeys []usageKey        // in first-seen order
	lambda     float64           // decay rate per hour: ln 2 / half-life
	rates      map[int64]float64 // per job: scheduler.CostRate in its pool

	passes      int
	preemptions int
	lastEnd     time.Time
	drained     bool // every job ended and no stream will submit more
}

// Run simulates w and returns its report. It fails only when the scheduler
// breaks its contract (e.g. places a job on GPUs another job holds); such
// an error names the pass, the job and the conflict.
func Run(w Workload) (*Report, error) {
	s := newSim(w)
	if err := s.loop(); err != nil {
		return nil, err
	}
	return s.report(), nil
}

func newSim(w Workload) *sim {
	s := &sim{
		w: w,
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
		rates:    map[int64]float64{},
		closed:   map[usageKey]*decayed{},
	}
	hl := s.cfg.FairShareHalfLife
	if hl <= 0 {
		hl = scheduler.DefaultFairShareHalfLife
	}
	s.lambda = math.Ln2 / hl.Hours()
	for i, p := range s.pools {
		s.poolIdx[p.Name] = i
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
		res:       domain.Resources{GPUs: spec.GPUs, CPUs: spec.CPUs, Memory: spec.Memory, Nodes: spec.Nodes},
		runtime:   rt,
		submitted: s.now,
		record:    -1,
	}
	s.jobs = append(s.jobs, j)
	s.pending = append(s.pending, j) // ids grow, so the slice stays sorted
	s.rates[j.id] = scheduler.CostRate(s.pools[s.poolIdx[spec.Pool]], j.res)
	st.submitted++
	st.queued++
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
	snap := scheduler.Snapshot{
		Now:      s.now,
		Pools:    s.pools,
		Quotas:   s.quotas,
		Projects: s.projects,
		Usage:    s.usage(),
		Pending:  make([]scheduler.Pending, 0, len(s.pending)),
		Running:  make([]scheduler.Allocation, 0, len(s.running)),
	}
	for _, j := range s.pending {
		spec := s.streams[j.stream].spec
		snap.Pending = append(snap.Pending, scheduler.Pending{
			JobID: j.id, Project: spec.Project, Pool: spec.Pool, Priority: spec.Priority,
			SubmittedAt: j.submitted, Resources: j.res, Timeout: spec.Timeout.D(),
			Preemptible: spec.Preemptible, Preemptions: j.preemptions,
		})
	}
	for _, j := range s.running {
		spec := s.streams[j.stream].spec
		snap.Running = append(snap.Running, scheduler.Allocation{
			JobID: j.id, Project: spec.Project, Pool: spec.Pool, Priority: spec.Priority,
			Resources: j.res, Nodes: j.nodes, StartedAt: j.startedAt, Timeout: spec.Timeout.D(),
			Preemptible: spec.Preemptible, Borrowed: j.borrowed, Stopping: j.state == stateStopping,
		})
	}
	plan := scheduler.Schedule(snap, s.cfg)

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
	spec := s.streams[j.stream].spec
	if pl.Pool != spec.Pool {
		return fmt.Errorf("scheduler placed job %d in pool %q; it was submitted to %q", j.id, pl.Pool, spec.Pool)
	}
	if err := s.checkFits(j, pl.Nodes); err != nil {
		return err
	}
	j.noteReason("", s.now)
	j.state = stateRunning
	j.attempt++
	j.startedAt = s.now
	if j.firstStart.IsZero() {
		j.firstStart = s.now
	}
	j.nodes = pl.Nodes
	j.borrowed = pl.Borrowed
	j.record = len(s.records)
	s.records = append(s.records, scheduler.UsageRecord{Project: spec.Project, Pool: spec.Pool, Rate: s.rates[j.id], Start: s.now})
	s.recJobs = append(s.recJobs, j)
	s.pending = deleteJob(s.pending, j)
	s.running = insertJob(s.running, j)
	s.streams[j.stream].queued--

	attemptLen := j.runtime - j.done
	if t := spec.Timeout.D(); t > 0 && attemptLen > t {
		attemptLen = t
	}
	s.push(event{at: s.now.Add(attemptLen), kind: evEnd, job: j, attempt: j.attempt})
	return nil
}

// checkFits verifies that a placement uses distinct nodes of the job's pool
// with free capacity and free GPUs: the simulator's invariant check.
func (s *sim) checkFits(j *job, nodes []scheduler.NodeAlloc) error {
	if len(nodes) != max(j.res.Nodes, 1) {
		return fmt.Errorf("scheduler placed job %d on %d node(s); it asks for %d", j.id, len(nodes), max(j.res.Nodes, 1))
	}
	pool := s.pools[s.poolIdx[s.streams[j.stream].spec.Pool]]
	for k, na := range nodes {
		var node *domain.Node
		for i := range pool.Nodes {
			if pool.Nodes[i].Name == na.Node {
				node = &pool.Nodes[i]
			}
		}
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
				if ona.Node != na.Node || s.streams[o.stream].spec.Pool != pool.Name {
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
// stop delay.
func (s *sim) preempt(pr scheduler.Preemption) error {
	j := s.job(pr.JobID)
	if j == nil || j.state != stateRunning {
		return fmt.Errorf("scheduler preempted job %d, which is not running (or is already stopping)", pr.JobID)
	}
	if !s.streams[j.stream].spec.Preemptible && !j.borrowed {
		return fmt.Errorf("scheduler preempted job %d, which is neither preemptible nor borrowing", j.id)
	}
	j.state = stateStopping
	s.preemptions++
	if d := s.w.Simulation.StopDelay.D(); d > 0 {
		s.push(event{at: s.now.Add(d), kind: evStop, job: j, attempt: j.attempt})
		return nil
	}
	s.stop(j)
	return nil
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
	s.pending = insertJob(s.pending, j)
	s.streams[j.stream].queued++
}

// release frees an attempt's resources and closes its usage record.
func (s *sim) release(j *job) {
	rec := &s.records[j.record]
	rec.End = s.now
	s.running = deleteJob(s.running, j)

	k := usageKey{rec.Project, rec.Pool}
	d := s.closed[k]
	if d == nil {
		d = &decayed{at: s.now}
		s.closed[k] = d
		s.closedKeys = append(s.closedKeys, k)
	}
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

// usage computes the snapshot's Usage with scheduler.DecayUsage. Ended
// attempts are not passed one by one: decay is exponential, so their total
// at a later time is their total at an earlier time times
// e^(-λ·elapsed). Each (project, pool)'s ended attempts go in as one
// equivalent record ending now, with the running attempts as they are, so a
// pass costs O(running jobs) rather than O(history).
func (s *sim) usage() []scheduler.Usage {
	recs := make([]scheduler.UsageRecord, 0, len(s.running)+len(s.closedKeys))
	for _, j := range s.running {
		recs = append(recs, s.records[j.record])
	}
	const span = time.Hour
	for _, k := range s.closedKeys {
		d := s.closed[k]
		v := d.value * math.Exp(-s.lambda*s.now.Sub(d.at).Hours())
		if v <= 0 {
			continue
		}
		// A record over [now-1h, now] at this rate decays to exactly v.
		rate := v * s.lambda / (1 - math.Exp(-s.lambda*span.Hours()))
		recs = append(recs, scheduler.UsageRecord{Project: k.project, Pool: k.pool, Rate: rate, Start: s.now.Add(-span), End: s.now})
	}
	return scheduler.DecayUsage(recs, s.now, s.cfg.FairShareHalfLife)
}

func insertJob(js []*job, j *job) []*job {
	i, _ := slices.BinarySearchFunc(js, j.id, func(a *job, id int64) int { return cmp.Compare(a.id, id) })
	return slices.Insert(js, i, j)
}

func deleteJob(js []*job, j *job) []*job {
	i, ok := slices.BinarySearchFunc(js, j.id, func(a *job, id int64) int { return cmp.Compare(a.id, id) })
	if !ok {
		return js
	}
	return slices.Delete(js, i, i+1)
}
