package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/cost"
	"trainyard/internal/domain"
)

// A job that holds 4 CPUs and uses next to none is named by the review
// report with what its idle CPUs cost, and the next submit of the same
// spec is warned to ask for less.
func TestReportNamesAnOversizedJob(t *testing.T) {
	s := startServer(t, serverOpts{cpus: 4, extra: `
right_size_min_run: 1s
pools:
  - name: default
    nodes: [{name: n1, cpus: 4, memory: 8GiB}]
    rates: {cpu_hour: 3.60}
`})
	spec := "name: idle\nresources: {cpus: 4, memory: 64MiB}\nentrypoint: [sleep, '1.5']\n"
	j := s.submit(spec)
	if done := s.waitState(j.ID, 30*time.Second, "succeeded", "failed"); done.State != "succeeded" {
		t.Fatalf("job %s: %s", done.State, done.Message)
	}
	full := s.job(j.ID)
	at := full.Attempts[0]
	held := at.FinishedAt.Sub(*at.StartedAt)
	// show and why name it too.
	if z := full.Sizing; z == nil || !z.Oversized || z.CPUs != 4 || z.UsedCPUs >= 1 || z.IdleCost == "" {
		t.Errorf("sizing = %+v; want oversized: under 1 of 4 CPUs used, with an idle cost", z)
	}
	if out := s.mustCLI("show", fmt.Sprint(j.ID)); !regexp.MustCompile(`Used: +0\.\d of 4 CPUs \(\d+%\), memory peak .*; far fewer CPUs than it holds, the idle ones cost 0\.\d\d USD`).MatchString(out) {
		t.Errorf("show lacks the sizing line:\n%s", out)
	}
	if out := s.mustCLI("why", fmt.Sprint(j.ID)); !regexp.MustCompile(`its attempts used 0\.\d of the 4 CPUs they held over \d+s; the idle CPUs cost 0\.\d\d USD: ask for less next time \(--set resources.cpus=1\)`).MatchString(out) {
		t.Errorf("why lacks the sizing note:\n%s", out)
	}

	var rep apitypes.Report
	if code := s.api("GET", "/api/v1/report?since=1h", nil, &rep); code != 200 {
		t.Fatalf("GET /api/v1/report: %d", code)
	}
	if len(rep.Lines) != 1 || rep.Lines[0].Group != "default" || rep.Lines[0].Submitted != 1 || rep.Lines[0].Succeeded != 1 ||
		rep.Lines[0].Queue.N != 1 || rep.Lines[0].Cost != full.Cost {
		t.Fatalf("report lines = %+v; want one for project default: 1 submitted, 1 succeeded, costing %s", rep.Lines, full.Cost)
	}
	if len(rep.Oversized) != 1 || rep.Oversized[0].ID != j.ID || rep.Oversized[0].CPUs != 4 || rep.Oversized[0].UsedCPUs >= 1 {
		t.Fatalf("oversized = %+v; want job %d, 4 CPUs, under one used", rep.Oversized, j.ID)
	}
	// The idle part of 4 CPUs at 3.60 an hour: at most what the job cost,
	// at least what 3 idle CPUs cost over the time it held them.
	idle, err := domain.ParseMoney(rep.Oversized[0].IdleCost)
	spent, _ := domain.ParseMoney(full.Cost)
	floor := cost.Of(domain.Resources{CPUs: 3, Nodes: 1}, domain.Rates{CPUHour: 36 * domain.MoneyUnit / 10}, held)
	if err != nil || idle <= floor || idle > spent {
		t.Errorf("idle cost %s; want above %s (3 CPUs) and at most %s (the job's cost)", rep.Oversized[0].IdleCost, floor, full.Cost)
	}
	out := s.mustCLI("report", "--since", "1h")
	for _, want := range []string{`PROJECT +SUBMITTED +QUEUE P50`, `\ndefault +1 +`, `Jobs that used under 25% of the CPUs they held:`,
		fmt.Sprintf(`\n +%d +idle +default +admin +4 +0\.\d\d `, j.ID)} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if csv := s.mustCLI("report", "--since", "1h", "--by", "pool", "-o", "csv"); !strings.HasPrefix(csv, "pool,submitted,") ||
		!strings.Contains(csv, "\ndefault,1,1,") || !strings.Contains(csv, "\ntotal,1,") {
		t.Errorf("report csv:\n%s", csv)
	}

	var again apitypes.Job
	b := []byte(fmt.Sprintf("%q", spec))
	if code := s.api("POST", "/api/v1/jobs", apitypes.SubmitRequest{Spec: b, AllowDuplicate: true}, &again); code != 201 {
		t.Fatalf("submit again: %d", code)
	}
	if w := strings.Join(again.Warnings, "\n"); !strings.Contains(w, `your last run of "idle" used at most 0.`) || !strings.Contains(w, "--set resources.cpus=1") {
		t.Errorf("second submit warnings = %q; want the right-sizing one", again.Warnings)
	}
}
