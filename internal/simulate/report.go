package simulate

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"trainyard/internal/domain"
)

// Report is what one simulation did. Times are virtual; hours are in the
// pool's unit (GPU-hours in pools with GPUs, CPU-hours otherwise).
type Report struct {
	Seed      int64           `json:"seed"`
	Simulated domain.Duration `json:"simulated"` // virtual time covered
	// Makespan is when the last job ended, when every job ended within the
	// simulated time (Drained); otherwise the simulated time.
	Makespan    domain.Duration `json:"makespan"`
	Drained     bool            `json:"drained"`
	Passes      int             `json:"passes"` // scheduling passes run
	Submitted   int             `json:"submitted"`
	Succeeded   int             `json:"succeeded"`
	Failed      int             `json:"failed"`  // ran past their timeout
	Queued      int             `json:"queued"`  // still queued at the end
	Running     int             `json:"running"` // still running (or stopping) at the end
	Preemptions int             `json:"preemptions"`
	Pools       []PoolReport    `json:"pools"`
	Projects    []ProjectReport `json:"projects"` // per project and pool
	Streams     []StreamReport  `json:"streams"`
	// Check is what the invariant checks found (sim --check); absent
	// without them.
	Check *CheckReport `json:"check,omitempty"`
}

// PoolReport is one pool's utilisation.
type PoolReport struct {
	Pool string `json:"pool"`
	// Unit is "GPU" when the pool has GPUs, else "CPU".
	Unit     string  `json:"unit"`
	Capacity float64 `json:"capacity"` // GPUs or CPUs
	// CapacityHours is Capacity times the simulated time; AllocatedHours
	// sums what jobs held (including work later lost to preemption and the
	// stop delay).
	CapacityHours  float64 `json:"capacity_hours"`
	AllocatedHours float64 `json:"allocated_hours"`
	Utilisation    float64 `json:"utilisation"` // AllocatedHours / CapacityHours, 0..1
}

// ProjectReport is one project's outcome in one pool.
type ProjectReport struct {
	Project string  `json:"project"`
	Pool    string  `json:"pool"`
	Shares  float64 `json:"shares"`
	JobStats
	// UsedHours is what the project's jobs held, in the pool's unit.
	UsedHours float64 `json:"used_hours"`
	// LostHours is the part of UsedHours whose work preemption threw away
	// (time since the victim's last checkpoint).
	LostHours float64 `json:"lost_hours"`
	// Share is UsedHours over the pool's AllocatedHours; Target is Shares
	// over the sum of the shares of every project that submitted to the
	// pool. Both 0..1.
	Share  float64 `json:"share"`
	Target float64 `json:"target"`
	// FairShareDeviation is Share minus Target in percentage points
	// (+5.2: the project got 5.2 points more of the pool than its target).
	FairShareDeviation float64 `json:"fair_share_deviation"`
}

// StreamReport is one job stream's outcome.
type StreamReport struct {
	Stream  string `json:"stream"`
	Project string `json:"project"`
	Pool    string `json:"pool"`
	JobStats
}

// JobStats counts jobs and their waits. A job's wait is the time from its
// submission to its first start; jobs that never started are not in the
// percentiles (see NeverStarted).
type JobStats struct {
	Submitted    int             `json:"submitted"`
	Started      int             `json:"started"`
	Succeeded    int             `json:"succeeded"`
	Failed       int             `json:"failed"`
	NeverStarted int             `json:"never_started"`
	Preemptions  int             `json:"preemptions"` // times its jobs were preempted
	WaitP50      domain.Duration `json:"wait_p50"`
	WaitP90      domain.Duration `json:"wait_p90"`
	WaitP99      domain.Duration `json:"wait_p99"`
	WaitMax      domain.Duration `json:"wait_max"`
	// LongestWait is the longest time a job waited for its first start,
	// counting jobs that never started (until the end): starvation shows
	// here, not in the percentiles.
	LongestWait domain.Duration `json:"longest_wait"`
	// WaitHours sums, per reason the scheduler gave (QuotaExceeded,
	// WaitingForResources, ...), the hours its jobs spent queued for it.
	WaitHours map[domain.Reason]float64 `json:"wait_hours_by_reason,omitempty"`
}

