package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
)

// The test binary is the agent when this variable is set: the tests run
// it as a process of its own, as a pod runs it, and signal it.
const mainEnv = "TRAINYARD_AGENT_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		os.Exit(Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

const token = "tok-0123456789abcdef"

// fakeAPI serves the three endpoints the agent calls for job 7 attempt 2
// and records what arrives, in order.
type fakeAPI struct {
	t   *testing.T
	srv *httptest.Server

	mu       sync.Mutex
	calls    []string // "metrics", "PUT <path>", "complete <name>", in order
	points   []apitypes.MetricsStep
	files    map[string][]byte // output path → bytes
	fail     map[string]int    // call kind → how many more times to answer 503
	refuse   map[string]int    // call kind → status to answer instead
	badToken int
	changed  chan struct{}
	// Resuming: the job's registered checkpoints, their archives, and
	// how many resume reports to answer 409 not_started first.
	kept       []apitypes.Checkpoint
	archives   map[string][]byte
	notStarted int
}

func newFakeAPI(t *testing.T) *fakeAPI {
	a := &fakeAPI{t: t, files: map[string][]byte{}, fail: map[string]int{}, refuse: map[string]int{}, changed: make(chan struct{}),
		archives: map[string][]byte{}}
	mux := http.NewServeMux()
	const prefix = "/api/v1/jobs/7/attempts/2"
	mux.HandleFunc("POST "+prefix+"/metrics", func(w http.ResponseWriter, r *http.Request) {
		var req apitypes.MetricsReport
		if !a.admit(w, r, "metrics") {
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Points) == 0 {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		a.record("metrics", func() { a.points = append(a.points, req.Points...) })
		_ = json.NewEncoder(w).Encode(apitypes.MetricsReportResult{Stored: len(req.Points)})
	})
	mux.HandleFunc("PUT "+prefix+"/outputs/{path...}", func(w http.ResponseWriter, r *http.Request) {
		if !a.admit(w, r, "outputs") {
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		p := r.PathValue("path")
		a.record("PUT "+p, func() { a.files[p] = b })
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"path": p, "size": len(b)})
	})
	mux.HandleFunc("POST "+prefix+"/checkpoints", func(w http.ResponseWriter, r *http.Request) {
		if !a.admit(w, r, "checkpoints") {
			return
		}
		var req apitypes.CheckpointComplete
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		a.record("complete "+req.Name, nil)
		_ = json.NewEncoder(w).Encode(map[string]any{"name": req.Name})
	})
	mux.HandleFunc("GET /api/v1/jobs/7/checkpoints", func(w http.ResponseWriter, r *http.Request) {
		if !a.admit(w, r, "list") {
			return
		}
		a.mu.Lock()
		l := apitypes.CheckpointList{Job: 7, Checkpoints: slices.Clone(a.kept)}
		a.mu.Unlock()
		a.record("list", nil)
		_ = json.NewEncoder(w).Encode(l)
	})
	mux.HandleFunc("GET /api/v1/jobs/7/checkpoints/{name}/archive", func(w http.ResponseWriter, r *http.Request) {
		if !a.admit(w, r, "archive") {
			return
		}
		name := r.PathValue("name")
		a.mu.Lock()
		b, ok := a.archives[name]
		a.mu.Unlock()
		a.record("archive "+name, nil)
		if !ok {
			http.Error(w, `{"error":{"code":"not_found","message":"no such checkpoint"}}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/x-tar")
		_, _ = w.Write(b)
	})
	mux.HandleFunc("POST "+prefix+"/resumed", func(w http.ResponseWriter, r *http.Request) {
		if !a.admit(w, r, "resumed") {
			return
		}
		var req apitypes.ResumeReport
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		wait := a.notStarted > 0
		if wait {
			a.notStarted--
		}
		a.mu.Unlock()
		if wait {
			a.record("not started", nil)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, `{"error":{"code":"not_started","message":"the server has not recorded the start of attempt 2 of job 7 yet"}}`)
			return
		}
		a.record("resumed "+req.Name+"|"+req.Note, nil)
		_ = json.NewEncoder(w).Encode(apitypes.ResumeRecorded{Name: req.Name})
	})
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

// admit checks the token and plays the failures set up for kind.
func (a *fakeAPI) admit(w http.ResponseWriter, r *http.Request, kind string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer "+token {
		a.badToken++
		http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
		return false
	}
	if a.fail[kind] > 0 {
		a.fail[kind]--
		a.calls = append(a.calls, "503 "+kind)
		http.Error(w, "try later", http.StatusServiceUnavailable)
		return false
	}
	if code := a.refuse[kind]; code != 0 {
		a.calls = append(a.calls, "refused "+kind)
		http.Error(w, `{"error":"no such thing"}`, code)
		return false
	}
	return true
}

func (a *fakeAPI) record(call string, fn func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, call)
	if fn != nil {
		fn()
	}
	close(a.changed)
	a.changed = make(chan struct{})
}

// waitCall waits until call has been recorded.
func (a *fakeAPI) waitCall(t *testing.T, call string) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		a.mu.Lock()
		ok, ch := slices.Contains(a.calls, call), a.changed
		a.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no %q call; calls %q", call, a.snapshot())
		}
	}
}

func (a *fakeAPI) snapshot() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.calls)
}

// agentProc is the agent running as a process.
type agentProc struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startAgent runs `trainyard agent -- argv...` with env (and PATH).
func startAgent(t *testing.T, env []string, argv ...string) *agentProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &agentProc{stdout: &syncBuffer{}, stderr: &syncBuffer{}}
	p.cmd = exec.Command(exe, append([]string{"--"}, argv...)...)
	p.cmd.Env = append([]string{mainEnv + "=1", "PATH=" + os.Getenv("PATH")}, env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})
	return p
}

// wait returns the agent's exit status.
func (p *agentProc) wait(t *testing.T) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(60 * time.Second):
		t.Fatalf("the agent did not exit; stdout %q stderr %q", p.stdout, p.stderr)
		return -1
	}
}

func (p *agentProc) waitOutput(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(p.stdout.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the agent's stdout %q (stderr %q)", s, p.stdout, p.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// jobEnv is the environment of job 7 attempt 2 reporting to api, with its
// outputs in out.
func jobEnv(api, out string) []string {
	return []string{"TRAINYARD_API=" + api, "TRAINYARD_JOB_TOKEN=" + token, "TRAINYARD_JOB_ID=7", "TRAINYARD_ATTEMPT=2",
		"TRAINYARD_OUTPUT_DIR=" + out, "TRAINYARD_CHECKPOINT_DIR=" + filepath.Join(out, "checkpoints")}
}

func TestExitStatus(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		argv []string
		want int
	}{
		{"success", []string{"sh", "-c", "echo hi"}, 0},
		{"code", []string{"sh", "-c", "exit 3"}, 3},
		{"signal", []string{"sh", "-c", "kill -KILL $$"}, 128 + 9},
		{"not found", []string{"no-such-command-anywhere"}, 127},
		{"not executable", []string{"/dev/null"}, 126},
		{"no command", nil, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := startAgent(t, nil, c.argv...)
			if got := p.wait(t); got != c.want {
				t.Errorf("exit status %d, want %d; stderr %q", got, c.want, p.stderr)
			}
		})
	}
}

// TestStdinClosedOutputPassed: the command reads an empty stdin, its
// stdout and stderr are the agent's.
func TestStdinClosedOutputPassed(t *testing.T) {
	t.Parallel()
	p := startAgent(t, nil, "sh", "-c", `n=$(wc -c); echo "out $n"; echo "err" >&2; printf 'last'`)
	p.cmd.Stdin = nil
	if got := p.wait(t); got != 0 {
		t.Fatalf("exit %d; stderr %q", got, p.stderr)
	}
	if got := p.stdout.String(); got != "out 0\nlast" {
		t.Errorf("stdout %q", got)
	}
	if !strings.Contains(p.stderr.String(), "err\n") {
		t.Errorf("stderr %q", p.stderr)
	}
}

func TestSignalForwarded(t *testing.T) {
	t.Parallel()
	t.Run("handled", func(t *testing.T) {
		t.Parallel()
		p := startAgent(t, nil, "sh", "-c", `trap 'echo got-$1TERM; exit 7' TERM; echo ready; while :; do sleep 0.05; done`)
		p.waitOutput(t, "ready")
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		if got := p.wait(t); got != 7 {
			t.Errorf("exit %d, want the command's 7; stdout %q stderr %q", got, p.stdout, p.stderr)
		}
		if !strings.Contains(p.stdout.String(), "got-TERM") {
			t.Errorf("the command did not get SIGTERM: %q", p.stdout)
		}
	})
	t.Run("group", func(t *testing.T) {
		t.Parallel()
		// The command's children get it too: it goes to the group. (A
		// shell's background job ignores SIGINT: SIGTERM here.)
		p := startAgent(t, nil, "sh", "-c", `sh -c 'trap "echo child-TERM; exit 0" TERM; echo ready; while :; do sleep 0.05; done' & c=$!; trap 'wait $c; exit 5' TERM; wait $c`)
		p.waitOutput(t, "ready")
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		code := p.wait(t)
		if !strings.Contains(p.stdout.String(), "child-TERM") || code != 5 {
			t.Errorf("the command's child did not get SIGTERM: %q (exit %d)", p.stdout, code)
		}
	})
	t.Run("killed", func(t *testing.T) {
		t.Parallel()
		p := startAgent(t, nil, "sh", "-c", `echo ready; while :; do sleep 0.05; done`)
		p.waitOutput(t, "ready")
		_ = p.cmd.Process.Signal(syscall.SIGINT)
		if got := p.wait(t); got != 128+2 {
			t.Errorf("exit %d, want 130 (SIGINT)", got)
		}
	})
}

// TestWarnSignals: every signal a spec may name for policy.warn is one
// the agent can send.
func TestWarnSignals(t *testing.T) {
	for _, name := range domain.WarnSignals {
		if w, err := parseWarn(name + "@1s"); err != nil || w.sig == 0 || w.name != name {
			t.Errorf("policy.warn's %s: %+v, %v", name, w, err)
		}
	}
	if w, err := parseWarn("SIGUSR2@1m"); err != nil || w.sig != syscall.SIGUSR2 || w.after != time.Minute {
		t.Errorf("SIGUSR2@1m: %+v, %v", w, err)
	}
}

// TestWarn: the advance warning (TRAINYARD_AGENT_WARN) reaches the
// command's group that long after the agent's start, never once a stop
// has begun; a malformed one is said and ignored.
func TestWarn(t *testing.T) {
	t.Parallel()
	t.Run("sent", func(t *testing.T) {
		t.Parallel()
		p := startAgent(t, []string{warnEnv + "=USR1@300ms"}, "sh", "-c",
			`sh -c 'trap "echo child-USR1; exit 0" USR1; while :; do sleep 0.05; done' & c=$!; trap 'wait $c; echo warned; exit 4' USR1; echo ready; wait $c`)
		if got := p.wait(t); got != 4 {
			t.Fatalf("exit %d, want 4 from the warning's handler; stdout %q stderr %q", got, p.stdout, p.stderr)
		}
		if out := p.stdout.String(); !strings.Contains(out, "child-USR1") || !strings.Contains(out, "warned") {
			t.Errorf("the command's group did not get SIGUSR1: %q", out)
		}
		if !strings.Contains(p.stderr.String(), "sending SIGUSR1 to sh before its timeout (policy.warn)") {
			t.Errorf("the agent did not say it warned: %q", p.stderr)
		}
	})
	t.Run("not after a stop", func(t *testing.T) {
		t.Parallel()
		// The stop comes well before the warning is due, and the command
		// runs on past when it was due.
		p := startAgent(t, []string{warnEnv + "=USR1@3s"}, "sh", "-c",
			`trap 'echo warned' USR1; trap 'echo term; i=0' TERM; echo ready; i=-100000; while [ $i -lt 80 ]; do sleep 0.05; i=$((i+1)); done; exit 0`)
		p.waitOutput(t, "ready")
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		if got := p.wait(t); got != 0 {
			t.Fatalf("exit %d; stdout %q stderr %q", got, p.stdout, p.stderr)
		}
		if out := p.stdout.String(); !strings.Contains(out, "term") || strings.Contains(out, "warned") {
			t.Errorf("stdout %q: want the stop's SIGTERM and no warning after it", out)
		}
	})
	t.Run("malformed", func(t *testing.T) {
		t.Parallel()
		p := startAgent(t, []string{warnEnv + "=BOGUS@1s"}, "sh", "-c", "exit 3")
		if got := p.wait(t); got != 3 {
			t.Errorf("exit %d, want the command's 3", got)
		}
		if !strings.Contains(p.stderr.String(), warnEnv+`: "BOGUS@1s": no signal "BOGUS"; no warning will be sent`) {
			t.Errorf("stderr %q does not say why no warning is sent", p.stderr)
		}
	})
}

// TestReports: progress lines become metrics, a completed checkpoint is
// reported while the command runs (its files, then its marker, then the
// complete call), and every other regular output once it has ended; no
// link is followed, no temporary file sent, the token never printed.
func TestReports(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	out := filepath.Join(t.TempDir(), "outputs")
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("not yours"), 0o644); err != nil {
		t.Fatal(err)
	}
	gate := filepath.Join(t.TempDir(), "gate")
	script := `set -e
ck="$TRAINYARD_CHECKPOINT_DIR"
echo 'trainyard: {"step": 1, "loss": 0.5}'
echo 'trainyard: {"step": 2, "loss": 0.25, "acc": 0.9}'
echo 'trainyard: not json'
echo 'plain line'
mkdir "$ck/step-2"
printf 'weights' > "$ck/step-2/weights.bin"
mkdir "$ck/step-2/sub"; printf 'opt' > "$ck/step-2/sub/opt.bin"
ln -s "$SECRET" "$ck/step-2/leak"
: > "$ck/step-2/.complete"
mkdir "$ck/half"; printf 'x' > "$ck/half/w.bin"
while [ ! -e "$GATE" ]; do sleep 0.05; done
printf 'single' > "$ck/one.pt"; : > "$ck/one.pt.complete"
echo 'trainyard: {"step": 3, "loss": 0.125}'
mkdir -p "$TRAINYARD_OUTPUT_DIR/model"
printf 'final' > "$TRAINYARD_OUTPUT_DIR/model/final.pt"
printf 'partial' > "$TRAINYARD_OUTPUT_DIR/model/final.pt.tmp"
printf 'partial' > "$TRAINYARD_OUTPUT_DIR/model/.tmp-x"
ln -s "$SECRET" "$TRAINYARD_OUTPUT_DIR/leak"
ln -s "$(dirname "$SECRET")" "$TRAINYARD_OUTPUT_DIR/leakdir"
mkfifo "$TRAINYARD_OUTPUT_DIR/fifo"
echo "token is $TRAINYARD_JOB_TOKEN" >&2
exit 4
`
	env := append(jobEnv(api.srv.URL, out), "SECRET="+secret, "GATE="+gate)
	p := startAgent(t, env, "sh", "-c", script)
	api.waitCall(t, "complete step-2") // while the command waits for the gate
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := p.wait(t); got != 4 {
		t.Errorf("exit %d, want 4; stderr %q", got, p.stderr)
	}

	api.mu.Lock()
	defer api.mu.Unlock()
	var steps []int64
	for _, pt := range api.points {
		steps = append(steps, pt.Step)
	}
	if !slices.Equal(steps, []int64{1, 2, 3}) || api.points[1].Metrics["acc"] != 0.9 || api.points[2].Metrics["loss"] != 0.125 {
		t.Errorf("points %+v, want steps 1, 2, 3", api.points)
	}
	want := map[string]string{
		"checkpoints/step-2/weights.bin": "weights",
		"checkpoints/step-2/sub/opt.bin": "opt",
		"checkpoints/step-2/.complete":   "",
		"checkpoints/one.pt":             "single",
		"checkpoints/one.pt.complete":    "",
		"model/final.pt":                 "final",
	}
	got := map[string]string{}
	for k, v := range api.files {
		got[k] = string(v)
	}
	if !mapsEqual(got, want) {
		t.Errorf("uploaded %q, want %q", got, want)
	}
	// Order: a checkpoint's data, then its marker, then the call.
	idx := func(c string) int { return slices.Index(api.calls, c) }
	if !(idx("PUT checkpoints/step-2/weights.bin") < idx("PUT checkpoints/step-2/.complete") &&
		idx("PUT checkpoints/step-2/.complete") < idx("complete step-2") &&
		idx("PUT checkpoints/one.pt") < idx("PUT checkpoints/one.pt.complete") &&
		idx("PUT checkpoints/one.pt.complete") < idx("complete one.pt")) {
		t.Errorf("calls out of order: %q", api.calls)
	}
	for _, c := range api.calls {
		if n := len(slices.DeleteFunc(slices.Clone(api.calls), func(o string) bool { return o != c })); n != 1 && c != "metrics" {
			t.Errorf("call %q made %d times: %q", c, n, api.calls)
		}
	}
	if api.badToken > 0 {
		t.Errorf("%d calls without the token", api.badToken)
	}
	if strings.Contains(p.stderr.String(), token) && !strings.Contains(p.stderr.String(), "token is "+token) {
		t.Errorf("the agent printed the token: %q", p.stderr)
	}
	if strings.Count(p.stderr.String(), token) > 1 {
		t.Errorf("the token is printed more than the job printed it: %q", p.stderr)
	}
	if !strings.Contains(p.stdout.String(), "plain line\n") {
		t.Errorf("stdout %q", p.stdout)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestRetries: a 503 is tried again until it gets through; a 4xx is
// logged once and not tried again, and neither changes the exit status.
func TestRetries(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	api.mu.Lock()
	api.fail["metrics"] = 2
	api.refuse["outputs"] = http.StatusNotFound
	api.mu.Unlock()
	out := filepath.Join(t.TempDir(), "outputs")
	p := startAgent(t, jobEnv(api.srv.URL, out), "sh", "-c",
		`echo 'trainyard: {"step": 5, "loss": 1}'; printf a > "$TRAINYARD_OUTPUT_DIR/a"; printf b > "$TRAINYARD_OUTPUT_DIR/b"`)
	if got := p.wait(t); got != 0 {
		t.Errorf("exit %d; stderr %q", got, p.stderr)
	}
	calls := api.snapshot()
	if want := []string{"503 metrics", "503 metrics", "metrics"}; !slices.Equal(slices.DeleteFunc(slices.Clone(calls), func(c string) bool {
		return !strings.HasSuffix(c, "metrics")
	}), want) {
		t.Errorf("calls %q, want %q among them", calls, want)
	}
	if n := strings.Count(strings.Join(calls, "\n"), "refused outputs"); n != 2 {
		t.Errorf("%d refused uploads, want 2 (one per file, none retried): %q", n, calls)
	}
	if n := strings.Count(p.stderr.String(), "404"); n != 2 { // logged once, counted once at the end
		t.Errorf("stderr mentions 404 %d times, want the first refusal and the count: %q", n, p.stderr)
	}
}

// TestNoAPI: without the API's environment the command runs as ever.
func TestNoAPI(t *testing.T) {
	t.Parallel()
	p := startAgent(t, nil, "sh", "-c", `echo 'trainyard: {"step": 1, "loss": 1}'; exit 9`)
	if got := p.wait(t); got != 9 {
		t.Errorf("exit %d", got)
	}
	if !strings.Contains(p.stderr.String(), "TRAINYARD_API is not set") {
		t.Errorf("stderr %q", p.stderr)
	}
}

// TestAPIDown: an API that never answers costs a bounded time, and the
// status is still the command's.
func TestAPIDown(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusBadGateway)
	}))
	t.Cleanup(srv.Close)
	out := filepath.Join(t.TempDir(), "out")
	cfg := configFromEnv(func(k string) string {
		for _, kv := range jobEnv(srv.URL, out) {
			if v, ok := strings.CutPrefix(kv, k+"="); ok {
				return v
			}
		}
		return ""
	})
	cfg.retryFor = time.Second
	var stderr syncBuffer
	start := time.Now()
	code := run(cfg, []string{"sh", "-c", `echo 'trainyard: {"step": 1, "loss": 1}'; printf x > ` + out + `/a; printf y > ` + out + `/b; exit 3`}, nil, io.Discard, &stderr)
	if code != 3 {
		t.Errorf("exit %d", code)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
	if !strings.Contains(stderr.String(), "no answer") {
		t.Errorf("stderr %q", stderr.String())
	}
}

func TestLineSplitter(t *testing.T) {
	var got []string
	s := lineSplitter{fn: func(b []byte) { got = append(got, string(b)) }}
	long := strings.Repeat("x", maxLine+1)
	for _, chunk := range []string{"a\nb", "c\r\n", long[:10], long[10:] + "\nd", "\n", "tail"} {
		s.feed([]byte(chunk))
	}
	s.end()
	if want := []string{"a", "bc", "d", "tail"}; !slices.Equal(got, want) {
		t.Errorf("lines %q, want %q", got, want)
	}
}
