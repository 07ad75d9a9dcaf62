package simulate

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/scheduler"
)

// Invariants checked with Options.Check (sim --check). The gang invariant
// (a multi-node job starts on all its nodes at once or not at all) is the
// placement contract checkFits enforces on every run: breaking it stops the
// run with an error.
const (
	InvariantQuota      = "quota"
	InvariantGuarantee  = "guarantee"
	InvariantStability  = "stability"
	InvariantRepeated   = "repeated-preemption"
	InvariantMinimal    = "minimal-preemption"
	InvariantStarvation = "starvation"
)

// Invariants lists the checked invariants in report order.
func Invariants() []string {
	return []string{InvariantQuota, InvariantGuarantee, InvariantStability, InvariantRepeated, InvariantMinimal, InvariantStarvation}
}

// maxKeptViolations bounds the violations kept per invariant; the counts
// stay exact.
const maxKeptViolations = 1000

// Violation is one broken invariant.
type Violation struct {
	Invariant string          `json:"invariant"`
	At        domain.Duration `json:"at"`   // virtual time
	Pass      int             `json:"pass"` // 0: found at the end of the run
	Jobs      []int64         `json:"jobs"`
	Message   string          `json:"message"`
}

func (v Violation) String() string {
	when := fmt.Sprintf("at %s (pass %d)", v.At, v.Pass)
	if v.Pass == 0 {
		when = fmt.Sprintf("at the end (%s)", v.At)
	}
	return fmt.Sprintf("%s %s: %s", when, v.Invariant, v.Message)
}

// CheckReport is what the invariant checks found.
type CheckReport struct {
	// Passes is the number of passes checked (every pass of the run).
	Passes int `json:"passes"`
	// Counts has every invariant's number of violations, zeros included.
	Counts map[string]int `json:"violations_by_invariant"`
	// Violations are in the order found, at most 1000 per invariant.
	Violations  []Violation      `json:"violations"`
	Preemptions PreemptionCounts `json:"preemptions"`
	// StabilitySkipped counts passes whose plan used the whole preemption
	// budget (max_preemptions_per_cycle): a second pass may then rightly
	// preempt more, so the stability invariant is not checked for them.
	StabilitySkipped int `json:"stability_skipped"`
}

// PreemptionCounts sorts the run's preemptions by why the victim could be
// taken.
type PreemptionCounts struct {
	Total int `json:"total"`
	// Priority: the victim was preemptible and of lower priority than the
	// job it made room for, of another project.
	Priority int `json:"priority"`
	// Reclaim: the victim, of another project, was taken for capacity
	// (borrowed work reclaimed by a project within its guarantee).
	Reclaim int `json:"reclaim"`
	// Own: the victim was of the same project.
	Own int `json:"own"`
	// Repeated: preemptions of a job for a beneficiary it had already been
	// preempted for.
	Repeated int `json:"repeated"`
}

// Violated is the number of violations found.
func (c *CheckReport) Violated() int {
	n := 0
	for _, v := range c.Counts {
		n += v
	}
	return n
}

// amount is resources in the units quotas count; +Inf is unlimited.
type amount struct{ gpus, cpus, mem, jobs float64 }

var unlimited = amount{math.Inf(1), math.Inf(1), math.Inf(1), math.Inf(1)}

func gangAmount(r domain.Resources) amount {
	n := float64(max(r.Nodes, 1))
	return amount{float64(r.GPUs) * n, r.CPUs * n, float64(r.Memory) * n, 1}
}

func (a amount) plus(b amount) amount {
	return amount{a.gpus + b.gpus, a.cpus + b.cpus, a.mem + b.mem, a.jobs + b.jobs}
}

func (a amount) minus(b amount) amount {
	return amount{a.gpus - b.gpus, a.cpus - b.cpus, a.mem - b.mem, a.jobs - b.jobs}
}

