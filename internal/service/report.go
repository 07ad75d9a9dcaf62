package service

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"trainyard/internal/authz"
	"trainyard/internal/cost"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// DefaultReviewWindow is how far back a review report looks when the
// caller names no start.
const DefaultReviewWindow = 7 * 24 * time.Hour

// Right-sizing in review reports: a job is named as oversized when it used
// under ReviewUnder of the CPUs it held, and as near its memory limit when
// it peaked at ReviewNear of it or more; ReviewListLen of each.
const (
	ReviewUnder   = rightSizeFraction
	ReviewNear    = 0.9
	ReviewListLen = 20
)

// ReviewGroupings are the values ReviewQuery.By accepts.
var ReviewGroupings = []string{"project", "pool"}

// ReviewQuery selects a review report.
type ReviewQuery struct {
	Project string // "": every project the caller may read
	// Since starts the window; zero: Window before its end, or the
	// default. Until ends it; zero (or later than now): now.
	Since, Until time.Time
	Window       time.Duration
	By           string // "project" (default) or "pool"
}

// Review is what happened over a window, by group: how long jobs waited,
// how their attempts ended, what they held against what they used and
// against the pools' capacity, and what it cost against budget.
type Review struct {
	By           string
	Since, Until time.Time
	Lines        []ReviewLine // by group name
	// Total sums the lines; its Queue is empty (percentiles do not add).
	Total ReviewLine
	// Oversized are the jobs that used under Under of the CPUs they held,
	// most idle CPU time first; NearMemory those that peaked at Near of
	// their memory limit or more.
	Oversized, NearMemory []ReviewJob
	Under, Near           float64
}

// ReviewLine is one group's figures (see store.ReportRow for the counts).
type ReviewLine struct {
	store.ReportRow
	// Failed counts the attempts that ended failed, timed out or lost.
	Failed int
	// GPUHours and CPUHours are what the group's attempts held in the
	// window (cost.Line); GPUHoursUsed and CPUHoursUsed what those that
	// ended used (GPU-hours weighted by utilisation).
	GPUHours, CPUHours, GPUHoursUsed, CPUHoursUsed float64
	// CapacityGPUHours and CapacityCPUHours are the pool's capacity over
	// the window (by pool, and their sum in the total; 0 by project).
	CapacityGPUHours, CapacityCPUHours float64
	Cost, Waste                        domain.Money
	// Storage is what the group's stored outputs and checkpoints cost over
	// the window's whole UTC days (StorageReport).
	Storage domain.Money
	// Budget is the project's budget and its use in its current period
	// (by project, for projects with one in force).
	Budget *BudgetStatus
}

// FailureRate is the share of ended attempts that failed, timed out or
// were lost (0 when none ended).
func (l ReviewLine) FailureRate() float64 {
	if l.Ended == 0 {
		return 0
	}
	return float64(l.Failed) / float64(l.Ended)
}

// ReviewJob is a job named by right-sizing, with what its idle CPUs cost.
type ReviewJob struct {
	store.SizedJob
	// UsedCPUs is the CPU time used per second held; IdleCost what the
	// CPUs it held and did not use cost at its pool's rates.
	UsedCPUs float64
	IdleCost domain.Money
}

