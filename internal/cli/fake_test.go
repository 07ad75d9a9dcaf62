package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
)

// testNow is the fixed "now" of every CLI test.
var testNow = time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)

const testToken = "tok-test"

// fakeServer is an in-memory stand-in for the Trainyard API, enough to drive
// the CLI's commands.
type fakeServer struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	jobs     []*apitypes.Job // oldest first
	submits  []seenSubmit
	requests []string // "METHOD path?query"
	idem     map[string]int64
	logs     map[int64]map[int]string // job → attempt → log text
	// progress, when set, is called on every GET of a job before it is
	// returned, to move it along (queued → running → ...).
	progress func(j *apitypes.Job)
	// pageSize is the server's default page size.
	pageSize int
	// onLogs, when set, answers GET .../logs instead of the stored logs.
	onLogs func(w http.ResponseWriter, r *http.Request)
}

type seenSubmit struct {
	Req         apitypes.SubmitRequest
	SpecText    string
	Idempotency string
}

func newFakeServer(t *testing.T) *fakeServer {
	t.Helper()
	f := &fakeServer{t: t, idem: map[string]int64{}, logs: map[int64]map[int]string{}, pageSize: 50}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/jobs", f.submit)
	mux.HandleFunc("GET /api/v1/jobs", f.list)
	mux.HandleFunc("GET /api/v1/jobs/{id}", f.get)
	mux.HandleFunc("POST /api/v1/jobs/{id}/cancel", f.cancel)
	mux.HandleFunc("GET /api/v1/jobs/{id}/logs", f.getLogs)
	mux.HandleFunc("GET /api/v1/jobs/{id}/why", f.why)
	mux.HandleFunc("GET /api/v1/version", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusOK, apitypes.Version{Version: "9.9.9", Commit: "srvcommit", Store: "sqlite"})
	})
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests = append(f.requests, r.Method+" "+r.URL.RequestURI())
		f.mu.Unlock()
		if strings.HasPrefix(r.URL.Path, "/api/") && r.Header.Get("Authorization") != "Bearer "+testToken {
			fail(w, http.StatusUnauthorized, "unauthorized", "invalid or missing token")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, status int, code, msg string, fields ...apitypes.FieldError) {
	reply(w, status, apitypes.Error{Error: apitypes.ErrorBody{Code: code, Message: msg, Fields: fields}})
}

// addJob stores a job and returns it; ID and SubmittedAt are filled when zero.
func (f *fakeServer) addJob(j apitypes.Job) *apitypes.Job {
	f.mu.Lock()
	defer f.mu.Unlock()
	if j.ID == 0 {
		j.ID = int64(len(f.jobs) + 1)
	}
	if j.SubmittedAt.IsZero() {
		j.SubmittedAt = testNow.Add(-time.Minute)
	}
	f.jobs = append(f.jobs, &j)
	return &j
}

func (f *fakeServer) setLog(id int64, attempt int, text string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.logs[id] == nil {
		f.logs[id] = map[int]string{}
	}
	f.logs[id][attempt] = text
}

func (f *fakeServer) seenSubmits() []seenSubmit {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seenSubmit(nil), f.submits...)
}

func (f *fakeServer) seenRequests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

func (f *fakeServer) find(w http.ResponseWriter, r *http.Request) *apitypes.Job {
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	for _, j := range f.jobs {
		if j.ID == id {
			return j
		}
	}
	fail(w, http.StatusNotFound, "not_found", "job "+r.PathValue("id")+" not found")
	return nil
}

func (f *fakeServer) submit(w http.ResponseWriter, r *http.Request) {
	var req apitypes.SubmitRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	var text string
	if err := json.Unmarshal(req.Spec, &text); err != nil {
		fail(w, http.StatusBadRequest, "invalid_request", "spec must be a JSON string in this fake")
		return
	}
	key := r.Header.Get("Idempotency-Key")
	f.mu.Lock()
	f.submits = append(f.submits, seenSubmit{Req: req, SpecText: text, Idempotency: key})
	f.mu.Unlock()
	if strings.Contains(text, "gpus: -1") {
		fail(w, http.StatusUnprocessableEntity, "invalid_spec", "the job spec is invalid",
			apitypes.FieldError{Path: "resources.gpus", Line: 3, Message: "must be 0 or more"},
			apitypes.FieldError{Path: "policy.retries", Message: "needs policy.reentrant: true"})
		return
	}
	f.mu.Lock()
	if old, ok := f.idem[key]; ok && key != "" {
		j := *f.jobs[old-1]
		f.mu.Unlock()
		created := false
		j.Created = &created
		reply(w, http.StatusOK, j)
		return
	}
	f.mu.Unlock()
	j := f.addJob(apitypes.Job{Name: "smoke", Project: "default", State: "queued", SubmittedAt: testNow})
	f.mu.Lock()
	if key != "" {
		f.idem[key] = j.ID
	}
	out := *j
	f.mu.Unlock()
	created := true
	out.Created = &created
	reply(w, http.StatusCreated, out)
}

