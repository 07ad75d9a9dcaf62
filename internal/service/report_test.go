package service

import (
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// The weekly report's paragraph carries the totals, the slowest queue,
// each budget's use, the idle CPUs' cost and the command for the rest.
func TestReviewSummary(t *testing.T) {
	since := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	line := func(group string, p90 time.Duration) ReviewLine {
		return ReviewLine{ReportRow: store.ReportRow{Group: group, Queue: store.QueueTimes{N: 3, P90: p90}}}
	}
	nlp := line("nlp", 12*time.Minute)
	nlp.Budget = &BudgetStatus{Budget: domain.Budget{Amount: 5000 * domain.MoneyUnit}}
	nlp.Budget.Use.Spent, nlp.Budget.Use.Period = 3865*domain.MoneyUnit, "2026-11"
	rep := Review{By: "project", Since: since, Until: since.AddDate(0, 0, 7), Under: 0.25, Near: 0.9,
		Lines: []ReviewLine{nlp, line("vision", time.Minute)},
		Total: ReviewLine{ReportRow: store.ReportRow{Submitted: 509, Started: 569, Retries: 55, Ended: 554, Preempted: 9},
			Failed: 40, GPUHours: 2050.5, GPUHoursUsed: 1435.35, CPUHours: 4142, CPUHoursUsed: 2071, Cost: 4346 * domain.MoneyUnit, Waste: 415 * domain.MoneyUnit},
		Oversized: []ReviewJob{{SizedJob: store.SizedJob{JobID: 8812, Name: "prep", Submitter: "dana"}, IdleCost: 52 * domain.MoneyUnit}}}
	got := rep.Summary("USD")
	for _, want := range []string{
		"Review of 2026-11-23 09:00 – 2026-11-30 09:00 UTC: 509 jobs submitted; 569 attempts started (55 retries), 554 ended: 40 failed (7%), 9 preempted",
		"longest queue: project nlp at p90 (12m0s)", "Held 2050.5 GPU-h and 4142.0 CPU-h, 70% of the GPU time and 50% of the CPU time used",
		"Cost 4346.00 USD, of it waste 415.00 USD.", "nlp: 3865.00 USD of its 5000.00 USD budget (2026-11).",
		"1 jobs used under 25% of the CPUs they held (idle CPUs cost 52.00 USD), the most job 8812 (prep, dana).",
		"Details: trainyard report --by project --since 2026-11-23T09:00:00Z",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
}