// Review reports the window of q over the projects p may read (or
// q.Project). The database sums the history (store.ReportTotals and the
// spend of CostService.Report, run at once); nothing is read per attempt.
func (s *CostService) Review(ctx context.Context, p Principal, q ReviewQuery) (Review, error) {
	until := s.cfg.Clock.Now()
	if !q.Until.IsZero() && q.Until.Before(until) {
		until = q.Until
	}
	if q.By == "" {
		q.By = "project"
	}
	var errs domain.FieldErrors
	if !slices.Contains(ReviewGroupings, q.By) {
		errs.Add("by", "cannot group a review by %q; choose project or pool", q.By)
	}
	since := windowStart(&errs, q.Since, q.Window, until, DefaultReviewWindow)
	if err := errs.Err(); err != nil {
		return Review{}, err
	}
	// The history is read by whole hours: the window starts on the hour,
	// and a past end moves to the end of its hour.
	since = store.ReportSince(since)
	if end := store.ReportHoursEnd(until); end.Before(s.cfg.Clock.Now()) {
		until = end
	}
	if err := s.authorize(ctx, p, authz.CostRead, authz.Resource{Kind: "cost", Project: q.Project}); err != nil {
		return Review{}, err
	}
	vis := authz.VisibleCost(p)
	sq := store.SpendQuery{Since: since, Until: until, By: q.By, AllProjects: vis.All, Projects: vis.Projects}
	if q.Project != "" {
		sq.AllProjects, sq.Projects = false, nil
		if vis.Sees(q.Project, "") {
			sq.Projects = []string{q.Project}
		}
	}

	// One read of the window's history gives the counts, the spend sums
	// (as trainyard cost's) and the right-sizing lists.
	totals, err := s.st.ReportTotals(ctx, store.ReportQuery{SpendQuery: sq, Under: ReviewUnder, Near: ReviewNear, Limit: ReviewListLen,
		MinRun: s.cfg.RightSizeMinRun, MinCPUs: rightSizeMinCPUs})
	if err != nil {
		return Review{}, fmt.Errorf("sum the report's history: %w", err)
	}
	pools, err := s.st.ListPools(ctx)
	if err != nil {
		return Review{}, fmt.Errorf("read pools: %w", err)
	}
	ledger, err := store.Ledger(ctx, s.st)
	if err != nil {
		return Review{}, err
	}
	// Spend as trainyard cost prices it: the sums of the same read, unless
	// rates changed in the window, when the time must be split at the
	// changes (a second read, which the common case does without).
	var spend CostReport
	if len(ledger.Changes(since, until)) == 0 {
		rows := make([]cost.Totals, len(totals.Spend))
		for i, r := range totals.Spend {
			rows[i] = cost.Totals{Group: r.Group, Pool: r.Pool, Resources: r.Resources, Waste: r.Waste,
				Attempts: r.Attempts, Running: r.Running, Held: r.Held}
		}
		spend = cost.ReportTotals(rows, ledger, until, since, q.By)
	} else if spend, err = s.reportTotals(ctx, CostQuery{Project: q.Project, By: q.By}, vis, ledger, since, until); err != nil {
		return Review{}, err
	}

	rep := Review{By: q.By, Since: since, Until: until, Under: ReviewUnder, Near: ReviewNear}
	lines := map[string]*ReviewLine{}
	line := func(group string) *ReviewLine {
		l, ok := lines[group]
		if !ok {
			l = &ReviewLine{ReportRow: store.ReportRow{Group: group}}
			lines[group] = l
		}
		return l
	}
	for _, r := range totals.Rows {
		l := line(r.Group)
		l.ReportRow = r
		for _, f := range r.Failures {
			if f.State != domain.AttemptPreempted && f.State != domain.AttemptCanceled {
				l.Failed += f.N
			}
		}
		l.CPUHoursUsed, l.GPUHoursUsed = r.CPUUsed.Hours(), r.GPUUsed.Hours()
	}
	for _, c := range spend.Lines {
		l := line(c.Group)
		l.GPUHours, l.CPUHours, l.Cost, l.Waste = c.GPUHours, c.CPUHours, c.Cost, c.Waste
	}
	stored, err := s.storage(ctx, vis, q.Project, since, until, q.By)
	if err != nil {
		return Review{}, err
	}
	for _, sl := range stored.Lines {
		line(sl.Group).Storage = sl.Cost
	}
	span := until.Sub(since).Hours()
	rates := make(map[string]domain.Rates, len(pools))
	for _, pl := range pools {
		rates[pl.Name] = ledger.At(pl.Name, until)
		if q.By != "pool" {
			continue
		}
		l, ok := lines[pl.Name]
		if !ok {
			continue // a pool nothing visible ran in
		}
		c := pl.Capacity()
		l.CapacityGPUHours, l.CapacityCPUHours = float64(c.GPUs)*span, c.CPUs*span
	}
	if q.By == "project" && len(lines) > 0 {
		budgets, err := s.Budgets(ctx, p, q.Project)
		if err != nil {
			return Review{}, err
		}
		for i := range budgets {
			if l, ok := lines[budgets[i].Budget.Project]; ok && budgets[i].InForce {
				l.Budget = &budgets[i]
			}
		}
	}

	for _, name := range slices.Sorted(maps.Keys(lines)) {
		l := *lines[name]
		rep.Lines = append(rep.Lines, l)
		t := &rep.Total
		t.Submitted += l.Submitted
		t.Started += l.Started
		t.Retries += l.Retries
		t.Ended += l.Ended
		t.Succeeded += l.Succeeded
		t.Preempted += l.Preempted
		t.Failed += l.Failed
		t.CPUUsed += l.CPUUsed
		t.GPUUsed += l.GPUUsed
		t.GPUHoursUsed += l.GPUHoursUsed
		t.GPUHours += l.GPUHours
		t.CPUHours += l.CPUHours
		t.CPUHoursUsed += l.CPUHoursUsed
		t.CapacityGPUHours += l.CapacityGPUHours
		t.CapacityCPUHours += l.CapacityCPUHours
		t.Cost += l.Cost
		t.Waste += l.Waste
		t.Storage += l.Storage
		t.Failures = addFailures(t.Failures, l.Failures)
	}
	rep.Total.Group = "total"
	rep.Oversized = reviewJobs(totals.Oversized, rates)
	rep.NearMemory = reviewJobs(totals.NearMemory, rates)
	return rep, nil
}