func (f *fakeServer) list(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := r.URL.Query()
	states := map[string]bool{}
	if s := q.Get("state"); s != "" {
		for _, st := range strings.Split(s, ",") {
			states[st] = true
		}
	}
	var match []apitypes.Job
	for i := len(f.jobs) - 1; i >= 0; i-- { // newest first
		j := *f.jobs[i]
		if len(states) > 0 && !states[j.State] {
			continue
		}
		if p := q.Get("project"); p != "" && j.Project != p {
			continue
		}
		if u := q.Get("user"); u != "" && j.Submitter != u {
			continue
		}
		if p := q.Get("pool"); p != "" && j.Pool != p {
			continue
		}
		if n := q.Get("q"); n != "" && !strings.Contains(strings.ToLower(j.Name), strings.ToLower(n)) {
			continue
		}
		match = append(match, j)
	}
	limit := f.pageSize
	if l, err := strconv.Atoi(q.Get("limit")); err == nil && l > 0 {
		limit = l
	}
	start, _ := strconv.Atoi(q.Get("cursor"))
	start = min(start, len(match))
	end := min(start+limit, len(match))
	out := apitypes.JobList{Jobs: match[start:end]}
	if out.Jobs == nil {
		out.Jobs = []apitypes.Job{}
	}
	if end < len(match) {
		out.NextCursor = strconv.Itoa(end)
	}
	reply(w, http.StatusOK, out)
}

func (f *fakeServer) get(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.find(w, r)
	if j == nil {
		return
	}
	if f.progress != nil {
		f.progress(j)
	}
	reply(w, http.StatusOK, j)
}

func (f *fakeServer) cancel(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.find(w, r)
	if j == nil {
		return
	}
	var req apitypes.CancelRequest
	_ = json.NewDecoder(r.Body).Decode(&req)
	switch j.State {
	case "queued", "held":
		j.State = "canceled"
		j.Reason = "CanceledByUser"
		j.Message = req.Reason
	case "starting", "running":
		j.CancelRequested = true
	default:
		fail(w, http.StatusConflict, "conflict", "job "+r.PathValue("id")+" already ended ("+j.State+")")
		return
	}
	reply(w, http.StatusOK, j)
}

func (f *fakeServer) getLogs(w http.ResponseWriter, r *http.Request) {
	if f.onLogs != nil {
		f.onLogs(w, r)
		return
	}
	f.mu.Lock()
	j := f.find(w, r)
	if j == nil {
		f.mu.Unlock()
		return
	}
	attempt, _ := strconv.Atoi(r.URL.Query().Get("attempt"))
	if attempt == 0 {
		attempt = j.AttemptCount
	}
	text, ok := f.logs[j.ID][attempt]
	f.mu.Unlock()
	if !ok {
		fail(w, http.StatusNotFound, "not_found", "no log for attempt "+strconv.Itoa(attempt))
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, text)
}

func (f *fakeServer) why(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.find(w, r)
	if j == nil {
		return
	}
	reply(w, http.StatusOK, apitypes.Why{
		ID: j.ID, State: j.State, Reason: "NoCapacity",
		Message:  "project vision uses 8 of 8 GPUs in pool standard",
		Evidence: []string{"pool standard: 8/8 GPUs allocated", "job asks for 2 GPUs"},
		Hint:     "wait for a running job to finish, or lower resources.gpus",
	})
}

// harness runs CLI commands in-process against a fake server.
type harness struct {
	t        *testing.T
	srv      *fakeServer
	vars     map[string]string
	terminal bool // stdout and stderr are terminals
	loadSpec func([]byte, []string) (domain.Spec, error)
	stdin    string
	ctx      context.Context // the commands' context, for interrupting them; nil: Background
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	f := newFakeServer(t)
	return &harness{
		t:   t,
		srv: f,
		vars: map[string]string{
			EnvServer:         f.srv.URL,
			EnvToken:          testToken,
			"XDG_CONFIG_HOME": t.TempDir(),
			"NO_COLOR":        "",
		},
	}
}

type result struct {
	stdout, stderr string
	code           int
}

func (h *harness) run(args ...string) result {
	h.t.Helper()
	e := &env{
		getenv:       func(k string) string { return h.vars[k] },
		isTerminal:   func(io.Writer) bool { return h.terminal },
		now:          func() time.Time { return testNow },
		pollInterval: time.Millisecond,
		httpClient:   h.srv.srv.Client(),
		loadSpec:     h.loadSpec,
		schema:       func() []byte { return []byte(`{"title":"stub schema"}`) },
	}
	if e.loadSpec == nil {
		e.loadSpec = func([]byte, []string) (domain.Spec, error) { return domain.Spec{}, nil }
	}
	root := newRoot(BuildInfo{Version: "1.2.3", Commit: "abc"}, e)
	var stdout, stderr bytes.Buffer
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetIn(strings.NewReader(h.stdin))
	root.SetArgs(args)
	parent := h.ctx
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithTimeout(parent, 20*time.Second)
	defer cancel()
	code := ExecuteContext(ctx, root)
	return result{stdout.String(), stderr.String(), code}
}

// mustRun runs args and fails the test unless the exit code is want.
func (h *harness) mustRun(want int, args ...string) result {
	h.t.Helper()
	r := h.run(args...)
	if r.code != want {
		h.t.Fatalf("trainyard %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, want, r.stdout, r.stderr)
	}
	return r
}
