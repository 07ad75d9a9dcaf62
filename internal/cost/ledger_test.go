package cost

import (
	"slices"
	"testing"
	"time"

	"trainyard/internal/domain"
)

// rateChange is the ledger of the tests below: pool gpu at 2.00 per
// GPU-hour from hour 0, raised to 3.00 at hour 2; pool cpu at 0.05 per
// CPU-hour throughout.
func rateChange(t testing.TB) Ledger {
	var l Ledger
	l.Add("gpu", t0, domain.Rates{GPUHour: money(t, "2.00")})
	l.Add("gpu", hours(2), domain.Rates{GPUHour: money(t, "3.00")})
	l.Add("cpu", time.Unix(0, 0), domain.Rates{CPUHour: money(t, "0.05")})
	return l
}

func TestLedgerAt(t *testing.T) {
	l := rateChange(t)
	for _, c := range []struct {
		pool string
		at   time.Time
		want string
	}{
		{"gpu", hours(-1), "2.00"}, // before the first change: its rates
		{"gpu", t0, "2.00"},
		{"gpu", hours(2).Add(-time.Nanosecond), "2.00"},
		{"gpu", hours(2), "3.00"}, // in force from the change on
		{"gpu", hours(100), "3.00"},
		{"none", hours(1), "0.00"}, // no history: free
	} {
		if got := l.At(c.pool, c.at).GPUHour; got != money(t, c.want) {
			t.Errorf("At(%s, %s) = %s, want %s", c.pool, c.at, got, c.want)
		}
	}
	if !l.Priced("gpu") || l.Priced("none") {
		t.Error("Priced: gpu should be, a pool without history not")
	}
	var free Ledger
	free.Add("free", t0, domain.Rates{})
	if free.Priced("free") {
		t.Error("a pool that never had rates is priced")
	}
	// A change at the same instant replaces the earlier one.
	l.Add("gpu", hours(2), domain.Rates{GPUHour: money(t, "4.00")})
	if got := l.At("gpu", hours(3)).GPUHour; got != money(t, "4.00") {
		t.Errorf("after replacing the change at hour 2: %s", got)
	}
	if got := l.Changes(t0, hours(10)); !slices.Equal(got, []time.Time{hours(2)}) {
		t.Errorf("Changes inside (0, 10) = %v; want hour 2 only (the window's ends are not changes inside it)", got)
	}
	if got := l.Changes(hours(2), hours(10)); len(got) != 0 {
		t.Errorf("Changes from the change on = %v; want none", got)
	}
}

// An attempt of one GPU that ran 2 h at 2.00 per GPU-hour and 1 h after
// the rate went to 3.00 costs exactly 2×2.00 + 1×3.00 = 7.00, by project,
// by day and against a budget alike, and 3.00 an hour while it runs; a
// 4-GPU gang of 2 nodes costs 8 times that.
func TestRateChangeMidAttempt(t *testing.T) {
	l := rateChange(t)
	gpu := func(n, nodes int) domain.Resources { return domain.Resources{GPUs: n, Nodes: nodes} }
	ended := Span{JobID: 1, Attempt: 1, Project: "p", Pool: "gpu", Resources: gpu(1, 1), Start: t0, End: hours(3), State: domain.AttemptSucceeded}
	gang := ended
	gang.JobID, gang.Resources = 2, gpu(4, 2)
	running := Span{JobID: 3, Attempt: 1, Project: "q", Pool: "gpu", Resources: gpu(1, 1), Start: t0, State: domain.AttemptRunning}
	now := hours(3)
	want := map[string]string{"p": "63.00", "q": "7.00"} // 7.00 + 8 × 7.00; 7.00
	for _, by := range []string{"project", "day"} {
		rep := Report([]Span{ended, gang, running}, l, now, t0, by)
		if by == "project" {
			for _, line := range rep.Lines {
				if line.Cost != money(t, want[line.Group]) {
					t.Errorf("by project: %s costs %s, want %s", line.Group, line.Cost, want[line.Group])
				}
			}
		}
		if rep.Total.Cost != money(t, "70.00") || rep.Total.RunningPerHour != money(t, "3.00") {
			t.Errorf("by %s: total %s, running %s an hour; want 70.00 and 3.00", by, rep.Total.Cost, rep.Total.RunningPerHour)
		}
	}
	one := Report([]Span{ended}, l, now, t0, "job")
	if one.Total.Cost != money(t, "7.00") {
		t.Errorf("the 1-GPU attempt costs %s, want 7.00", one.Total.Cost)
	}
	if got := Spent([]Span{ended, gang, running}, l, now); got != money(t, "70.00") {
		t.Errorf("Spent = %s, want the report's total, 70.00", got)
	}
	// Clipped to the window from hour 1: 1 h at 2.00, 1 h at 3.00.
	if got := Report([]Span{ended}, l, now, hours(1), "project").Total.Cost; got != money(t, "5.00") {
		t.Errorf("from hour 1: %s, want 5.00", got)
	}
	// The budget: spent 7.00 + 7.00 for project q's running attempt, and
	// its next 2 h (to its 5 h timeout) at the rate in force now, 6.00.
	running.Project, running.Timeout = "p", 5*time.Hour
	b := domain.Budget{Project: "p", Amount: 100 * domain.MoneyUnit, Period: domain.BudgetMonthly, Action: domain.BudgetBlock}
	u, ok := BudgetUse(b, []Span{ended, running}, l, now)
	if !ok || u.Spent != money(t, "14.00") || u.Committed != money(t, "20.00") || u.Rate != money(t, "3.00") {
		t.Errorf("budget use = spent %s, committed %s, rate %s (%v); want 14.00, 20.00, 3.00", u.Spent, u.Committed, u.Rate, ok)
	}
	// The same history and ledger give the same report every time.
	a, c := Report([]Span{ended, gang, running}, l, now, t0, "job"), Report([]Span{ended, gang, running}, l, now, t0, "job")
	if !slices.Equal(a.Lines, c.Lines) || a.Total != c.Total {
		t.Errorf("two reports of one history differ:\n%+v\n%+v", a, c)
	}
}