// TopWaitReason is the reason the jobs waited longest for, or "-".
func (st JobStats) TopWaitReason() string {
	best, bestH := "-", 0.0
	for r, h := range st.WaitHours {
		if h > bestH || (h == bestH && h > 0 && string(r) < best) {
			best, bestH = string(r), h
		}
	}
	return best
}

// report builds the Report from the finished simulation.
func (s *sim) report() *Report {
	span := s.now.Sub(Epoch)
	r := &Report{
		Seed:        s.w.Seed,
		Simulated:   domain.Duration(span.Round(time.Second)),
		Makespan:    domain.Duration(span.Round(time.Second)),
		Drained:     s.drained,
		Passes:      s.passes,
		Submitted:   len(s.jobs),
		Preemptions: s.preemptions,
	}
	if s.drained {
		r.Makespan = domain.Duration(s.lastEnd.Sub(Epoch).Round(time.Second))
	}

	// units: how much of its pool's unit a job holds.
	hasGPU := make([]bool, len(s.pools))
	for i, p := range s.pools {
		hasGPU[i] = p.Capacity().GPUs > 0
	}
	units := func(j *job) float64 {
		n := float64(max(j.res.Nodes, 1))
		if hasGPU[s.poolIdx[s.streams[j.stream].spec.Pool]] {
			return float64(j.res.GPUs) * n
		}
		return j.res.CPUs * n
	}

	type key struct{ project, pool string }
	used := map[key]float64{}
	lost := map[key]float64{}
	poolUsed := make([]float64, len(s.pools))
	for i, rec := range s.records { // in start order: sums are reproducible
		end := rec.End
		if end.IsZero() {
			end = s.now
		}
		h := units(s.recJobs[i]) * end.Sub(rec.Start).Hours()
		used[key{rec.Project, rec.Pool}] += h
		poolUsed[s.poolIdx[rec.Pool]] += h
	}
	for _, j := range s.jobs {
		spec := s.streams[j.stream].spec
		lost[key{spec.Project, spec.Pool}] += units(j) * j.lost.Hours()
		switch j.state {
		case stateSucceeded:
			r.Succeeded++
		case stateFailed:
			r.Failed++
		case statePending:
			r.Queued++
		default:
			r.Running++
		}
	}

	for i, p := range s.pools {
		c := p.Capacity()
		pr := PoolReport{Pool: p.Name, Unit: "GPU", Capacity: float64(c.GPUs)}
		if !hasGPU[i] {
			pr.Unit, pr.Capacity = "CPU", c.CPUs
		}
		pr.CapacityHours = pr.Capacity * span.Hours()
		pr.AllocatedHours = poolUsed[i]
		if pr.CapacityHours > 0 {
			pr.Utilisation = pr.AllocatedHours / pr.CapacityHours
		}
		pr.CapacityHours, pr.AllocatedHours, pr.Utilisation = round(pr.CapacityHours, 3), round(pr.AllocatedHours, 3), round(pr.Utilisation, 4)
		r.Pools = append(r.Pools, pr)
	}

	shares := map[string]float64{}
	for _, p := range s.projects {
		shares[p.Name] = p.Shares
	}
	shareOf := func(project string) float64 {
		if v, ok := shares[project]; ok && v > 0 {
			return v
		}
		return 1 // the scheduler's default for a project without shares
	}

	// Group jobs by (project, pool) and by stream.
	byKey := map[key][]*job{}
	var keys []key
	byStream := make([][]*job, len(s.streams))
	for _, j := range s.jobs {
		spec := s.streams[j.stream].spec
		k := key{spec.Project, spec.Pool}
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], j)
		byStream[j.stream] = append(byStream[j.stream], j)
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(s.poolIdx[a.pool], s.poolIdx[b.pool]), cmp.Compare(a.project, b.project))
	})
	demandShares := map[string]float64{}
	for _, k := range keys {
		demandShares[k.pool] += shareOf(k.project)
	}
	for _, k := range keys {
		pr := ProjectReport{Project: k.project, Pool: k.pool, Shares: shareOf(k.project), JobStats: s.stats(byKey[k], span)}
		pr.UsedHours = round(used[k], 3)
		pr.LostHours = round(lost[k], 3)
		if pu := poolUsed[s.poolIdx[k.pool]]; pu > 0 {
			pr.Share = round(used[k]/pu, 4)
		}
		pr.Target = round(pr.Shares/demandShares[k.pool], 4)
		pr.FairShareDeviation = round(100*(pr.Share-pr.Target), 2)
		r.Projects = append(r.Projects, pr)
	}
	for i, st := range s.streams {
		r.Streams = append(r.Streams, StreamReport{Stream: st.spec.Name, Project: st.spec.Project, Pool: st.spec.Pool, JobStats: s.stats(byStream[i], span)})
	}
	if s.chk != nil {
		r.Check = &s.chk.rep
	}
	return r
}

