package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

// Budgets end to end: budget set creates one in the server's currency,
// budget ls shows it in force this month with nothing spent, a second set
// changes only what it names, the audit log has both writes, a bad
// amount is refused changing nothing, and budget rm removes it.
func TestBudgets(t *testing.T) {
	s := startServer(t, serverOpts{extra: `
currency: EUR
pools:
  - name: standard
    nodes: [{name: s1, cpus: 2, memory: 4GiB}]
    rates: {cpu_hour: "0.04"}
`})
	out := s.mustCLI("budget", "set", "vision", "--amount", "5000", "--action", "block")
	if !strings.HasPrefix(out, "set the budget of project vision: 5000.00 EUR per month, action block, thresholds 50,80,100%\n") ||
		!strings.Contains(out, ": spent 0.00 (0.0%), committed 0.00") {
		t.Fatalf("budget set:\n%s", out)
	}
	ls := s.mustCLI("budget", "ls")
	lines := strings.Split(strings.TrimSpace(ls), "\n")
	if len(lines) != 2 || strings.Join(strings.Fields(lines[0]), " ") != "PROJECT PERIOD AMOUNT (EUR) SPENT COMMITTED USED% RATE/H ACTION THRESHOLDS" {
		t.Fatalf("budget ls:\n%s", ls)
	}
	if f := strings.Fields(lines[1]); len(f) != 9 || f[0] != "vision" || f[2] != "5000.00" || f[3] != "0.00" || f[4] != "0.00" ||
		f[5] != "0.0%" || f[6] != "0.00" || f[7] != "block" || f[8] != "50,80,100" {
		t.Errorf("budget ls row: %q", lines[1])
	}

	s.mustCLI("budget", "set", "vision", "--thresholds", "80,100")
	var l apitypes.BudgetList
	if err := json.Unmarshal([]byte(s.mustCLI("budget", "ls", "--project", "vision", "-o", "json")), &l); err != nil || len(l.Budgets) != 1 {
		t.Fatalf("budget ls -o json: %v %+v", err, l)
	}
	b := l.Budgets[0]
	if b.Amount != "5000.00" || b.Currency != "EUR" || b.Period != "month" || b.Action != "block" || len(b.Thresholds) != 2 ||
		!b.InForce || b.Spent != "0.00" || b.Committed != "0.00" || b.PeriodStart == nil || b.PeriodName != b.PeriodStart.Format("2006-01") {
		t.Errorf("budget after the second set = %+v", b)
	}
	audit := s.mustCLI("audit", "ls", "--action", "budget.write", "--target", "budget/vision", "-o", "json")
	if strings.Count(audit, `"action": "budget.write"`) != 2 {
		t.Errorf("the audit log lacks the two budget writes:\n%s", audit)
	}

	_, errOut, code := s.cli("budget", "set", "vision", "--amount", "5,000")
	if code != 2 || !strings.Contains(errOut, `invalid --amount: "5,000" is not an amount`) {
		t.Errorf("a bad --amount: exit %d, %s", code, errOut)
	}
	var eb struct{ Error apitypes.ErrorBody }
	if code := s.api("PUT", "/api/v1/budgets/vision", apitypes.Budget{Amount: "10", Period: "month", Currency: "USD"}, &eb); code != 400 ||
		len(eb.Error.Fields) != 1 || eb.Error.Fields[0].Path != "currency" {
		t.Errorf("a budget in USD: %d %+v", code, eb)
	}
	var after apitypes.BudgetList
	s.api("GET", "/api/v1/budgets", nil, &after)
	if len(after.Budgets) != 1 || after.Budgets[0].Amount != "5000.00" || !after.Budgets[0].UpdatedAt.Equal(b.UpdatedAt) {
		t.Errorf("refused changes altered the budget: %+v", after.Budgets)
	}

	if out := s.mustCLI("budget", "rm", "vision"); out != "removed the budget of project vision\n" {
		t.Errorf("budget rm: %q", out)
	}
	out, errOut, _ = s.cli("budget", "ls")
	if out != "" || !strings.Contains(errOut, "no budgets found") {
		t.Errorf("budget ls after rm: %q %q", out, errOut)
	}
	if _, errOut, code := s.cli("budget", "rm", "vision"); code != 3 || !strings.Contains(errOut, `project "vision" has no budget`) {
		t.Errorf("a second budget rm: exit %d, %s", code, errOut)
	}
}

// A block budget end to end: a job whose worst case (1 CPU at 1.00 an
// hour for its 2h timeout) would cross a budget of 1.00 is held with
// reason BudgetExceeded, budget ls still shows nothing spent, and raising
// the budget releases it to run.
func TestBudgetBlocks(t *testing.T) {
	s := startServer(t, serverOpts{extra: `
currency: EUR
pools:
  - name: standard
    nodes: [{name: s1, cpus: 2, memory: 4GiB}]
    rates: {cpu_hour: "1.00"}
`})
	s.mustCLI("budget", "set", "vision", "--amount", "1", "--action", "block")
	j := s.submit("name: capped\nproject: vision\npool: standard\nresources: {cpus: 1, memory: 1GiB}\npolicy: {timeout: 2h}\nentrypoint: [\"true\"]\n")
	held := s.waitState(j.ID, 30*time.Second, "held", "running", "succeeded", "failed")
	if held.State != "held" || held.Reason != "BudgetExceeded" || !strings.Contains(held.Message, "may cost up to 2.00 more") {
		t.Fatalf("job under a 1.00 budget: %s (%s) %q, want held with reason BudgetExceeded and its worst case", held.State, held.Reason, held.Message)
	}
	var l apitypes.BudgetList
	if err := json.Unmarshal([]byte(s.mustCLI("budget", "ls", "-o", "json")), &l); err != nil || len(l.Budgets) != 1 ||
		l.Budgets[0].Spent != "0.00" || l.Budgets[0].Committed != "0.00" {
		t.Errorf("budget ls with the job held: %v %+v", err, l.Budgets)
	}

	s.mustCLI("budget", "set", "vision", "--amount", "10")
	if done := s.waitState(j.ID, 30*time.Second, "succeeded", "failed"); done.State != "succeeded" {
		t.Fatalf("job after raising the budget: %s (%s) %q", done.State, done.Reason, done.Message)
	}
}
