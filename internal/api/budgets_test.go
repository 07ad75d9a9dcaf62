package api_test

import (
	"encoding/json"
	"strings"
	"testing"

	"trainyard/internal/api/apitypes"
)

// TestBudgets: on the history of TestCostReport (clock at hour 10 of
// 2026-03-01, server currency EUR), vision's monthly budget of 100 has
// 23.10 spent, 23.1% used, and an unbounded commitment (its running retry
// has no timeout); nlp's one-off budget from 2026-02-15 has 2.10 spent;
// a budget whose period has not begun is not in force.
func TestBudgets(t *testing.T) {
	e, at := newCostEnv(t, "EUR")
	admin := e.token

	code, b := e.do("PUT", "/api/v1/budgets/vision", admin, `{"amount": "100", "period": "month", "action": "block"}`)
	// (The history's running 1-GPU attempt costs 2.10 an hour.)
	if code != 200 {
		t.Fatalf("PUT vision = %d %s", code, b)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"project": "vision", "amount": "100.00", "currency": "EUR", "period": "month",
		"thresholds": []any{50.0, 80.0, 100.0}, "action": "block", "updated_at": at(10).Format("2006-01-02T15:04:05Z"),
		"in_force": true, "period_name": "2026-03", "period_start": "2026-03-01T00:00:00Z", "period_end": "2026-04-01T00:00:00Z",
		"spent": "23.10", "committed": "23.10", "committed_unbounded": true, "percent_used": 23.1, "rate_per_hour": "2.10"}
	if g, w := mustJSON(t, got), mustJSON(t, want); g != w {
		t.Errorf("PUT vision answered\n %s\nwant\n %s", g, w)
	}

	// An amount as a JSON number, a one-off period by dates, no thresholds.
	code, b = e.do("PUT", "/api/v1/budgets/nlp", admin, `{"amount": 5000, "start": "2026-02-15", "end": "2026-03-15T00:00:00Z", "thresholds": []}`)
	var nlp apitypes.Budget
	if err := json.Unmarshal(b, &nlp); code != 200 || err != nil {
		t.Fatalf("PUT nlp = %d %s", code, b)
	}
	if nlp.Amount != "5000.00" || nlp.Period != "" || nlp.Start != "2026-02-15T00:00:00Z" || nlp.End != "2026-03-15T00:00:00Z" ||
		len(nlp.Thresholds) != 0 || nlp.Thresholds == nil || nlp.Action != "notify" || !nlp.InForce ||
		nlp.PeriodName != "2026-02-15..2026-03-15" || nlp.Spent != "2.10" || nlp.Committed != "2.10" || nlp.CommittedUnbounded || nlp.PercentUsed != 0.04 {
		t.Errorf("PUT nlp answered %s", b)
	}

	// A period that has not begun: not in force, no spend fields.
	code, b = e.do("PUT", "/api/v1/budgets/later", admin, apitypes.Budget{Amount: "10", Start: "2026-04-01", End: "2026-05-01"})
	if code != 200 {
		t.Fatalf("PUT later = %d %s", code, b)
	}
	var later map[string]any
	json.Unmarshal(b, &later)
	if later["in_force"] != false || later["percent_used"] != 0.0 {
		t.Errorf("PUT later answered %s, want in_force false and percent_used 0", b)
	}
	for _, key := range []string{"spent", "committed", "committed_unbounded", "period_name", "period_start", "period_end"} {
		if _, ok := later[key]; ok {
			t.Errorf("PUT later answered %s, with %s", b, key)
		}
	}

	list := func(token, query string) []string {
		t.Helper()
		code, b := e.do("GET", "/api/v1/budgets"+query, token, nil)
		var l apitypes.BudgetList
		if err := json.Unmarshal(b, &l); code != 200 || err != nil || l.Budgets == nil {
			t.Fatalf("GET /api/v1/budgets%s = %d %s", query, code, b)
		}
		var out []string
		for _, b := range l.Budgets {
			out = append(out, b.Project+" "+string(b.Spent))
		}
		return out
	}
	if got := strings.Join(list(admin, ""), ", "); got != "later , nlp 2.10, vision 23.10" {
		t.Errorf("list = %s", got)
	}
	if got := strings.Join(list(admin, "?project=vision"), ", "); got != "vision 23.10" {
		t.Errorf("list ?project=vision = %s", got)
	}

	// A member of vision reads vision's budget only, and may not change it.
	member := e.memberToken(t, "alice", "vision")
	if got := strings.Join(list(member, ""), ", "); got != "vision 23.10" {
		t.Errorf("member's list = %s", got)
	}
	for _, rq := range []struct{ method, body string }{{"PUT", `{"amount": "1", "period": "month"}`}, {"DELETE", ""}} {
		var body any
		if rq.body != "" {
			body = rq.body
		}
		code, b := e.do(rq.method, "/api/v1/budgets/vision", member, body)
		if code != 403 || decodeErr(t, b).Code != "forbidden" {
			t.Errorf("%s by a member = %d %s, want 403", rq.method, code, b)
		}
	}
	if code, _ := e.do("GET", "/api/v1/budgets", "", nil); code != 401 {
		t.Errorf("without a token: %d, want 401", code)
	}

	for body, want := range map[string]string{
		`{"amount": "abc", "period": "month"}`:                         `amount: "abc" is not an amount; write a decimal such as 2.10`,
		`{"amount": "0", "period": "month"}`:                           "amount: must be a positive amount, such as 5000 or 1250.50",
		`{"amount": "10"}`:                                             "period: give period: month, or start and end (dates such as 2026-12-01) for one period",
		`{"amount": "10", "period": "week"}`:                           `period: unknown period "week"; use month, or leave it out and give start and end`,
		`{"amount": "10", "start": "soon", "end": "2026-05-01"}`:       `start: must be a date such as 2026-12-01 or an RFC 3339 time such as 2026-12-01T00:00:00Z, got "soon"`,
		`{"amount": "10", "start": "2026-05-01", "end": "2026-04-01"}`: "end: must be after start (2026-05-01)",
		`{"amount": "10", "period": "month", "start": "2026-05-01"}`:   "start: a monthly budget renews every calendar month; leave out start and end, or leave out period for one period from start to end",
		`{"amount": "10", "period": "month", "action": "stop"}`:        `action: unknown action "stop"; use notify, block or suspend`,
		`{"amount": "10", "period": "month", "thresholds": [80, 50]}`:  "thresholds[1]: thresholds must rise: 50 follows 80",
		`{"amount": "10", "period": "month", "currency": "USD"}`:       `currency: budgets are in the server's currency, EUR, not "USD"; leave currency out, or change the server config's currency`,
		`{"amount": "10", "period": "month", "project": "nlp"}`:        `project: is "nlp" but the URL names "vision"; leave it out or make them match`,
		`{"amount": "10", "period": "month", "limit": 5}`:              `body: is not valid JSON for this endpoint: json: unknown field "limit"`,
	} {
		code, b := e.do("PUT", "/api/v1/budgets/vision", admin, body)
		if code != 400 || decodeErr(t, b).Code != "invalid_request" {
			t.Errorf("PUT %s = %d %s, want 400", body, code, b)
			continue
		}
		fe := decodeErr(t, b).Fields
		if len(fe) != 1 || fe[0].Path+": "+fe[0].Message != want {
			t.Errorf("PUT %s: fields %+v, want %q", body, fe, want)
		}
	}
	if got := strings.Join(list(admin, "?project=vision"), ", "); got != "vision 23.10" {
		t.Errorf("after refused writes, list ?project=vision = %s", got)
	}
	code, b = e.do("GET", "/api/v1/budgets?project=vision", admin, nil)
	var l apitypes.BudgetList
	if json.Unmarshal(b, &l); len(l.Budgets) != 1 || l.Budgets[0].Amount != "100.00" || l.Budgets[0].Action != "block" {
		t.Errorf("refused writes changed vision's budget: %d %s", code, b)
	}

	if code, b := e.do("DELETE", "/api/v1/budgets/vision", admin, nil); code != 204 {
		t.Fatalf("DELETE vision = %d %s", code, b)
	}
	code, b = e.do("DELETE", "/api/v1/budgets/vision", admin, nil)
	if code != 404 || decodeErr(t, b).Message != `project "vision" has no budget; list budgets with: trainyard budget ls` {
		t.Errorf("second DELETE = %d %s, want 404", code, b)
	}
	if got := strings.Join(list(admin, ""), ", "); got != "later , nlp 2.10" {
		t.Errorf("list after DELETE = %s", got)
	}
}

