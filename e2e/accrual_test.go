package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/cost"
	"trainyard/internal/domain"
)

// A server killed while a job runs and started again neither loses nor
// doubles the job's spend: once the job ends, it costs its pool's rate ×
// its CPUs × the time its attempt ran, to the micro, and the report says
// the same.
func TestSpendSurvivesARestart(t *testing.T) {
	s := startServer(t, serverOpts{cpus: 4, extra: `
pools:
  - name: default
    nodes: [{name: n1, cpus: 4, memory: 8GiB}]
    rates: {cpu_hour: 36}
`})
	gate := t.TempDir() + "/go"
	j := s.submit(fmt.Sprintf("name: steady\nresources: {cpus: 2, memory: 64MiB}\nentrypoint: [sh, -c, 'while [ ! -e %s ]; do sleep 0.05; done']\n", gate))
	s.waitState(j.ID, 30*time.Second, "running")
	s.kill9() // the attempt keeps running without its server
	s.start()
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	done := s.waitState(j.ID, 30*time.Second, "succeeded", "failed")
	if done.State != "succeeded" {
		t.Fatalf("job %s: %s", done.State, done.Message)
	}
	full := s.job(j.ID)
	if len(full.Attempts) != 1 || full.Attempts[0].StartedAt == nil || full.Attempts[0].FinishedAt == nil {
		t.Fatalf("attempts = %+v; want one that started and finished", full.Attempts)
	}
	ran := full.Attempts[0].FinishedAt.Sub(*full.Attempts[0].StartedAt)
	// 2 CPUs at 36.00 an hour: 0.02 a second.
	want := cost.Of(domain.Resources{CPUs: 2, Nodes: 1}, domain.Rates{CPUHour: 36 * domain.MoneyUnit}, ran)
	var rep apitypes.CostReport
	if code := s.api("GET", "/api/v1/cost?by=job&since=1d", nil, &rep); code != 200 || len(rep.Lines) != 1 {
		t.Fatalf("cost report: %d %+v", code, rep)
	}
	// The report sums held time to the microsecond: within a micro of
	// the exact price, and equal to the cent.
	l := rep.Lines[0]
	got, err := domain.ParseMoney(l.Cost)
	if err != nil || l.Attempts != 1 || got.Cents() != want.Cents() || got-want > 1 || want-got > 1 || rep.Total.Cost != l.Cost {
		t.Fatalf("the job costs %s over %d attempts, want %s (2 CPUs × 36.00/h × %s)", l.Cost, l.Attempts, want, ran)
	}
	// show prices the job from its attempts, exactly.
	if full.Cost != want.String() || full.CostPerHour != "0.00" || full.Currency != "USD" {
		t.Errorf("job cost %q (%q an hour, %q), want %s", full.Cost, full.CostPerHour, full.Currency, want)
	}
	if out := s.mustCLI("show", fmt.Sprint(j.ID)); !strings.Contains(out, "Cost:") || !strings.Contains(out, want.Cents()+" USD") {
		t.Errorf("show lacks the cost %s USD:\n%s", want.Cents(), out)
	}
}
