// Package cost prices attempt history: what each attempt's allocation cost
// at its pool's rates over the time it held it, summed into report lines.
// Time is priced at the rates in force while it was held (a Ledger): an
// attempt across a rate change costs each part at its own rates. It is
// pure: it takes the spans, the rates and the time as arguments and reads
// no clock, so the same history always gives the same report.
//
// Every attempt is priced exactly, in integer arithmetic, its parts at
// different rates summed exactly, and rounded once to a micro of currency
// (half away from zero); lines add these rounded amounts, so a report's
// lines always sum to its total.
package cost

import (
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
	"time"

	"trainyard/internal/domain"
)

// Groupings a report accepts, in the order help texts list them.
var Groupings = []string{"project", "pool", "user", "job", "day"}

// Span is one attempt that held resources, as the report needs it.
type Span struct {
	JobID     int64
	Attempt   int
	Project   string
	Pool      string
	User      string // the job's submitter
	JobName   string
	Resources domain.Resources
	Start     time.Time
	End       time.Time // zero: still running
	// State is how the attempt ended (or running); Waste reads it.
	State domain.AttemptState
	// Timeout is how long the attempt may run (the job's policy.timeout;
	// 0: unbounded): what a running attempt may still cost (Budget).
	Timeout time.Duration
}

// Waste reports whether the attempt's spend bought nothing that lasts
// (domain.AttemptState.Wasted).
func (s Span) Waste() bool { return s.State.Wasted() }

// Fixed-point scales of the exact computation.
const (
	microCores = 1_000_000 // CPUs are priced in millionths of a core
	gib        = 1 << 30
	nsPerHour  = int64(time.Hour)
)

// denominator turns (nodes × ns × weighted allocation) into micros:
// rates are in micros per hour, memory in bytes per GiB, CPUs in micro
// cores, so every term is scaled to the same common factor.
var denominator = new(big.Int).Mul(big.NewInt(nsPerHour), big.NewInt(microCores*gib))

// Of is what res costs at rates r for d: per node the GPUs, CPUs and GiB
// of memory at their hourly rates, times the nodes of a gang, times d,
// rounded once to a micro, half away from zero. CPUs are counted to a
// millionth of a core.
func Of(res domain.Resources, r domain.Rates, d time.Duration) domain.Money {
	var c calc
	return c.of(res, r, d)
}

// calc holds the scratch numbers of Of, so that a report prices its spans
// without allocating.
type calc struct{ acc, per, term, x, q, rem big.Int }

func (c *calc) of(res domain.Resources, r domain.Rates, d time.Duration) domain.Money {
	if n, ok := add128(u128{}, res, r, d); ok {
		if m, ok := roundDiv128(n); ok {
			return m
		}
	}
	return c.ofBig(res, r, d)
}

func (c *calc) ofBig(res domain.Resources, r domain.Rates, d time.Duration) domain.Money {
	c.acc.SetInt64(0)
	c.add(res, r, d)
	return c.roundDiv(&c.acc, denominator)
}

// price is what res cost on pool from from to to at the rates of l in
// force over that time: each part between rate changes exactly, their
// sum rounded once.
func (c *calc) price(res domain.Resources, l Ledger, pool string, from, to time.Time) domain.Money {
	if m, ok := price128(res, l, pool, from, to); ok {
		return m
	}
	return c.priceBig(res, l, pool, from, to)
}

func (c *calc) priceBig(res domain.Resources, l Ledger, pool string, from, to time.Time) domain.Money {
	c.acc.SetInt64(0)
	cs := l.pools[pool]
	for i := at(cs, from); i >= 0 && from.Before(to); i++ {
		end := to
		if i+1 < len(cs) && cs[i+1].from.Before(to) {
			end = cs[i+1].from
		}
		c.add(res, cs[i].rates, end.Sub(from))
		from = end
	}
	return c.roundDiv(&c.acc, denominator)
}

// add adds res at r for d to acc, exactly, scaled by denominator.
func (c *calc) add(res domain.Resources, r domain.Rates, d time.Duration) {
	if d <= 0 {
		return
	}
	// The per-node rate in micros per hour, scaled by microCores × gib.
	c.per.SetInt64(int64(res.GPUs))
	c.per.Mul(&c.per, c.x.SetInt64(int64(r.GPUHour)))
	c.per.Mul(&c.per, c.x.SetInt64(microCores*gib))
	c.term.SetInt64(cpuMicros(res.CPUs))
	c.term.Mul(&c.term, c.x.SetInt64(int64(r.CPUHour)))
	c.term.Mul(&c.term, c.x.SetInt64(gib))
	c.per.Add(&c.per, &c.term)
	c.term.SetInt64(int64(res.Memory))
	c.term.Mul(&c.term, c.x.SetInt64(int64(r.MemoryGiBHour)))
	c.term.Mul(&c.term, c.x.SetInt64(microCores))
	c.per.Add(&c.per, &c.term)
	c.per.Mul(&c.per, c.x.SetInt64(int64(max(res.Nodes, 1))))
	c.per.Mul(&c.per, c.x.SetInt64(int64(d)))
	c.acc.Add(&c.acc, &c.per)
}

