package cost

import (
	"fmt"
	"testing"
	"time"

	"trainyard/internal/domain"
)

func money(t testing.TB, s string) domain.Money {
	t.Helper()
	m, err := domain.ParseMoney(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestOf prices single allocations; each case's figure is worked out by hand.
func TestOf(t *testing.T) {
	const GiB = domain.ByteSize(1 << 30)
	rates := domain.Rates{GPUHour: money(t, "2.10"), CPUHour: money(t, "0.04"), MemoryGiBHour: money(t, "0.005")}
	for _, c := range []struct {
		name string
		res  domain.Resources
		r    domain.Rates
		d    time.Duration
		want string
	}{
		// 2 GPUs × 2.10/GPU-h × 1.5 h = 6.30
		{"gpus", domain.Resources{GPUs: 2, Nodes: 1}, rates, 90 * time.Minute, "6.30"},
		// 0.5 cores × 0.04/core-h × 3 h = 0.06
		{"fractional cpus", domain.Resources{CPUs: 0.5}, rates, 3 * time.Hour, "0.06"},
		// 16 GiB × 0.005/GiB-h × 2 h = 0.16
		{"memory", domain.Resources{Memory: 16 * GiB}, rates, 2 * time.Hour, "0.16"},
		// 512 MiB = 0.5 GiB × 0.005 × 1 h = 0.0025
		{"part of a GiB", domain.Resources{Memory: GiB / 2}, rates, time.Hour, "0.0025"},
		// a gang: 4 GPUs per node × 2 nodes × 2.10 × 0.5 h = 8.40
		{"per node", domain.Resources{GPUs: 4, Nodes: 2}, rates, 30 * time.Minute, "8.40"},
		// all at once: 2×2.10 + 8×0.04 + 64×0.005 = 4.20 + 0.32 + 0.32 = 4.84/h, × 10 h = 48.40
		{"everything", domain.Resources{GPUs: 2, CPUs: 8, Memory: 64 * GiB, Nodes: 1}, rates, 10 * time.Hour, "48.40"},
		// 1 core × 0.000001/h × 0.5 h = 0.0000005: half a micro rounds up
		{"half a micro rounds away from zero", domain.Resources{CPUs: 1}, domain.Rates{CPUHour: 1}, 30 * time.Minute, "0.000001"},
		// just under half a micro rounds down
		{"under half a micro", domain.Resources{CPUs: 1}, domain.Rates{CPUHour: 1}, 30*time.Minute - time.Nanosecond, "0.00"},
		// 0.1 cores × 1.00 × 1 h = 0.10 exactly, though 0.1 is no float64
		{"decimal cores", domain.Resources{CPUs: 0.1}, domain.Rates{CPUHour: domain.MoneyUnit}, time.Hour, "0.10"},
		{"free pool", domain.Resources{GPUs: 8}, domain.Rates{}, time.Hour, "0.00"},
		{"no time", domain.Resources{GPUs: 8}, rates, 0, "0.00"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Of(c.res, c.r, c.d); got != money(t, c.want) {
				t.Errorf("Of(%+v, %v) = %s, want %s", c.res, c.d, got, c.want)
			}
		})
	}
}

// TestOfLarge: a year of a thousand 8-GPU nodes at 1000.00/GPU-h, beyond
// int64 in the intermediate product, still comes out exact:
// 8 × 1000 nodes × 1000.00 × 8760 h = 70,080,000,000.00.
func TestOfLarge(t *testing.T) {
	got := Of(domain.Resources{GPUs: 8, Nodes: 1000}, domain.Rates{GPUHour: money(t, "1000")}, 8760*time.Hour)
	if got != money(t, "70080000000") {
		t.Errorf("= %s", got)
	}
}

var (
	t0    = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	hours = func(h float64) time.Time { return t0.Add(time.Duration(h * float64(time.Hour))) }
)

func TestReport(t *testing.T) {
	rates := map[string]domain.Rates{
		"gpu": {GPUHour: money(t, "2.10"), CPUHour: money(t, "0.04")},
		"cpu": {CPUHour: money(t, "0.05")},
	}
	spans := []Span{
		// 2 GPUs × 2.10 × 1.5 h = 6.30 (and 4 cores × 0.04 × 1.5 h = 0.24): 6.54
		{JobID: 1, Attempt: 1, Project: "vision", Pool: "gpu", User: "alice", JobName: "train",
			Resources: domain.Resources{GPUs: 2, CPUs: 4, Nodes: 1}, Start: hours(1), End: hours(2.5), State: domain.AttemptSucceeded},
		// preempted: 1 GPU × 2.10 × 2 h = 4.20, all waste
		{JobID: 2, Attempt: 1, Project: "vision", Pool: "gpu", User: "bob", JobName: "sweep",
			Resources: domain.Resources{GPUs: 1}, Start: hours(2), End: hours(4), State: domain.AttemptPreempted},
		// its retry, running since hour 4; now is hour 10: 1 × 2.10 × 6 h = 12.60, 2.10/h now
		{JobID: 2, Attempt: 2, Project: "vision", Pool: "gpu", User: "bob", JobName: "sweep",
			Resources: domain.Resources{GPUs: 1}, Start: hours(4), State: domain.AttemptRunning},
		// failed on the CPU pool: 10 cores × 0.05 × 3 h = 1.50, waste
		{JobID: 3, Attempt: 1, Project: "nlp", Pool: "cpu", User: "carol", JobName: "prep",
			Resources: domain.Resources{CPUs: 10}, Start: hours(5), End: hours(8), State: domain.AttemptFailed},
		// a pool without rates is free, but its hours count
		{JobID: 4, Attempt: 1, Project: "nlp", Pool: "free", User: "carol", JobName: "eval",
			Resources: domain.Resources{GPUs: 1}, Start: hours(5), End: hours(6), State: domain.AttemptSucceeded},
		// ended before the window: left out
		{JobID: 5, Attempt: 1, Project: "nlp", Pool: "gpu", User: "carol",
			Resources: domain.Resources{GPUs: 1}, Start: t0.Add(-3 * time.Hour), End: t0.Add(-time.Hour), State: domain.AttemptSucceeded},
	}
	now := hours(10)
	rep := Report(spans, Flat(rates), now, t0, "project")
	want := []Line{
		{Group: "vision", GPUHours: 3 + 2 + 6, CPUHours: 6, Cost: money(t, "23.34"), Waste: money(t, "4.20"), Attempts: 3, RunningPerHour: money(t, "2.10")},
		{Group: "nlp", GPUHours: 1, CPUHours: 30, Cost: money(t, "1.50"), Waste: money(t, "1.50"), Attempts: 2},
	}
	if fmt.Sprint(rep.Lines) != fmt.Sprint(want) {
		t.Errorf("by project:\n got %+v\nwant %+v", rep.Lines, want)
	}
	total := Line{Group: "total", GPUHours: 12, CPUHours: 36, Cost: money(t, "24.84"), Waste: money(t, "5.70"), Attempts: 5, RunningPerHour: money(t, "2.10")}
	if rep.Total != total {
		t.Errorf("total = %+v, want %+v", rep.Total, total)
	}

	// The window starts at hour 3: job 1 is left out, job 2's first attempt
	// counts 1 h (2.10), the running one still 12.60; job 3 and 4 as before.
	rep = Report(spans, Flat(rates), now, hours(3), "user")
	got := map[string]string{}
	for _, l := range rep.Lines {
		got[l.Group] = l.Cost.Cents() + "/" + l.Waste.Cents()
	}
	if fmt.Sprint(got) != "map[bob:14.70/2.10 carol:1.50/1.50]" {
		t.Errorf("by user since hour 3 = %v", got)
	}
	if rep.Lines[0].Group != "bob" {
		t.Errorf("lines not by cost, highest first: %+v", rep.Lines)
	}

	for by, groups := range map[string]string{
		"pool": "[gpu cpu free]",
		"job":  "[2 sweep 1 train 3 prep 4 eval]",
	} {
		rep := Report(spans, Flat(rates), now, t0, by)
		var names []string
		for _, l := range rep.Lines {
			names = append(names, l.Group)
		}
		if fmt.Sprint(names) != groups {
			t.Errorf("by %s: groups %v, want %s", by, names, groups)
		}
		if rep.Total.Cost != money(t, "24.84") {
			t.Errorf("by %s: total %s, want 24.84 whatever the grouping", by, rep.Total.Cost)
		}
	}
}

// TestReportByDay: an attempt across midnight UTC counts in both days, each
// its share; the days come in order.
func TestReportByDay(t *testing.T) {
	rates := map[string]domain.Rates{"gpu": {GPUHour: money(t, "1.00")}}
	spans := []Span{
		// 22:00 to 03:00 the next day: 2 h (2.00) on the 1st, 3 h (3.00) on the 2nd
		{JobID: 1, Attempt: 1, Project: "p", Pool: "gpu", Resources: domain.Resources{GPUs: 1},
			Start: hours(22), End: hours(27), State: domain.AttemptSucceeded},
		// running from 04:00 on the 2nd; now is 06:00: 2 × 1.00 × 2 h = 4.00, 2.00/h
		{JobID: 2, Attempt: 1, Project: "p", Pool: "gpu", Resources: domain.Resources{GPUs: 2},
			Start: hours(28), State: domain.AttemptRunning},
	}
	rep := Report(spans, Flat(rates), hours(30), t0, "day")
	var got []string
	for _, l := range rep.Lines {
		got = append(got, fmt.Sprintf("%s %s %d %s", l.Group, l.Cost.Cents(), l.Attempts, l.RunningPerHour.Cents()))
	}
	if fmt.Sprint(got) != "[2026-03-01 2.00 1 0.00 2026-03-02 7.00 2 2.00]" {
		t.Errorf("by day = %v", got)
	}
	if rep.Total.Cost != money(t, "9.00") || rep.Total.Attempts != 2 {
		t.Errorf("total = %+v, want 9.00 over 2 attempts", rep.Total)
	}
}

// TestReportRunningJustStarted: an attempt that started at now costs nothing
// yet but shows its running rate.
func TestReportRunningJustStarted(t *testing.T) {
	rates := map[string]domain.Rates{"gpu": {GPUHour: money(t, "3.00")}}
	rep := Report([]Span{{JobID: 1, Project: "p", Pool: "gpu", Resources: domain.Resources{GPUs: 1}, Start: hours(1)}},
		Flat(rates), hours(1), t0, "project")
	if len(rep.Lines) != 1 || rep.Lines[0].Cost != 0 || rep.Lines[0].RunningPerHour != money(t, "3.00") {
		t.Errorf("= %+v", rep.Lines)
	}
}

func TestCheckBy(t *testing.T) {
	for _, by := range Groupings {
		if err := CheckBy(by); err != nil {
			t.Error(err)
		}
	}
	if err := CheckBy("team"); err == nil || err.Error() != `cannot group by "team"; choose one of project, pool, user, job, day` {
		t.Errorf("CheckBy(team) = %v", err)
	}
}

// BenchmarkCostReport prices a generated history of 100k attempts over 30
// days, across 20 projects and 4 pools, a tenth of them still running.
func BenchmarkCostReport(b *testing.B) {
	rates := map[string]domain.Rates{}
	for i := range 4 {
		rates[fmt.Sprintf("pool-%d", i)] = domain.Rates{GPUHour: money(b, "2.10"), CPUHour: money(b, "0.04"), MemoryGiBHour: money(b, "0.005")}
	}
	now := t0.Add(30 * 24 * time.Hour)
	spans := make([]Span, 100_000)
	for i := range spans {
		start := t0.Add(time.Duration(i) * 30 * 24 * time.Hour / time.Duration(len(spans)))
		s := Span{JobID: int64(i / 2), Attempt: i%2 + 1, Project: fmt.Sprintf("project-%d", i%20), Pool: fmt.Sprintf("pool-%d", i%4),
			User: fmt.Sprintf("user-%d", i%50), JobName: "train",
			Resources: domain.Resources{GPUs: i % 9, CPUs: float64(i%16) + 0.5, Memory: domain.ByteSize(i%64) << 30, Nodes: 1 + i%2},
			Start:     start, End: start.Add(time.Duration(i%600) * time.Minute), State: domain.AttemptSucceeded}
		if i%10 == 0 {
			s.End, s.State = time.Time{}, domain.AttemptRunning
		}
		if i%7 == 0 {
			s.State = domain.AttemptPreempted
		}
		spans[i] = s
	}
	ledger := Flat(rates)
	for _, by := range []string{"project", "day"} {
		b.Run(by, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Report(spans, ledger, now, t0, by)
			}
		})
	}
}