// memberToken creates user name with the member role in project and
// returns a token of theirs.
func (e *env) memberToken(t *testing.T, name, project string) string {
	t.Helper()
	if code, b := e.do("POST", "/api/v1/users", e.token, map[string]string{"name": name}); code != 201 {
		t.Fatalf("create user: %d %s", code, b)
	}
	if code, b := e.do("POST", "/api/v1/users/"+name+"/roles", e.token, apitypes.RoleBinding{Role: "member", Project: project}); code != 201 {
		t.Fatalf("grant member: %d %s", code, b)
	}
	code, b := e.do("POST", "/api/v1/tokens", e.token, apitypes.TokenRequest{User: name, Expires: "1d"})
	var tok apitypes.Token
	if err := json.Unmarshal(b, &tok); code != 201 || err != nil {
		t.Fatalf("create token: %d %s", code, b)
	}
	return tok.Token
}

// A spend-rate limit round-trips as a decimal per hour; a negative one is
// refused naming its field.
func TestBudgetMaxRate(t *testing.T) {
	e, _ := newCostEnv(t, "EUR")
	code, b := e.do("PUT", "/api/v1/budgets/vision", e.token, `{"amount": "100", "period": "month", "action": "block", "max_rate_per_hour": "12.5"}`)
	var got apitypes.Budget
	if err := json.Unmarshal(b, &got); code != 200 || err != nil || got.MaxRatePerHour != "12.50" || got.RatePerHour != "2.10" {
		t.Fatalf("PUT with a rate limit = %d %s", code, b)
	}
	code, b = e.do("PUT", "/api/v1/budgets/vision", e.token, `{"amount": "100", "period": "month", "max_rate_per_hour": "-1"}`)
	if eb := decodeErr(t, b); code != 400 || len(eb.Fields) != 1 || eb.Fields[0].Path != "max_rate_per_hour" {
		t.Fatalf("a negative limit = %d %s", code, b)
	}
}