// stats summarises a group of jobs.
func (s *sim) stats(js []*job, span time.Duration) JobStats {
	var st JobStats
	var waits []time.Duration
	var longest time.Duration
	for _, j := range js {
		st.Submitted++
		st.Preemptions += j.preemptions
		switch j.state {
		case stateSucceeded:
			st.Succeeded++
		case stateFailed:
			st.Failed++
		}
		for r, d := range j.waited {
			if st.WaitHours == nil {
				st.WaitHours = map[domain.Reason]float64{}
			}
			st.WaitHours[r] += d.Hours()
		}
		if j.state == statePending && j.reason != "" {
			if st.WaitHours == nil {
				st.WaitHours = map[domain.Reason]float64{}
			}
			st.WaitHours[j.reason] += s.now.Sub(j.reasonSince).Hours()
		}
		if j.firstStart.IsZero() {
			st.NeverStarted++
			longest = max(longest, s.now.Sub(j.submitted))
			continue
		}
		st.Started++
		waits = append(waits, j.firstStart.Sub(j.submitted))
		longest = max(longest, j.firstStart.Sub(j.submitted))
	}
	st.LongestWait = domain.Duration(longest.Round(time.Second))
	for r, h := range st.WaitHours {
		st.WaitHours[r] = round(h, 3)
	}
	slices.Sort(waits)
	st.WaitP50 = percentile(waits, 50)
	st.WaitP90 = percentile(waits, 90)
	st.WaitP99 = percentile(waits, 99)
	if len(waits) > 0 {
		st.WaitMax = domain.Duration(waits[len(waits)-1].Round(time.Second))
	}
	return st
}

// percentile is the nearest-rank percentile of sorted waits, to the second.
func percentile(sorted []time.Duration, p float64) domain.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	i = min(max(i, 0), len(sorted)-1)
	return domain.Duration(sorted[i].Round(time.Second))
}

