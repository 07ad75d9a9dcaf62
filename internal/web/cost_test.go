package web_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// storeEnv is env with its store at hand, to write the history a page
// reports (attempts that ran, alerts that fired) as the control loop
// would, and with pool gpu priced at 2.10 per GPU-hour and 0.10 per
// CPU-hour.
type storeEnv struct {
	*env
	st  store.Store
	now time.Time // the hour the history is written up to
}

func newStoreEnv(t *testing.T) *storeEnv {
	t.Helper()
	pool := domain.Pool{Name: "gpu", Nodes: []domain.Node{{Name: "g1", CPUs: 16, Memory: 64 << 30, GPUs: []int{0, 1, 2, 3}}},
		Rates: domain.Rates{GPUHour: 2_100_000, CPUHour: 100_000}}
	e := newEnvWith(t, nil, pool)
	return &storeEnv{env: e, st: e.st, now: time.Now().UTC().Truncate(time.Hour)}
}

// job stores a job of project by submitter on pool gpu, as submitted a
// day and a half ago.
func (e *storeEnv) job(name, project, submitter string, res domain.Resources) domain.Job {
	e.t.Helper()
	res.Nodes = 1
	spec := domain.Spec{Name: name, Project: project, Pool: "gpu", Entrypoint: []string{"true"}, Resources: res}
	b, _ := json.Marshal(spec)
	sum := sha256.Sum256(b)
	at := e.now.Add(-36 * time.Hour)
	j, _, err := e.st.CreateJob(context.Background(), store.NewJob{Spec: spec, SpecJSON: b, SpecHash: "sha256:" + hex.EncodeToString(sum[:]),
		Submitter: submitter, SubmittedAt: at, Actor: "user:" + submitter, OutputDir: func(id int64) string { return fmt.Sprintf("/out/%d", id) }},
		domain.AuditRecord{At: at, Actor: "user:" + submitter, Action: "job.submit", Target: "job/", Result: domain.AuditOK})
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

// ran records j's first attempt running from hours before now to hours
// before now, ending as end (with usage, when given).
func (e *storeEnv) ran(j domain.Job, from, to int, move domain.Move, end domain.AttemptState, usage *domain.Usage) {
	e.t.Helper()
	at := func(h int) time.Time { return e.now.Add(-time.Duration(h) * time.Hour) }
	apply := func(changes ...store.Change) {
		e.t.Helper()
		errs, err := e.st.Apply(context.Background(), changes)
		if err = errors.Join(append(errs, err)...); err != nil {
			e.t.Fatal(err)
		}
	}
	apply(store.Change{JobID: j.ID, Move: domain.MoveStart(), At: at(from),
		Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting, Node: "g1"}},
		store.Change{JobID: j.ID, Move: domain.MoveRun(), At: at(from),
			Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}})
	apply(store.Change{JobID: j.ID, Move: move.Only(domain.JobRunning), At: at(to),
		Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: end, Usage: usage}})
}

// history: vision's train (1 GPU, 4 CPUs, 2 h, succeeded, using half a
// CPU) costs 2×(2.10+0.40) = 5.00; nlp's prep (1 GPU, 1 CPU, 1 h, failed)
// 2.20, all of it waste. Both projects have a budget of 100.
func (e *storeEnv) history() {
	e.t.Helper()
	train := e.job("train", "vision", "bob", domain.Resources{GPUs: 1, CPUs: 4})
	e.ran(train, 26, 24, domain.MoveSucceed(), domain.AttemptSucceeded, &domain.Usage{CPUSeconds: 3600})
	prep := e.job("prep", "nlp", "dave", domain.Resources{GPUs: 1, CPUs: 1})
	e.ran(prep, 5, 4, domain.MoveFail(), domain.AttemptFailed, nil)
	for _, project := range []string{"vision", "nlp"} {
		b := domain.Budget{Project: project, Amount: 100 * domain.MoneyUnit, Start: e.now.AddDate(0, 0, -10), End: e.now.AddDate(0, 0, 10)}
		if _, err := e.svc.Cost.SetBudget(context.Background(), adminP, b); err != nil {
			e.t.Fatal(err)
		}
	}
}