// within reports whether a fits under l in every dimension.
func (a amount) within(l amount) bool {
	return a.gpus <= l.gpus && a.cpus <= l.cpus+1e-9 && a.mem <= l.mem && a.jobs <= l.jobs
}

// covers reports whether a frees at least need in each of the capacity
// dimensions (GPUs, CPUs, memory) where need is finite.
func (a amount) covers(need amount) bool {
	ok := func(have, want float64) bool { return math.IsInf(want, 1) || have >= want-1e-9 }
	return ok(a.gpus, need.gpus) && ok(a.cpus, need.cpus) && ok(a.mem, need.mem)
}

// larger orders amounts by GPUs, then CPUs, then memory.
func larger(a, b amount) bool {
	return cmp.Or(cmp.Compare(a.gpus, b.gpus), cmp.Compare(a.cpus, b.cpus), cmp.Compare(a.mem, b.mem)) > 0
}

func (a amount) String() string {
	var parts []string
	plural := func(v float64, unit string) string {
		if v == 1 {
			return "1 " + unit
		}
		return fmt.Sprintf("%g %ss", v, unit)
	}
	if !math.IsInf(a.gpus, 1) {
		parts = append(parts, plural(a.gpus, "GPU"))
	}
	if !math.IsInf(a.cpus, 1) && a.cpus != 0 {
		parts = append(parts, plural(a.cpus, "CPU"))
	}
	if !math.IsInf(a.mem, 1) && a.mem != 0 {
		parts = append(parts, domain.ByteSize(a.mem).String()+" memory")
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

// checker checks a run's invariants pass by pass. All of it works on the
// sim's state; it changes none of it.
type checker struct {
	s *sim
	// Per (project, pool) key: the guarantee, the ceiling (guarantee +
	// borrow, or the pool for a project without quota in a borrowing
	// pool) and how the ceiling reads.
	guar, ceil []amount
	ceilText   []string
	budget     int    // preemptions per pass; 0: preemption off
	guaranteed []bool // per pool: its guarantees fit in it (the guarantee invariant applies)
	starve     []bool // per pool: the starvation invariant applies
	grace      time.Duration
	pairs      map[[2]int64]bool // (victim, beneficiary) preemptions so far

	// Per pass.
	within   map[int]map[int64]bool // per key: running jobs within its guarantee, with the plan's starts
	starting []*job                 // the jobs the plan starts
	reclaims map[int][]*job         // per beneficiary key: reclaim victims
	minRank  map[int]int            // per beneficiary key: the lowest priority rank reclaiming
	useRank  [][4]amount            // per key and priority rank: use by jobs of that rank or higher
	rankOK   bool

	finishing bool // finish is running: violations belong to no pass
	rep       CheckReport
}

func newChecker(s *sim) *checker {
	c := &checker{s: s, pairs: map[[2]int64]bool{}, rep: CheckReport{Counts: map[string]int{}}}
	for _, inv := range Invariants() {
		c.rep.Counts[inv] = 0
	}
	quotaPools := map[string]bool{}
	for _, q := range s.quotas {
		quotaPools[q.Pool] = true
	}
	for _, k := range s.keys {
		pool := s.pools[s.poolIdx[k.pool]]
		var q *domain.Quota
		for i := range s.quotas {
			if s.quotas[i].Project == k.project && s.quotas[i].Pool == k.pool {
				q = &s.quotas[i]
			}
		}
		g, ce, text := quotaAmounts(pool, q, !quotaPools[k.pool])
		c.guar, c.ceil, c.ceilText = append(c.guar, g), append(c.ceil, ce), append(c.ceilText, text)
	}
	c.budget = s.cfg.MaxPreemptionsPerCycle
	switch {
	case c.budget == 0:
		c.budget = scheduler.DefaultMaxPreemptionsPerCycle
	case c.budget < 0:
		c.budget = 0
	}
	// Guarantees mean something only where they fit in the pool together;
	// in an oversubscribed pool two projects can each be "within" theirs.
	// Starvation is a fault of the scheduler only where, moreover, it could
	// always make room: the pool preempts.
	for _, p := range s.pools {
		var sum amount
		for i := range s.quotas {
			if s.quotas[i].Pool == p.Name {
				g, _, _ := quotaAmounts(p, &s.quotas[i], false)
				sum = sum.plus(amount{g.gpus, finite(g.cpus), finite(g.mem), 0})
			}
		}
		capa := p.Capacity()
		fits := sum.within(amount{float64(capa.GPUs), capa.CPUs, float64(capa.Memory), 0})
		c.guaranteed = append(c.guaranteed, fits)
		c.starve = append(c.starve, fits && p.Preemption && c.budget > 0)
	}
	c.grace = s.w.Simulation.StopDelay.D() + 2*s.w.Simulation.Tick.D()
	return c
}

// quotaAmounts is a project's guarantee and ceiling in a pool, as
// docs/scheduling.md states them: guaranteed GPUs are literal, guaranteed
// CPUs, memory or jobs of 0 are unlimited; with borrowing (the pool allows
// it and the quota's borrow is not all zero) the ceiling is guarantee +
// borrow. Without a quota the guarantee is zero and the ceiling is the
// pool when it allows borrowing or is open (no project has a quota there),
// else zero. (In an open pool all projects are one queue, so no job is
// within a guarantee of its own.)
func quotaAmounts(pool domain.Pool, q *domain.Quota, open bool) (guar, ceil amount, text string) {
	if q == nil && open {
		return amount{}, unlimited, "open pool: no quotas"
	}
	if q == nil {
		if pool.Borrowing {
			return amount{}, unlimited, "no quota; borrowing"
		}
		return amount{}, amount{}, "no quota, no borrowing"
	}
	g := q.Guaranteed
	guar = amount{float64(max(g.GPUs, 0)), g.CPUs, float64(g.Memory), float64(g.Jobs)}
	if g.CPUs <= 0 {
		guar.cpus = math.Inf(1)
	}
	if g.Memory <= 0 {
		guar.mem = math.Inf(1)
	}
	if g.Jobs <= 0 {
		guar.jobs = math.Inf(1)
	}
	b := q.Borrow
	if !pool.Borrowing || (b.GPUs <= 0 && b.CPUs <= 0 && b.Memory <= 0 && b.Jobs <= 0) {
		return guar, guar, "quota " + guar.String()
	}
	ceil = guar.plus(amount{float64(max(b.GPUs, 0)), max(b.CPUs, 0), float64(max(b.Memory, 0)), float64(max(b.Jobs, 0))})
	return guar, ceil, fmt.Sprintf("quota %s + borrow %s", guar, amount{float64(max(b.GPUs, 0)), max(b.CPUs, 0), float64(max(b.Memory, 0)), math.Inf(1)})
}

// finite is v, or 0 for an unlimited dimension.
func finite(v float64) float64 {
	if math.IsInf(v, 1) {
		return 0
	}
	return v
}

func (c *checker) add(inv string, jobs []int64, format string, args ...any) {
	c.rep.Counts[inv]++
	if c.rep.Counts[inv] > maxKeptViolations {
		return
	}
	pass := c.s.passes
	if c.finishing {
		pass = 0
	}
	c.rep.Violations = append(c.rep.Violations, Violation{Invariant: inv, At: c.s.at(),
		Pass: pass, Jobs: jobs, Message: fmt.Sprintf(format, args...)})
}

// name is how violations name a job.
func (c *checker) name(j *job) string {
	spec := c.s.spec(j)
	return fmt.Sprintf("job %d (%s, project %s, %s)", j.id, spec.Name, spec.Project, spec.Priority)
}

func (c *checker) rank(j *job) int { return c.s.spec(j).Priority.Rank() }

// use is what key's running jobs hold (stopping ones excluded: they are
// leaving).
func (c *checker) use(key int) amount {
	var u amount
	for _, j := range c.s.running {
		if j.key == key && j.state == stateRunning {
			u = u.plus(gangAmount(j.res))
		}
	}
	return u
}

// withinGuarantee reports whether running job v is within its project's
// guarantee in the allocation the plan leaves: order the project's running
// jobs in the pool, with the ones the plan starts (started now), by
// priority (high first), then start time (earliest first), then id; they
// fill the guarantee first-fit and those that do not fit are borrowed (the
// scheduler's rule: placing a higher-priority job makes the project's
// lower-priority jobs borrowed at once).
func (c *checker) withinGuarantee(v *job) bool {
	set, ok := c.within[v.key]
	if !ok {
		var js []*job
		for _, j := range c.s.running {
			if j.key == v.key && j.state == stateRunning {
				js = append(js, j)
			}
		}
		for _, j := range c.starting {
			if j.key == v.key {
				js = append(js, j)
			}
		}
		start := func(j *job) time.Time {
			if j.state == statePending {
				return c.s.now
			}
			return j.startedAt
		}
		slices.SortFunc(js, func(a, b *job) int {
			return cmp.Or(cmp.Compare(c.rank(b), c.rank(a)), start(a).Compare(start(b)), cmp.Compare(a.id, b.id))
		})
		set = map[int64]bool{}
		var acc amount
		for _, j := range js {
			if next := acc.plus(gangAmount(j.res)); next.within(c.guar[v.key]) {
				acc = next
				set[j.id] = true
			}
		}
		c.within[v.key] = set
	}
	return set[v.id]
}

// entitle runs before each pass: a job that has never started stays
// entitled (to start within its project's guarantee) while its request plus
// what its project runs at its priority or higher fits in the guarantee.
// Lower-priority work of its own project does not count: the job may
// preempt it.
func (c *checker) entitle() {
	c.rankOK = false
	for _, j := range c.s.pending {
		if j.unentitled || !j.firstStart.IsZero() {
			continue
		}
		if !c.rankOK {
			c.computeUseRank()
		}
		if !c.useRank[j.key][c.rank(j)].plus(gangAmount(j.res)).within(c.guar[j.key]) {
			j.unentitled = true
		}
	}
}

func (c *checker) computeUseRank() {
	if c.useRank == nil {
		c.useRank = make([][4]amount, len(c.s.keys))
	}
	clear(c.useRank)
	for _, j := range c.s.running {
		if j.state == stateRunning {
			r := c.rank(j)
			c.useRank[j.key][r] = c.useRank[j.key][r].plus(gangAmount(j.res))
		}
	}
	for k := range c.useRank {
		for r := 2; r >= 0; r-- {
			c.useRank[k][r] = c.useRank[k][r].plus(c.useRank[k][r+1])
		}
	}
	c.rankOK = true
}

// submitted marks jobs the starvation invariant does not cover.
func (c *checker) submitted(j *job) {
	if !c.starve[c.s.poolIdx[c.s.spec(j).Pool]] {
		j.unentitled = true
	}
}

// beforeApply checks the plan's preemptions against the allocation they
// were decided on: guarantee, repeated and minimal (per beneficiary).
func (c *checker) beforeApply(plan scheduler.Plan) {
	c.rep.Passes++
	if len(plan.Preempt) == 0 {
		return
	}
	c.within = map[int]map[int64]bool{}
	c.starting = c.starting[:0]
	for _, st := range plan.Start {
		if j := c.s.job(st.JobID); j != nil && j.state == statePending {
			c.starting = append(c.starting, j)
		}
	}
	c.reclaims = map[int][]*job{}
	c.minRank = map[int]int{}
	victims := map[int64][]*job{} // per beneficiary
	var order []int64
	for _, pr := range plan.Preempt {
		v, b := c.s.job(pr.JobID), c.s.job(pr.For)
		if v == nil || b == nil || v.state != stateRunning {
			continue // the contract check stops the run
		}
		c.rep.Preemptions.Total++
		own := v.key == b.key
		switch {
		case own:
			c.rep.Preemptions.Own++
		case c.s.spec(v).Preemptible && c.rank(v) < c.rank(b):
			c.rep.Preemptions.Priority++
		default:
			c.rep.Preemptions.Reclaim++
			if r, ok := c.minRank[b.key]; !ok || c.rank(b) < r {
				c.minRank[b.key] = c.rank(b)
			}
			c.reclaims[b.key] = append(c.reclaims[b.key], v)
		}
		pair := [2]int64{v.id, b.id}
		if c.pairs[pair] {
			c.rep.Preemptions.Repeated++
			c.add(InvariantRepeated, []int64{v.id, b.id}, "%s was preempted again for job %d (project %s), as it was before",
				c.name(v), b.id, c.s.spec(b).Project)
		}
		c.pairs[pair] = true
		if c.guaranteed[c.s.poolIdx[c.s.spec(v).Pool]] && c.withinGuarantee(v) && !(own && c.rank(b) > c.rank(v)) {
			c.add(InvariantGuarantee, []int64{v.id, b.id}, "%s ran within its project's guarantee (%s) and was preempted for %s; only a higher-priority job of its own project may take it",
				c.name(v), c.guar[v.key], c.name(b))
		}
		if _, ok := victims[b.id]; !ok {
			order = append(order, b.id)
		}
		victims[b.id] = append(victims[b.id], v)
	}
	for _, id := range order {
		c.minimalFor(c.s.job(id), victims[id])
	}
}

// minimalFor checks that the victims chosen for b are a minimal set: the
// victims but the largest must not free, on their own, what b asks for on
// as many nodes as its gang has. (Capacity already free only helps, so the
// largest victim was not needed.)
func (c *checker) minimalFor(b *job, vs []*job) {
	if len(vs) < 2 {
		return
	}
	big := vs[0]
	for _, v := range vs[1:] {
		if larger(gangAmount(v.res), gangAmount(big.res)) {
			big = v
		}
	}
	freed := map[string]amount{}
	var names []string
	for _, v := range vs {
		if v == big {
			continue
		}
		per := amount{float64(v.res.GPUs), v.res.CPUs, float64(v.res.Memory), 0}
		for _, na := range v.nodes {
			if _, ok := freed[na.Node]; !ok {
				names = append(names, na.Node)
			}
			freed[na.Node] = freed[na.Node].plus(per)
		}
	}
	need := amount{float64(b.res.GPUs), b.res.CPUs, float64(b.res.Memory), 0}
	var enough []string
	for _, n := range names {
		if freed[n].covers(need) {
			enough = append(enough, n)
		}
	}
	if k := max(b.res.Nodes, 1); len(enough) >= k {
		slices.Sort(enough)
		c.add(InvariantMinimal, append([]int64{b.id}, jobIDs(vs)...), "%d jobs (%s) preempted for %s, which needs %s on each of %d node(s): without the largest (job %d) they free that on %s",
			len(vs), joinIDs(vs), c.name(b), need, k, big.id, strings.Join(enough, ", "))
	}
}

// afterApply checks the state the plan left: quota, minimal (per reclaim)
// and stability.
func (c *checker) afterApply(plan scheduler.Plan) {
	s := c.s
	// quota: only starts raise a project's use.
	startedBy := map[int][]int64{}
	var keys []int
	for _, pl := range plan.Start {
		j := s.job(pl.JobID)
		if _, ok := startedBy[j.key]; !ok {
			keys = append(keys, j.key)
		}
		startedBy[j.key] = append(startedBy[j.key], j.id)
	}
	for _, k := range keys {
		if u := c.use(k); !u.within(c.ceil[k]) {
			c.add(InvariantQuota, startedBy[k], "project %s runs %s in pool %s, above its ceiling (%s), after starting job(s) %s",
				s.keys[k].project, u, s.keys[k].pool, c.ceilText[k], joinInts(startedBy[k]))
		}
	}
	// minimal, per reclaim: a project's reclaim victims must not exceed
	// the room left in its guarantee for its jobs at the reclaiming
	// priority (its lower-priority jobs count as borrowed).
	c.rankOK = false
	for _, k := range slices.Sorted(maps.Keys(c.reclaims)) {
		vs := c.reclaims[k]
		if !c.rankOK {
			c.computeUseRank()
		}
		room := c.guar[k].minus(c.useRank[k][c.minRank[k]])
		room = amount{max(room.gpus, 0), max(room.cpus, 0), max(room.mem, 0), math.Inf(1)}
		sum, big, largest := amount{}, vs[0], gangAmount(vs[0].res)
		for _, v := range vs {
			a := gangAmount(v.res)
			sum = sum.plus(a)
			if larger(a, largest) {
				big, largest = v, a
			}
		}
		if rest := sum.minus(largest); rest.covers(room) {
			c.add(InvariantMinimal, jobIDs(vs), "project %s reclaimed %d job(s) (%s) in pool %s with %s left in its guarantee for its %s jobs: without the largest (job %d) they free %s",
				s.keys[k].project, len(vs), joinIDs(vs), s.keys[k].pool, room, rankName(c.minRank[k]), big.id, rest)
		}
	}
	c.reclaims = nil
	c.rankOK = false
	// stability: the plan applied, the scheduler run again with nothing new
	// must preempt nothing.
	switch {
	case c.budget == 0 || (len(plan.Start) == 0 && len(plan.Preempt) == 0):
		// Nothing changed (the same snapshot gives the same plan), or
		// nothing can be preempted.
	case len(plan.Preempt) >= c.budget:
		c.rep.StabilitySkipped++
	default:
		again := scheduler.Schedule(s.snapshot(), s.cfg)
		if len(again.Preempt) > 0 {
			var ids []int64
			var what []string
			for i, pr := range again.Preempt {
				ids = append(ids, pr.JobID, pr.For)
				if i < 3 {
					what = append(what, fmt.Sprintf("job %d for job %d (%s)", pr.JobID, pr.For, pr.Message))
				}
			}
			if n := len(again.Preempt) - len(what); n > 0 {
				what = append(what, fmt.Sprintf("and %d more", n))
			}
			c.add(InvariantStability, ids, "the plan is not a fixed point: run again on the state it left, with no new events, the scheduler preempts %s",
				strings.Join(what, "; "))
		}
	}
}

// finish checks starvation at the end of the run.
func (c *checker) finish() {
	c.finishing = true
	s := c.s
	for _, j := range s.jobs {
		if j.unentitled || !j.firstStart.IsZero() || j.state != statePending {
			continue
		}
		if wait := s.now.Sub(j.submitted); wait > c.grace {
			c.add(InvariantStarvation, []int64{j.id}, "%s waited %s and never started, though its request plus its project's use at its priority or higher stayed within the guarantee (%s) for the whole wait",
				c.name(j), seconds(wait), c.guar[j.key])
		}
	}
}

// rankName is the priority class of a rank, with "or higher" when there is
// one.
func rankName(r int) string {
	ps := domain.Priorities()
	if r == len(ps)-1 {
		return string(ps[r])
	}
	return string(ps[r]) + "-or-higher"
}

func jobIDs(js []*job) []int64 {
	out := make([]int64, len(js))
	for i, j := range js {
		out[i] = j.id
	}
	return out
}

func joinIDs(js []*job) string { return joinInts(jobIDs(js)) }

func joinInts(ids []int64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = fmt.Sprint(id)
	}
	return strings.Join(parts, ", ")
}
