package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"trainyard/internal/api/apitypes"
)

// budgetFake stands in for the budget endpoints: it stores what PUT sends
// with the server's defaults, answers it in force in 2026-01 with nothing
// spent unless a test sets the spend, and records PUT bodies.
type budgetFake struct {
	mu      sync.Mutex
	budgets map[string]apitypes.Budget
	puts    []string
}

func newBudgetHarness(t *testing.T) (*harness, *budgetFake) {
	t.Helper()
	bf := &budgetFake{budgets: map[string]apitypes.Budget{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/budgets", func(w http.ResponseWriter, r *http.Request) {
		bf.mu.Lock()
		defer bf.mu.Unlock()
		out := apitypes.BudgetList{Budgets: []apitypes.Budget{}}
		for _, p := range []string{"nlp", "vision"} {
			if b, ok := bf.budgets[p]; ok && (r.URL.Query().Get("project") == "" || r.URL.Query().Get("project") == p) {
				out.Budgets = append(out.Budgets, b)
			}
		}
		reply(w, http.StatusOK, out)
	})
	mux.HandleFunc("PUT /api/v1/budgets/{project}", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var b apitypes.Budget
		if err := json.Unmarshal(body, &b); err != nil {
			fail(w, http.StatusBadRequest, "invalid_request", err.Error())
			return
		}
		bf.mu.Lock()
		defer bf.mu.Unlock()
		bf.puts = append(bf.puts, string(body))
		if b.Thresholds == nil {
			b.Thresholds = []int{50, 80, 100}
		}
		if b.Action == "" {
			b.Action = "notify"
		}
		b.Currency, b.InForce, b.Spent, b.Committed = "EUR", true, "0.00", "0.00"
		b.PeriodName = "2026-01"
		if b.Period == "" {
			b.PeriodName = b.Start[:10] + ".." + b.End[:10]
		}
		bf.budgets[b.Project] = b
		reply(w, http.StatusOK, b)
	})
	mux.HandleFunc("DELETE /api/v1/budgets/{project}", func(w http.ResponseWriter, r *http.Request) {
		bf.mu.Lock()
		defer bf.mu.Unlock()
		p := r.PathValue("project")
		if _, ok := bf.budgets[p]; !ok {
			fail(w, http.StatusNotFound, "not_found", `project "`+p+`" has no budget; list budgets with: trainyard budget ls`)
			return
		}
		delete(bf.budgets, p)
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			fail(w, http.StatusUnauthorized, "unauthorized", "invalid or missing token")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return &harness{t: t, srv: &fakeServer{t: t, srv: srv}, vars: map[string]string{
		EnvServer: srv.URL, EnvToken: testToken, "XDG_CONFIG_HOME": t.TempDir(), "NO_COLOR": "",
	}}, bf
}

func (bf *budgetFake) seenPuts() []string {
	bf.mu.Lock()
	defer bf.mu.Unlock()
	return append([]string(nil), bf.puts...)
}

func TestBudgetSetLsRm(t *testing.T) {
	h, bf := newBudgetHarness(t)
	r := h.mustRun(0, "budget", "set", "vision", "--amount", "5000")
	if want := "set the budget of project vision: 5000.00 EUR per month, action notify, thresholds 50,80,100%\n2026-01: spent 0.00 (0.0%), committed 0.00\n"; r.stdout != want {
		t.Errorf("set stdout = %q, want %q", r.stdout, want)
	}
	// Only the flags given change on an existing budget.
	h.mustRun(0, "budget", "set", "vision", "--action", "block", "--thresholds", "80,100")
	r = h.mustRun(0, "budget", "set", "nlp", "--amount", "1200.5", "--start", "2026-01-01", "--end", "2026-02-01T00:00:00Z",
		"--thresholds", "none", "--action", "suspend")
	if want := "set the budget of project nlp: 1200.50 EUR from 2026-01-01 to 2026-02-01, action suspend, thresholds none\n"; !strings.HasPrefix(r.stdout, want) {
		t.Errorf("one-off set stdout = %q, want prefix %q", r.stdout, want)
	}
	puts := bf.seenPuts()
	want := []string{
		`{"project":"vision","amount":"5000.00","period":"month","thresholds":null,"in_force":false,"percent_used":0}`,
		`{"project":"vision","amount":"5000.00","period":"month","thresholds":[80,100],"action":"block","in_force":false,"percent_used":0}`,
		`{"project":"nlp","amount":"1200.50","start":"2026-01-01T00:00:00Z","end":"2026-02-01T00:00:00Z","thresholds":[],"action":"suspend","in_force":false,"percent_used":0}`,
	}
	if strings.Join(puts, "\n") != strings.Join(want, "\n") {
		t.Errorf("PUT bodies:\n%s\nwant:\n%s", strings.Join(puts, "\n"), strings.Join(want, "\n"))
	}

	bf.mu.Lock()
	v := bf.budgets["vision"]
	v.Spent, v.Committed, v.CommittedUnbounded, v.PercentUsed = "1234.567", "2000.00", true, 24.69
	bf.budgets["vision"] = v
	n := bf.budgets["nlp"]
	n.InForce, n.PeriodName, n.Spent, n.Committed = false, "", "", ""
	bf.budgets["nlp"] = n
	bf.mu.Unlock()
	r = h.mustRun(0, "budget", "ls")
	wantTable := `PROJECT  PERIOD                                 AMOUNT (EUR)  SPENT    COMMITTED  USED%  RATE/H  ACTION   THRESHOLDS
nlp      2026-01-01..2026-02-01 (not in force)  1200.50       -        -          -      -       suspend  -
vision   2026-01                                5000.00       1234.57  unbounded  24.7%  -       block    80,100
`
	if r.stdout != wantTable {
		t.Errorf("ls:\n%s\nwant:\n%s", r.stdout, wantTable)
	}
	r = h.mustRun(0, "budget", "ls", "--project", "vision", "-o", "json")
	var l apitypes.BudgetList
	if err := json.Unmarshal([]byte(r.stdout), &l); err != nil || len(l.Budgets) != 1 || l.Budgets[0].Spent != "1234.567" {
		t.Errorf("ls -o json = %s (%v)", r.stdout, err)
	}

	r = h.mustRun(0, "budget", "rm", "vision")
	if r.stdout != "removed the budget of project vision\n" {
		t.Errorf("rm = %q", r.stdout)
	}
	r = h.mustRun(ExitNotFound, "budget", "rm", "vision")
	if !strings.Contains(r.stderr, `project "vision" has no budget; list budgets with: trainyard budget ls`) {
		t.Errorf("second rm: %q", r.stderr)
	}
	h.mustRun(0, "budget", "rm", "nlp")
	r = h.mustRun(0, "budget", "ls")
	if r.stdout != "" || !strings.Contains(r.stderr, "no budgets found") {
		t.Errorf("empty ls: stdout %q, stderr %q", r.stdout, r.stderr)
	}
}

// TestBudgetSetUsage: bad flags are usage errors that say what to give,
// and nothing is sent.
func TestBudgetSetUsage(t *testing.T) {
	h, bf := newBudgetHarness(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"vision"}, "project vision has no budget yet; give --amount, such as --amount 5000"},
		{[]string{"vision", "--amount", "5,000"}, `invalid --amount: "5,000" is not an amount; write a decimal such as 2.10; give an amount such as --amount 5000`},
		{[]string{"vision", "--amount", "0"}, "invalid --amount: a budget must be more than 0"},
		{[]string{"vision", "--amount", "1", "--period", "week"}, `invalid --period "week": the only period is month; for one period give --start and --end instead`},
		{[]string{"vision", "--amount", "1", "--period", "month", "--start", "2026-01-01"}, "give --period month, or --start and --end for one period, not both"},
		{[]string{"vision", "--amount", "1", "--start", "Jan 1"}, `invalid --start "Jan 1": give a date such as 2026-12-01 or an RFC 3339 time`},
		{[]string{"vision", "--amount", "1", "--thresholds", "80,50"}, `invalid --thresholds "80,50": thresholds must rise: 50 follows 80`},
		{[]string{"vision", "--amount", "1", "--thresholds", "half"}, `invalid --thresholds "half": "half" is not a percentage from 1 to 1000`},
		{[]string{"vision", "--amount", "1", "--action", "stop"}, `invalid --action "stop": want one of notify, block, suspend`},
	} {
		r := h.mustRun(ExitUsage, append([]string{"budget", "set"}, tc.args...)...)
		if !strings.Contains(r.stderr, tc.want) {
			t.Errorf("budget set %s: stderr %q, want %q", strings.Join(tc.args, " "), r.stderr, tc.want)
		}
	}
	// A monthly budget becomes a one-off one only with both dates.
	h.mustRun(0, "budget", "set", "vision", "--amount", "10")
	r := h.mustRun(ExitUsage, "budget", "set", "vision", "--end", "2026-02-01")
	if !strings.Contains(r.stderr, "project vision has a monthly budget; to give it one period instead, give both --start and --end") {
		t.Errorf("monthly to one-off with --end alone: %q", r.stderr)
	}
	if puts := bf.seenPuts(); len(puts) != 1 {
		t.Errorf("refused commands sent %d PUTs: %v", len(puts)-1, puts)
	}
}