// cpuMicros is cores in millionths, rounded: the spec's decimal ("0.5",
// "1.25") exactly, whatever float64 made of it.
func cpuMicros(cpus float64) int64 { return int64(math.Round(cpus * microCores)) }

// roundDiv is n/d rounded half away from zero, saturated to Money's range.
func (c *calc) roundDiv(n, d *big.Int) domain.Money {
	c.q.QuoRem(n, d, &c.rem)
	c.rem.Abs(&c.rem).Lsh(&c.rem, 1)
	if c.rem.Cmp(d) >= 0 {
		c.q.Add(&c.q, c.x.SetInt64(int64(n.Sign())))
	}
	if !c.q.IsInt64() {
		if c.q.Sign() < 0 {
			return domain.Money(math.MinInt64)
		}
		return domain.Money(math.MaxInt64)
	}
	return domain.Money(c.q.Int64())
}

// Line is the spend of one group.
type Line struct {
	Group    string
	GPUHours float64 // GPU-hours held, over all nodes
	CPUHours float64
	Cost     domain.Money
	Waste    domain.Money // the part of Cost spent on wasted attempts
	Attempts int
	// RunningPerHour is what the group's running attempts cost per hour
	// now: how fast Cost grows.
	RunningPerHour domain.Money
}

// Summary is spend over a window, by group, with its total.
type Summary struct {
	By    string
	Since time.Time
	Until time.Time
	Lines []Line // by Cost, highest first, then by Group
	Total Line
}

// CheckBy says whether by is a grouping Report accepts.
func CheckBy(by string) error {
	if slices.Contains(Groupings, by) {
		return nil
	}
	return fmt.Errorf("cannot group by %q; choose one of %s", by, strings.Join(Groupings, ", "))
}

// Report prices spans clipped to [since, now] at the rates of l in force
// while they ran (a pool without rates is free) and groups them by by
// (see Groupings; "day" is the UTC day the time fell on, so an attempt
// across midnight counts in both). A running attempt runs until now, and
// its running rate is the one in force now.
func Report(spans []Span, ledger Ledger, now, since time.Time, by string) Summary {
	rep := Summary{By: by, Since: since, Until: now}
	idx := map[string]int{}
	var c calc
	add := func(group string, s Span, from, to time.Time, running bool) {
		i, ok := idx[group]
		if !ok {
			i = len(rep.Lines)
			idx[group] = i
			rep.Lines = append(rep.Lines, Line{Group: group})
		}
		l := &rep.Lines[i]
		d := to.Sub(from)
		cost := c.price(s.Resources, ledger, s.Pool, from, to)
		nodes := float64(max(s.Resources.Nodes, 1))
		l.GPUHours += float64(s.Resources.GPUs) * nodes * d.Hours()
		l.CPUHours += s.Resources.CPUs * nodes * d.Hours()
		l.Cost += cost
		if s.Waste() {
			l.Waste += cost
		}
		l.Attempts++ // with by=day, once in each day the attempt ran
		if running {
			l.RunningPerHour += c.of(s.Resources, ledger.At(s.Pool, now), time.Hour)
		}
	}
	days := map[int64]string{}
	dayOf := func(t time.Time) string {
		y, m, d := t.UTC().Date()
		k := int64(y)*10000 + int64(m)*100 + int64(d)
		if name, ok := days[k]; ok {
			return name
		}
		name := t.UTC().Format(time.DateOnly)
		days[k] = name
		return name
	}
	for _, s := range spans {
		from, to, running, ok := window(s, now, since)
		if !ok {
			continue
		}
		rep.Total.Attempts++
		if by != "day" {
			add(groupOf(s, by), s, from, to, running)
			continue
		}
		// One piece per UTC day; the attempt counts in each day it ran.
		// Rounding is then once per attempt and day.
		for {
			y, m, d := from.UTC().Date()
			end := time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
			if to.Before(end) {
				end = to
			}
			if end.Before(to) {
				add(dayOf(from), s, from, end, false)
				from = end
				continue
			}
			add(dayOf(from), s, from, to, running)
			break
		}
	}
	rep.finish()
	return rep
}