func round(v float64, digits int) float64 {
	m := math.Pow(10, float64(digits))
	return math.Round(v*m) / m
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteText writes the report as a summary and tables for a person.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Simulated %s of virtual time (seed %d, %d scheduling passes).\n", r.Simulated, r.Seed, r.Passes)
	fmt.Fprintf(&b, "Jobs: %d submitted, %d succeeded, %d failed (timeout), %d preemptions; at the end %d queued, %d running.\n",
		r.Submitted, r.Succeeded, r.Failed, r.Preemptions, r.Queued, r.Running)
	if r.Drained {
		fmt.Fprintf(&b, "Makespan: %s (every job ended).\n", r.Makespan)
	} else {
		fmt.Fprintf(&b, "Makespan: over %s (work remained at the end).\n", r.Makespan)
	}

	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tUNIT\tCAPACITY\tCAPACITY-H\tALLOCATED-H\tUTILISATION")
	for _, p := range r.Pools {
		fmt.Fprintf(tw, "%s\t%s\t%g\t%.1f\t%.1f\t%.1f%%\n", p.Pool, p.Unit, p.Capacity, p.CapacityHours, p.AllocatedHours, 100*p.Utilisation)
	}
	tw.Flush()

	b.WriteString("\n")
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PROJECT\tPOOL\tSHARES\tSUBMITTED\tSUCCEEDED\tFAILED\tNEVER-STARTED\tUSED-H\tSHARE\tTARGET\tDEVIATION\tWAIT-P50\tWAIT-P90\tWAIT-P99\tLONGEST-WAIT\tMOSTLY-WAITED-FOR\tPREEMPTED")
	for _, p := range r.Projects {
		fmt.Fprintf(tw, "%s\t%s\t%g\t%d\t%d\t%d\t%d\t%.1f\t%.1f%%\t%.1f%%\t%+.1fpp\t%s\t%s\t%s\t%s\t%s\t%d\n",
			p.Project, p.Pool, p.Shares, p.Submitted, p.Succeeded, p.Failed, p.NeverStarted,
			p.UsedHours, 100*p.Share, 100*p.Target, p.FairShareDeviation, p.WaitP50, p.WaitP90, p.WaitP99, p.LongestWait, p.TopWaitReason(), p.Preemptions)
	}
	tw.Flush()

	if len(r.Streams) > 1 {
		b.WriteString("\n")
		tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "STREAM\tPROJECT\tPOOL\tSUBMITTED\tSUCCEEDED\tFAILED\tNEVER-STARTED\tWAIT-P50\tWAIT-P90\tWAIT-P99\tWAIT-MAX\tPREEMPTED")
		for _, s := range r.Streams {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%d\n",
				s.Stream, s.Project, s.Pool, s.Submitted, s.Succeeded, s.Failed, s.NeverStarted,
				s.WaitP50, s.WaitP90, s.WaitP99, s.WaitMax, s.Preemptions)
		}
		tw.Flush()
	}
	if r.Check != nil {
		b.WriteString("\n")
		r.Check.writeText(&b)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// shownViolations is how many violations per invariant the text lists.
const shownViolations = 10

// writeText writes the check summary and the first violations of each
// invariant.
func (c *CheckReport) writeText(b *strings.Builder) {
	n := c.Violated()
	if n == 0 {
		fmt.Fprintf(b, "Checks: every invariant held in all %d passes.\n", c.Passes)
	} else {
		fmt.Fprintf(b, "Checks: %d violation(s) in %d passes.\n", n, c.Passes)
	}
	p := c.Preemptions
	fmt.Fprintf(b, "Preemptions: %d (%d for priority, %d reclaim, %d within a project); %d repeated for the same beneficiary.\n",
		p.Total, p.Priority, p.Reclaim, p.Own, p.Repeated)
	if c.StabilitySkipped > 0 {
		fmt.Fprintf(b, "Stability not checked after %d pass(es) that used the whole preemption budget.\n", c.StabilitySkipped)
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "INVARIANT\tVIOLATIONS")
	for _, inv := range Invariants() {
		fmt.Fprintf(tw, "%s\t%d\n", inv, c.Counts[inv])
	}
	tw.Flush()
	if n == 0 {
		return
	}
	b.WriteString("\n")
	for _, inv := range Invariants() {
		shown := 0
		for _, v := range c.Violations {
			if v.Invariant == inv && shown < shownViolations {
				fmt.Fprintf(b, "%s\n", v)
				shown++
			}
		}
		if more := c.Counts[inv] - shown; more > 0 {
			fmt.Fprintf(b, "... and %d more %s violation(s); -o json lists up to %d per invariant\n", more, inv, maxKeptViolations)
		}
	}
}