// addFailures merges counts into sum, most first then by state and reason.
func addFailures(sum, counts []store.ReasonCount) []store.ReasonCount {
	for _, c := range counts {
		i := slices.IndexFunc(sum, func(s store.ReasonCount) bool { return s.State == c.State && s.Reason == c.Reason })
		if i < 0 {
			sum = append(sum, c)
			continue
		}
		sum[i].N += c.N
	}
	slices.SortStableFunc(sum, func(a, b store.ReasonCount) int {
		if a.N != b.N {
			return b.N - a.N
		}
		if a.State != b.State {
			return cmp.Compare(string(a.State), string(b.State))
		}
		return cmp.Compare(string(a.Reason), string(b.Reason))
	})
	return sum
}

// reviewJobs prices what each job's unused CPUs cost over the time it held
// them.
func reviewJobs(js []store.SizedJob, rates map[string]domain.Rates) []ReviewJob {
	out := make([]ReviewJob, len(js))
	for i, j := range js {
		out[i].SizedJob = j
		if j.Held <= 0 {
			continue
		}
		nodes := max(j.Resources.Nodes, 1)
		used := j.CPUUsed.Seconds() / j.Held.Seconds()
		out[i].UsedCPUs = used
		idle := j.Resources.CPUs*float64(nodes) - used
		if idle > 0 {
			out[i].IdleCost = cost.Of(domain.Resources{CPUs: idle, Nodes: 1}, rates[j.Pool], j.Held)
		}
	}
	return out
}

// Summary is the review in one paragraph, as the weekly report sends it:
// the totals, the slowest queue, each budget's use, the waste and the jobs
// named by right-sizing, and the command that shows the whole report.
func (r Review) Summary(currency string) string {
	t := r.Total
	var b strings.Builder
	money := func(m domain.Money) string {
		if currency == "" {
			return m.Cents()
		}
		return m.Cents() + " " + currency
	}
	fmt.Fprintf(&b, "Review of %s – %s UTC: %d jobs submitted; %d attempts started (%d retries), %d ended: %d failed (%.0f%%), %d preempted",
		r.Since.UTC().Format("2006-01-02 15:04"), r.Until.UTC().Format("2006-01-02 15:04"), t.Submitted, t.Started, t.Retries,
		t.Ended, t.Failed, 100*t.FailureRate(), t.Preempted)
	var slow *ReviewLine
	for i := range r.Lines {
		if l := &r.Lines[i]; l.Queue.N > 0 && (slow == nil || l.Queue.P90 > slow.Queue.P90) {
			slow = l
		}
	}
	if slow != nil {
		fmt.Fprintf(&b, "; longest queue: %s %s at p90", r.By, slow.Group)
		fmt.Fprintf(&b, " (%s)", slow.Queue.P90.Round(time.Second))
	}
	fmt.Fprintf(&b, ". Held %.1f GPU-h and %.1f CPU-h", t.GPUHours, t.CPUHours)
	var used []string
	if t.GPUHours > 0 {
		used = append(used, fmt.Sprintf("%.0f%% of the GPU time", 100*t.GPUHoursUsed/t.GPUHours))
	}
	if t.CPUHours > 0 {
		used = append(used, fmt.Sprintf("%.0f%% of the CPU time", 100*t.CPUHoursUsed/t.CPUHours))
	}
	if len(used) > 0 {
		fmt.Fprintf(&b, ", %s used", strings.Join(used, " and "))
	}
	fmt.Fprintf(&b, ". Cost %s, of it waste %s", money(t.Cost), money(t.Waste))
	if t.Storage > 0 {
		fmt.Fprintf(&b, "; storage %s", money(t.Storage))
	}
	b.WriteString(".")
	for _, l := range r.Lines {
		if l.Budget != nil {
			fmt.Fprintf(&b, " %s: %s of its %s budget (%s).", l.Group, money(l.Budget.Use.Spent), money(l.Budget.Budget.Amount), l.Budget.Use.Period)
		}
	}
	if n := len(r.Oversized); n > 0 {
		var idle domain.Money
		for _, j := range r.Oversized {
			idle += j.IdleCost
		}
		top := r.Oversized[0]
		fmt.Fprintf(&b, " %d jobs used under %.0f%% of the CPUs they held (idle CPUs cost %s), the most job %d (%s, %s).",
			n, 100*r.Under, money(idle), top.JobID, top.Name, top.Submitter)
	}
	if n := len(r.NearMemory); n > 0 {
		fmt.Fprintf(&b, " %d jobs peaked at %.0f%% or more of their memory limit.", n, 100*r.Near)
	}
	fmt.Fprintf(&b, " Details: trainyard report --by %s --since %s", r.By, r.Since.UTC().Format(time.RFC3339))
	return b.String()
}