// row returns the table row of body whose data-project is project, or "".
func row(body, class, project string) string {
	i := strings.Index(body, `<table class="cost `+class)
	if i < 0 {
		return ""
	}
	table := body[i:]
	table = table[:strings.Index(table, "</table>")]
	m := regexp.MustCompile(`(?s)<tr data-project="` + regexp.QuoteMeta(project) + `">.*?</tr>`).FindString(table)
	return m
}

// TestCostPage: an admin sees every project's spend, its waste, a chart
// with a line per project, pools and users, budgets and their use, and
// the job that held more CPUs than it used.
func TestCostPage(t *testing.T) {
	e := newStoreEnv(t)
	e.history()
	b := e.signIn(e.admin)
	code, body := b.get("/cost")
	if code != http.StatusOK {
		t.Fatalf("GET /cost: %d\n%s", code, body)
	}
	for _, want := range []string{"<h1>Cost</h1>", `<option value="30d" selected>`, "Spend by project", "By pool", "By user",
		"Budgets", "Waste and idle resources", `aria-current="page">Cost`} {
		if !strings.Contains(body, want) {
			t.Errorf("the cost page lacks %q", want)
		}
	}
	vision, nlp := row(body, "cost-projects", "vision"), row(body, "cost-projects", "nlp")
	if !strings.Contains(vision, ">5.00<") || !strings.Contains(vision, `<meter class="share"`) {
		t.Errorf("vision's row: %q, want 5.00 with a bar of its share", vision)
	}
	if !strings.Contains(nlp, ">2.20<") || !strings.Contains(nlp, `class="num waste">2.20<`) {
		t.Errorf("nlp's row: %q, want 2.20, all of it waste", nlp)
	}
	if !strings.Contains(body, `<td class="num">7.20</td>`) {
		t.Error("the total 7.20 is missing")
	}
	for _, s := range []string{`data-series="vision"`, `data-series="nlp"`} {
		if !strings.Contains(body, s) {
			t.Errorf("the chart lacks the line %s", s)
		}
	}
	if !strings.Contains(body, "<td>gpu</td>") || !strings.Contains(body, "<td>bob</td>") || !strings.Contains(body, "<td>dave</td>") {
		t.Error("the pool and user tables lack gpu, bob or dave")
	}
	budget := row(body, "budgets", "vision")
	if !strings.Contains(budget, `<meter class="budget-use"`) || !strings.Contains(budget, `value="5.00"`) || !strings.Contains(budget, "100.00") {
		t.Errorf("vision's budget: %q, want 5.00 of 100.00 on a meter", budget)
	}
	if !strings.Contains(body, `<table class="cost oversized">`) || !strings.Contains(body, fmt.Sprintf(`<a href="/jobs/%d">`, 1)) {
		t.Error("the oversized job train (half a CPU of 4) is not named")
	}
	if strings.Contains(body, `style=`) || strings.Contains(body, "<script>") {
		t.Error("the page has an inline style or script, which the content policy forbids")
	}

	// A narrower window, and one project.
	code, body = b.get("/cost?since=7d&project=nlp")
	if code != http.StatusOK || !strings.Contains(body, `<option value="7d" selected>`) || row(body, "cost-projects", "nlp") == "" ||
		row(body, "cost-projects", "vision") != "" {
		t.Errorf("?since=7d&project=nlp: %d, want nlp alone", code)
	}
	code, body = b.get("/cost?since=soon")
	if code != http.StatusBadRequest || !strings.Contains(body, "since: must be a duration") {
		t.Errorf("?since=soon: %d, want 400 naming since", code)
	}
}

// TestCostPageShowsAMemberTheirProjects: a member of vision sees vision's
// spend and budget and nothing of nlp's, and is refused nlp by name.
func TestCostPageShowsAMemberTheirProjects(t *testing.T) {
	e := newStoreEnv(t)
	e.history()
	b := e.signIn(e.user("bob", "member@vision"))
	code, body := b.get("/cost")
	if code != http.StatusOK {
		t.Fatalf("GET /cost as a member: %d", code)
	}
	if row(body, "cost-projects", "vision") == "" || row(body, "budgets", "vision") == "" {
		t.Error("a member of vision does not see vision's spend or budget")
	}
	if strings.Contains(body, "nlp") || strings.Contains(body, "dave") {
		t.Error("a member of vision sees something of nlp")
	}
	if code, _ := b.get("/cost?project=nlp"); code != http.StatusForbidden {
		t.Errorf("?project=nlp as a member of vision: %d, want 403", code)
	}
}