// The parts of an attempt at different rates are summed exactly and
// rounded once: one CPU at 0.000001 per hour for 15 min before a change
// and 15 min after costs half a micro, which rounds to one micro, where
// rounding each part (a quarter micro, to nothing) would lose it.
func TestRateChangeRoundsOnce(t *testing.T) {
	var l Ledger
	l.Add("cpu", t0, domain.Rates{CPUHour: 1})
	l.Add("cpu", hours(0.25), domain.Rates{CPUHour: 1, GPUHour: 5}) // a change that does not touch CPUs
	s := Span{Project: "p", Pool: "cpu", Resources: domain.Resources{CPUs: 1}, Start: t0, End: hours(0.5), State: domain.AttemptSucceeded}
	if got := Report([]Span{s}, l, hours(1), t0, "project").Total.Cost; got != 1 {
		t.Errorf("= %d micros, want 1", got)
	}
	rows := []Totals{{Group: "p", Pool: "cpu", Resources: s.Resources, Attempts: 1, Held: 30 * time.Minute,
		Pieces: []Piece{{From: t0, Held: 15 * time.Minute}, {From: hours(0.25), Held: 15 * time.Minute}}}}
	if got := ReportTotals(rows, l, hours(1), t0, "project").Total.Cost; got != 1 {
		t.Errorf("ReportTotals = %d micros, want 1", got)
	}
}

// ReportTotals prices each piece of a sum at the rates in force from its
// start: the database's sums of the attempts of TestRateChangeMidAttempt
// cost what their spans do.
func TestReportTotalsPieces(t *testing.T) {
	l := rateChange(t)
	rows := []Totals{
		{Group: "p", Pool: "gpu", Resources: domain.Resources{GPUs: 1, Nodes: 1}, Attempts: 1, Held: 3 * time.Hour,
			Pieces: []Piece{{From: t0, Held: 2 * time.Hour}, {From: hours(2), Held: time.Hour}}},
		{Group: "q", Pool: "gpu", Resources: domain.Resources{GPUs: 1, Nodes: 1}, Attempts: 1, Running: 1, Held: 3 * time.Hour,
			Pieces: []Piece{{From: t0, Held: 2 * time.Hour}, {From: hours(2), Held: time.Hour}}},
		// No pieces: one from the window's start.
		{Group: "r", Pool: "cpu", Resources: domain.Resources{CPUs: 10}, Attempts: 1, Held: 2 * time.Hour},
	}
	rep := ReportTotals(rows, l, hours(3), t0, "project")
	got := map[string]domain.Money{}
	for _, line := range rep.Lines {
		got[line.Group] = line.Cost
	}
	if got["p"] != money(t, "7.00") || got["q"] != money(t, "7.00") || got["r"] != money(t, "1.00") || rep.Total.RunningPerHour != money(t, "3.00") {
		t.Errorf("ReportTotals = %v, running %s; want p 7.00, q 7.00, r 1.00, running 3.00", got, rep.Total.RunningPerHour)
	}
}
