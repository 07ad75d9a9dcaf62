package kubernetes_test

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"trainyard/internal/agent"
	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/executor/kubernetes"
	"trainyard/internal/executor/kubernetes/kubetest"
	"trainyard/internal/executor/local"
	"trainyard/internal/logs"
)

// The test binary is the agent's binary in the process node's pods: the
// test puts it where the init container would copy trainyard
// (Agent.Dir/bin/trainyard), and the pod's command runs it as
// "trainyard agent -- ...", which lands here before any test starts.
func init() {
	if len(os.Args) > 1 && filepath.Base(os.Args[0]) == "trainyard" && os.Args[1] == "agent" {
		os.Exit(agent.Main(os.Args[2:]))
	}
}

// agentAPI records what a job's agent reports: the three endpoints, for
// any job, with the one token it accepts.
type agentAPI struct {
	token string
	srv   *httptest.Server

	mu       sync.Mutex
	calls    []string // "<job>/<attempt> metrics|PUT <path>|complete <name>"
	points   []apitypes.MetricsStep
	files    map[string][]byte
	badToken int
	changed  chan struct{}
}

func newAgentAPI(t *testing.T, token string) *agentAPI {
	a := &agentAPI{token: token, files: map[string][]byte{}, changed: make(chan struct{})}
	mux := http.NewServeMux()
	const prefix = "/api/v1/jobs/{id}/attempts/{n}"
	ok := func(w http.ResponseWriter, r *http.Request) bool {
		if r.Header.Get("Authorization") != "Bearer "+a.token {
			a.mu.Lock()
			a.badToken++
			a.mu.Unlock()
			http.Error(w, `{"error":"unauthorized"}`, http.StatusUnauthorized)
			return false
		}
		return true
	}
	mux.HandleFunc("POST "+prefix+"/metrics", func(w http.ResponseWriter, r *http.Request) {
		var req apitypes.MetricsReport
		if !ok(w, r) {
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		a.record(r, "metrics", func() { a.points = append(a.points, req.Points...) })
		_ = json.NewEncoder(w).Encode(apitypes.MetricsReportResult{Stored: len(req.Points)})
	})
	mux.HandleFunc("PUT "+prefix+"/outputs/{path...}", func(w http.ResponseWriter, r *http.Request) {
		if !ok(w, r) {
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		p := r.PathValue("path")
		a.record(r, "PUT "+p, func() { a.files[p] = b })
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"path": p, "size": len(b)})
	})
	mux.HandleFunc("POST "+prefix+"/checkpoints", func(w http.ResponseWriter, r *http.Request) {
		var req apitypes.CheckpointComplete
		if !ok(w, r) {
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		a.record(r, "complete "+req.Name, nil)
		_ = json.NewEncoder(w).Encode(map[string]any{"name": req.Name})
	})
	// Resuming: the job's checkpoints are those uploaded (any job's, as
	// the paths are), listed with their digests and served as the
	// server's archive route serves them.
	mux.HandleFunc("GET /api/v1/jobs/{id}/checkpoints", func(w http.ResponseWriter, r *http.Request) {
		if !ok(w, r) {
			return
		}
		a.record(r, "list", nil)
		a.mu.Lock()
		defer a.mu.Unlock()
		var l apitypes.CheckpointList
		for _, name := range a.checkpointNames() {
			files := a.checkpointFiles(name)
			var size int64
			for _, b := range files {
				size += int64(len(b))
			}
			l.Checkpoints = append(l.Checkpoints, apitypes.Checkpoint{Name: name, Size: size, Files: len(files), SHA256: dirDigest(files)})
		}
		_ = json.NewEncoder(w).Encode(l)
	})
	mux.HandleFunc("GET /api/v1/jobs/{id}/checkpoints/{name}/archive", func(w http.ResponseWriter, r *http.Request) {
		if !ok(w, r) {
			return
		}
		name := r.PathValue("name")
		a.record(r, "archive "+name, nil)
		a.mu.Lock()
		defer a.mu.Unlock()
		files := a.checkpointFiles(name)
		if len(files) == 0 {
			http.Error(w, `{"error":{"code":"not_found","message":"no such checkpoint"}}`, http.StatusNotFound)
			return
		}
		tw := tar.NewWriter(w)
		for _, rel := range slices.Sorted(maps.Keys(files)) {
			_ = tw.WriteHeader(&tar.Header{Name: name + "/" + rel, Mode: 0o644, Size: int64(len(files[rel])), Typeflag: tar.TypeReg})
			_, _ = tw.Write(files[rel])
		}
		_ = tw.Close()
	})
	mux.HandleFunc("POST "+prefix+"/resumed", func(w http.ResponseWriter, r *http.Request) {
		var req apitypes.ResumeReport
		if !ok(w, r) {
			return
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		a.record(r, "resumed "+req.Name+"|"+req.Note, nil)
		_ = json.NewEncoder(w).Encode(apitypes.ResumeRecorded{Name: req.Name})
	})
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

// checkpointNames are the directory checkpoints uploaded; a.mu is held.
func (a *agentAPI) checkpointNames() []string {
	var names []string
	for p := range a.files {
		if rest, ok := strings.CutPrefix(p, "checkpoints/"); ok {
			if name, _, ok := strings.Cut(rest, "/"); ok && !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	slices.Sort(names)
	return names
}

// checkpointFiles are the files of the uploaded directory checkpoint
// name, by path below it; a.mu is held.
func (a *agentAPI) checkpointFiles(name string) map[string][]byte {
	files := map[string][]byte{}
	for p, b := range a.files {
		if rel, ok := strings.CutPrefix(p, "checkpoints/"+name+"/"); ok {
			files[rel] = b
		}
	}
	return files
}

// dirDigest is a directory checkpoint's digest by the server's rule
// (executor.Outputs.Digest): the lines "<sha256>  <size>  <path>" of its
// files, in order of path, its marker left out.
func dirDigest(files map[string][]byte) string {
	var b strings.Builder
	for _, rel := range slices.Sorted(maps.Keys(files)) {
		if rel == domain.CheckpointMarker {
			continue
		}
		sum := sha256.Sum256(files[rel])
		fmt.Fprintf(&b, "%s  %d  %s\n", hex.EncodeToString(sum[:]), len(files[rel]), rel)
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}

func (a *agentAPI) record(r *http.Request, call string, fn func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, r.PathValue("id")+"/"+r.PathValue("n")+" "+call)
	if fn != nil {
		fn()
	}
	close(a.changed)
	a.changed = make(chan struct{})
}

func (a *agentAPI) waitCall(t *testing.T, call string) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		a.mu.Lock()
		found, ch := slices.Contains(a.calls, call), a.changed
		calls := slices.Clone(a.calls)
		a.mu.Unlock()
		if found {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no call %q; calls %q", call, calls)
		}
	}
}

// TestAgentReportsThroughTheAPI: the executor's pod, run by a process
// node as its main container's command and environment, runs the job
// under the agent, whose reports reach the API: the progress lines as
// metrics, a checkpoint the job completes while it runs (its files, its
// marker, then the complete call), and its outputs once it has ended,
// without following the link the job planted.
// agentWorld is an executor with the agent (the test binary, where the
// init container would put it: Dir/bin/trainyard, Dir returned) in
// namespace ns, on a process node of its own in pool, the agent
// reporting to apiURL.
func agentWorld(t *testing.T, c *kubetest.Cluster, ns, pool, apiURL string) (*executortest.Harness, string) {
	t.Helper()
	c.ProcessNode(t, kubetest.Node{Name: "node-" + pool, CPUs: "8", Memory: "16Gi",
		Labels: map[string]string{"trainyard.io/test-pool": pool}})
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(exe, filepath.Join(dir, "bin", "trainyard")); err != nil {
		t.Fatal(err)
	}
	runs := logs.Layout{Root: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ex, err := kubernetes.New(ctx, kubernetes.Config{REST: c.Config, Namespace: ns, Image: "example.com/trainer:1",
		NodeSelector: map[string]string{"trainyard.io/test-pool": pool}, Files: local.NewReader(runs.Root),
		Agent: kubernetes.AgentConfig{Image: "example.com/trainyard:1", Dir: dir, APIURL: apiURL}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ex.Close() })
	return executortest.NewHarness(t, layoutExec{Executor: ex, runs: runs}), dir
}

// TestAgentSendsTheWarning: with the agent, policy.warn's signal reaches
// the job's processes when it is due, before the executor stops the
// attempt at its timeout.
func TestAgentSendsTheWarning(t *testing.T) {
	c := kubetest.Shared(t)
	h, _ := agentWorld(t, c, c.Namespace(t), "agent-warn", "")
	p := executortest.Program{OnWarn: "warned", OnTerm: "terminated", Steps: []executortest.Step{{Out: "ready"}, {Block: true}}}
	l := h.Run(t, p, func(l *executor.Launch) {
		l.Timeout = 3 * time.Second
		l.Warn = executor.Warn{Signal: "USR1", Before: 2 * time.Second}
		l.Grace = 300 * time.Millisecond
	})
	checkExit(t, h.Wait(t, l.Ref, executor.Exited), domain.AttemptTimedOut, domain.ReasonTimeout, nil)
	lines := h.LogLines(t, l.Ref, executor.LogQuery{})
	job := slices.DeleteFunc(slices.Clone(lines), func(s string) bool { return strings.HasPrefix(s, "trainyard agent: ") })
	if !slices.Equal(job, []string{"ready", "warned", "terminated"}) || !slices.Contains(lines, "trainyard agent: sending SIGUSR1 to /bin/sh before its timeout (policy.warn)") {
		t.Errorf("log %q: want the warning (said by the agent) before the timeout", lines)
	}
}

func TestAgentReportsThroughTheAPI(t *testing.T) {
	c := kubetest.Shared(t)
	const token = "tyj_agent-test-token-0123"
	api := newAgentAPI(t, token)
	ns := c.Namespace(t)
	h, dir := agentWorld(t, c, ns, "agent", api.srv.URL)

	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("the server's secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	gate := filepath.Join(t.TempDir(), "gate")
	script := `set -e
out="$TRAINYARD_OUTPUT_DIR"; ck="$TRAINYARD_CHECKPOINT_DIR"
echo 'trainyard: {"step": 100, "loss": 0.5}'
echo 'plain output'
echo 'trainyard: {"step": 200, "loss": 0.25, "lr": 0.001}'
mkdir "$ck/step-200"
printf 'weights-200' > "$ck/step-200/weights.bin"
ln -s "$SECRET" "$ck/step-200/stolen"
: > "$ck/step-200/.complete"
while [ ! -e "$GATE" ]; do sleep 0.05; done
echo 'trainyard: {"step": 300, "loss": 0.125}'
mkdir -p "$out/model"
printf 'final-model' > "$out/model/final.pt"
printf 'half' > "$out/model/final.pt.tmp"
ln -s "$SECRET" "$out/stolen"
env | grep '^TRAINYARD_\(OUTPUT_DIR\|CHECKPOINT_DIR\|API\)=' | sort > "$out/env.txt"
`
	l := h.Launch(t, []string{"/bin/sh", "-c", script}, func(l *executor.Launch) {
		l.Resources = domain.Resources{CPUs: 1, Memory: 1 << 30, Nodes: 1}
		l.Env = append(l.Env, "TRAINYARD_JOB_ID="+strconv.FormatInt(l.JobID, 10), "TRAINYARD_ATTEMPT="+strconv.Itoa(l.Attempt),
			"TRAINYARD_JOB_TOKEN="+token, "TRAINYARD_API=http://the-server-itself.invalid:7070",
			"SECRET="+secret, "GATE="+gate)
		l.Redact = append(l.Redact, token)
	})
	ref := strconv.FormatInt(l.JobID, 10) + "/" + strconv.Itoa(l.Attempt) + " "

	// The checkpoint is reported while the job runs.
	api.waitCall(t, ref+"complete step-200")
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	checkExit(t, h.Wait(t, l.Ref, executor.Exited), domain.AttemptSucceeded, domain.ReasonCompleted, intp(0))
	api.waitCall(t, ref+"PUT env.txt") // the agent's last uploads come before its exit

	// The Job the executor created is the one that ran: the agent's
	// init container and volume, its command around the job's.
	job, err := c.Client(t).BatchV1().Jobs(ns).Get(context.Background(), name(l.Ref), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := job.Spec.Template.Spec
	if len(spec.InitContainers) != 1 || spec.InitContainers[0].Image != "example.com/trainyard:1" || len(spec.Volumes) != 1 {
		t.Errorf("pod spec: init containers %+v, volumes %+v", spec.InitContainers, spec.Volumes)
	}
	if cmd := spec.Containers[0].Command; len(cmd) < 4 || cmd[0] != filepath.Join(dir, "bin", "trainyard") || cmd[1] != "agent" || cmd[2] != "--" {
		t.Errorf("command %q", cmd)
	}

	api.mu.Lock()
	if api.badToken > 0 {
		t.Errorf("%d calls without the job token", api.badToken)
	}
	var steps []int64
	for _, p := range api.points {
		steps = append(steps, p.Step)
	}
	if !slices.Equal(steps, []int64{100, 200, 300}) || api.points[1].Metrics["lr"] != 0.001 || api.points[2].Metrics["loss"] != 0.125 {
		t.Errorf("metrics %+v, want steps 100, 200, 300", api.points)
	}
	got := map[string]string{}
	for k, v := range api.files {
		got[k] = string(v)
	}
	want := map[string]string{
		"checkpoints/step-200/weights.bin": "weights-200",
		"checkpoints/step-200/.complete":   "",
		"model/final.pt":                   "final-model",
		"env.txt": "TRAINYARD_API=" + api.srv.URL + "\n" +
			"TRAINYARD_CHECKPOINT_DIR=" + filepath.Join(dir, "outputs", "checkpoints") + "\n" +
			"TRAINYARD_OUTPUT_DIR=" + filepath.Join(dir, "outputs") + "\n",
	}
	if len(got) != len(want) {
		t.Errorf("uploaded %d files %q, want %d", len(got), slices.Sorted(maps.Keys(got)), len(want))
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("upload %s = %q (uploaded: %v), want %q", k, g, ok, v)
		}
	}
	for k, v := range got {
		if strings.Contains(v, "the server's secret") || strings.Contains(k, "stolen") {
			t.Errorf("the planted link was followed: %s = %q", k, v)
		}
	}
	idx := func(c string) int { return slices.Index(api.calls, ref+c) }
	if !(idx("PUT checkpoints/step-200/weights.bin") < idx("PUT checkpoints/step-200/.complete") &&
		idx("PUT checkpoints/step-200/.complete") < idx("complete step-200")) {
		t.Errorf("a checkpoint's data, then its marker, then the complete call; got %q", api.calls)
	}
	api.mu.Unlock()
	// The job's stdout is the pod's log, progress lines included.
	if lines := h.LogLines(t, l.Ref, executor.LogQuery{}); !slices.Contains(lines, "plain output") ||
		!slices.Contains(lines, `trainyard: {"step": 100, "loss": 0.5}`) {
		t.Errorf("log %q", lines)
	}

	// A retry: attempt 2's pod starts with an empty emptyDir (this
	// process node shares the directory: emptied here), and its agent
	// fetches the checkpoint attempt 1 registered, verifies its digest and
	// hands it to the job as TRAINYARD_RESUME_FROM, reports it, and does
	// not upload it again.
	if err := os.RemoveAll(filepath.Join(dir, "outputs")); err != nil {
		t.Fatal(err)
	}
	api.mu.Lock()
	sum := dirDigest(api.checkpointFiles("step-200"))
	api.mu.Unlock()
	resume := `set -e
[ "$TRAINYARD_RESUME_FROM" = "$TRAINYARD_CHECKPOINT_DIR/step-200" ] || { echo "TRAINYARD_RESUME_FROM=[$TRAINYARD_RESUME_FROM]" >&2; exit 3; }
cat "$TRAINYARD_RESUME_FROM/weights.bin" > "$TRAINYARD_OUTPUT_DIR/resumed.txt"
`
	l2 := h.Launch(t, []string{"/bin/sh", "-c", resume}, func(l2 *executor.Launch) {
		l2.Ref = executor.Ref{JobID: l.JobID, Attempt: 2}
		l2.Resources = l.Resources
		l2.Env = append(l2.Env, "TRAINYARD_JOB_ID="+strconv.FormatInt(l.JobID, 10), "TRAINYARD_ATTEMPT=2",
			"TRAINYARD_JOB_TOKEN="+token, "TRAINYARD_RESUME_FROM=/stale")
		l2.Redact = append(l2.Redact, token)
		l2.Resume = []executor.ResumeFrom{{Name: "step-200", SHA256: sum}}
	})
	ref2 := strconv.FormatInt(l.JobID, 10) + "/2 "
	ev := h.Wait(t, l2.Ref, executor.Exited)
	checkExit(t, ev, domain.AttemptSucceeded, domain.ReasonCompleted, intp(0))
	if t.Failed() {
		t.Logf("attempt 2's log: %q", h.LogLines(t, l2.Ref, executor.LogQuery{Timestamps: true}))
	}
	api.waitCall(t, ref2+"PUT resumed.txt")
	api.waitCall(t, ref2+"resumed step-200|")
	api.mu.Lock()
	defer api.mu.Unlock()
	if got := string(api.files["resumed.txt"]); got != "weights-200" {
		t.Errorf("the job read %q from the checkpoint it resumed from, want weights-200", got)
	}
	for _, c := range api.calls {
		if strings.HasPrefix(c, ref2+"PUT checkpoints/") || strings.HasPrefix(c, ref2+"complete ") {
			t.Errorf("attempt 2 reported the checkpoint it fetched as new: %q", c)
		}
	}
}