// Spent is what spans cost, whole, until now at the rates of l in force
// while they ran, each rounded once: a job's cost so far from its
// attempts, as Report totals it, without grouping.
func Spent(spans []Span, l Ledger, now time.Time) domain.Money {
	var c calc
	var sum domain.Money
	for _, s := range spans {
		if from, to, _, ok := window(s, now, time.Time{}); ok {
			sum += c.price(s.Resources, l, s.Pool, from, to)
		}
	}
	return sum
}

// finish orders the lines (by day, or by cost, highest first, then by
// group) and sums them into the total.
func (rep *Summary) finish() {
	slices.SortFunc(rep.Lines, func(a, b Line) int {
		if rep.By == "day" {
			return strings.Compare(a.Group, b.Group)
		}
		if a.Cost != b.Cost {
			if a.Cost > b.Cost {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Group, b.Group)
	})
	rep.Total.Group = "total"
	for _, l := range rep.Lines {
		rep.Total.GPUHours += l.GPUHours
		rep.Total.CPUHours += l.CPUHours
		rep.Total.Cost += l.Cost
		rep.Total.Waste += l.Waste
		rep.Total.RunningPerHour += l.RunningPerHour
	}
}

// window is the part of s inside [since, now]; ok is false when none is.
// A running attempt that started by now is in the window even at zero
// length, for its running rate.
func window(s Span, now, since time.Time) (from, to time.Time, running, ok bool) {
	from, to, running = s.Start, s.End, s.End.IsZero()
	if running || to.After(now) {
		to = now
	}
	if from.Before(since) {
		from = since
	}
	if s.Start.IsZero() || from.After(to) || from.Equal(to) && !running {
		return from, to, running, false
	}
	return from, to, running, true
}

func groupOf(s Span, by string) string {
	switch by {
	case "pool":
		return s.Pool
	case "user":
		return s.User
	case "job":
		if s.JobName == "" {
			return fmt.Sprintf("%d", s.JobID)
		}
		return fmt.Sprintf("%d %s", s.JobID, s.JobName)
	}
	return s.Project
}

// Totals is what a database summed for Totals to price: the attempts of
// one group that held one shape of resources in one pool, their held time
// summed (store.SpendRow).
type Totals struct {
	Group     string
	Pool      string
	Resources domain.Resources
	Waste     bool
	Attempts  int
	Running   int
	Held      time.Duration
	// Pieces split Held at the window's rate changes (Ledger.Changes),
	// each priced at the rates in force from its From; none: Held is one
	// piece from the window's start.
	Pieces []Piece
}

// Piece is the part of a sum of held time from From to the next rate
// change (or the window's end).
type Piece struct {
	From time.Time
	Held time.Duration
}

// ReportTotals is Report over sums instead of spans (any grouping but
// "day", which splits attempts at midnight): each row's pieces are priced
// exactly at the rates of l in force over them, summed and rounded once,
// so a line is within half a micro per row of the sum Report makes of the
// same attempts. Running attempts add their hourly cost at the rates in
// force now to the line's RunningPerHour.
func ReportTotals(rows []Totals, ledger Ledger, now, since time.Time, by string) Summary {
	rep := Summary{By: by, Since: since, Until: now}
	idx := map[string]int{}
	var c calc
	for _, t := range rows {
		i, ok := idx[t.Group]
		if !ok {
			i = len(rep.Lines)
			idx[t.Group] = i
			rep.Lines = append(rep.Lines, Line{Group: t.Group})
		}
		l := &rep.Lines[i]
		pieces := t.Pieces
		if len(pieces) == 0 {
			pieces = []Piece{{From: since, Held: t.Held}}
		}
		c.acc.SetInt64(0)
		for _, p := range pieces {
			c.add(t.Resources, ledger.At(t.Pool, p.From), p.Held)
		}
		cost := c.roundDiv(&c.acc, denominator)
		nodes := float64(max(t.Resources.Nodes, 1))
		l.GPUHours += float64(t.Resources.GPUs) * nodes * t.Held.Hours()
		l.CPUHours += t.Resources.CPUs * nodes * t.Held.Hours()
		l.Cost += cost
		if t.Waste {
			l.Waste += cost
		}
		l.Attempts += t.Attempts
		rep.Total.Attempts += t.Attempts
		if t.Running > 0 {
			l.RunningPerHour += c.of(t.Resources, ledger.At(t.Pool, now), time.Hour) * domain.Money(t.Running)
		}
	}
	rep.finish()
	return rep
}
