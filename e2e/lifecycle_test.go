package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

func TestSmokeJob(t *testing.T) {
	s := startServer(t, serverOpts{})
	out := s.mustCLI("submit", filepath.Join(repoRoot(), "examples", "smoke.yaml"))
	id, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatalf("submit printed %q, want the new job id", out)
	}
	// --follow streams the log until the job ends.
	follow := s.mustCLI("logs", "-f", strconv.FormatInt(id, 10))
	job := s.waitState(id, time.Minute, "succeeded", "failed")
	if job.State != "succeeded" {
		t.Fatalf("smoke job ended %s (%s: %s)", job.State, job.Reason, job.Message)
	}
	if !strings.Contains(follow, `trainyard: {"step": 40`) {
		t.Errorf("followed log lacks the last progress line:\n%s", follow)
	}
	logs := s.mustCLI("logs", strconv.FormatInt(id, 10))
	if logs != follow {
		t.Errorf("logs after the end differ from the followed stream")
	}
	if tail := s.mustCLI("logs", "--tail", "1", strconv.FormatInt(id, 10)); strings.Count(tail, "\n") != 1 {
		t.Errorf("--tail 1 printed %q", tail)
	}

	var shown apitypes.Job
	if err := json.Unmarshal([]byte(s.mustCLI("show", "-o", "json", strconv.FormatInt(id, 10))), &shown); err != nil {
		t.Fatal(err)
	}
	var path []string
	for _, tr := range shown.Transitions {
		path = append(path, tr.To)
		if tr.At.IsZero() || tr.Actor == "" {
			t.Errorf("transition %+v lacks time or actor", tr)
		}
	}
	if want := []string{"queued", "starting", "running", "succeeded"}; !slices.Equal(path, want) {
		t.Errorf("transitions = %v, want %v", path, want)
	}
	if len(shown.Attempts) != 1 || shown.Attempts[0].ExitCode == nil || *shown.Attempts[0].ExitCode != 0 || shown.Attempts[0].State != "succeeded" {
		t.Fatalf("attempts = %+v, want one with exit code 0", shown.Attempts)
	}
	if u := shown.Attempts[0].Usage; u == nil || u.MaxRSSBytes < 1<<20 || u.CPUSeconds <= 0 {
		t.Errorf("attempt usage = %+v, want the trainer's CPU time and peak memory", u)
	}
	var spec map[string]any
	if err := json.Unmarshal(shown.Spec, &spec); err != nil || spec["name"] != "smoke" {
		t.Errorf("snapshot = %s (%v)", shown.Spec, err)
	}
	if !strings.HasPrefix(shown.SpecHash, "sha256:") {
		t.Errorf("spec hash = %q", shown.SpecHash)
	}
	want := filepath.Join(s.data, "artifacts", "default", "smoke", strconv.FormatInt(id, 10))
	if shown.OutputDir != want {
		t.Errorf("output dir = %q, want %q", shown.OutputDir, want)
	}
	if _, err := os.Stat(filepath.Join(shown.OutputDir, "model.json")); err != nil {
		t.Errorf("no model in the output directory: %v", err)
	}
}

func TestBadEntrypoint(t *testing.T) {
	s := startServer(t, serverOpts{})
	// Even a re-entrant job with retries left is not retried: the program
	// will not appear by itself.
	id := strings.TrimSpace(s.mustCLI("submit", filepath.Join(repoRoot(), "examples", "bad-entrypoint.yaml"),
		"--set", "policy.reentrant=true", "--set", "policy.retries=2"))
	n, _ := strconv.ParseInt(id, 10, 64)
	job := s.waitState(n, 30*time.Second, "succeeded", "failed")
	if job.State != "failed" || job.Reason != "EntrypointNotFound" || !strings.Contains(job.Message, "trainyard-no-such-program") {
		t.Fatalf("job = %s %s %q, want failed EntrypointNotFound naming the program", job.State, job.Reason, job.Message)
	}
	if full := s.job(n); len(full.Attempts) != 1 {
		t.Fatalf("%d attempts, want 1 (no retry)", len(full.Attempts))
	}
	why := s.mustCLI("why", id)
	if !strings.Contains(why, "EntrypointNotFound") {
		t.Errorf("why does not name the reason:\n%s", why)
	}
}

func TestRetriesOnlyForReentrantJobs(t *testing.T) {
	s := startServer(t, serverOpts{})
	job := s.submit(`name: flaky
entrypoint: 'echo "attempt $TRAINYARD_ATTEMPT"; exit 3'
policy: {retries: 2, reentrant: true}
`)
	final := s.waitState(job.ID, time.Minute, "succeeded", "failed")
	if final.State != "failed" {
		t.Fatalf("state %s, want failed", final.State)
	}
	full := s.job(job.ID)
	if len(full.Attempts) != 3 {
		t.Fatalf("%d attempts, want 3", len(full.Attempts))
	}
	for i, a := range full.Attempts {
		if a.ExitCode == nil || *a.ExitCode != 3 || a.State != "failed" {
			t.Errorf("attempt %d = %+v, want failed with exit code 3", i+1, a)
		}
		logs := s.mustCLI("logs", "--attempt", strconv.Itoa(i+1), strconv.FormatInt(job.ID, 10))
		if logs != fmt.Sprintf("attempt %d\n", i+1) {
			t.Errorf("attempt %d log = %q", i+1, logs)
		}
	}

	why := s.mustCLI("why", strconv.FormatInt(job.ID, 10))
	for _, want := range []string{"failed (ExitCode)", "attempt 3 exited with code 3", "stdout | attempt 3", "3 attempts so far"} {
		if !strings.Contains(why, want) {
			t.Errorf("why lacks %q:\n%s", want, why)
		}
	}

	// Without reentrant, retries are refused at submit.
	spec := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(spec, []byte("name: x\nentrypoint: [true]\npolicy: {retries: 2}\n"), 0o644)
	_, errOut, code := s.cli("submit", spec)
	if code != 2 || !strings.Contains(errOut, "policy.retries") || !strings.Contains(errOut, "reentrant") {
		t.Fatalf("submit retries without reentrant: exit %d, stderr %q", code, errOut)
	}
}

func TestTimeoutKillsTheTree(t *testing.T) {
	s := startServer(t, serverOpts{})
	pids := filepath.Join(sharedDir(t), "pids")
	job := s.submit(fmt.Sprintf(`name: slow
entrypoint: 'sleep 300 & echo $! >> %[1]s; sh -c "sleep 301 & echo \$! >> %[1]s; wait" & echo $$ >> %[1]s; wait'
policy: {timeout: 1s}
`, pids))
	final := s.waitState(job.ID, time.Minute, "succeeded", "failed")
	if final.State != "failed" || final.Reason != "Timeout" {
		t.Fatalf("job %s %s, want failed Timeout", final.State, final.Reason)
	}
	if a := s.job(job.ID).Attempts; len(a) != 1 || a[0].State != "timed_out" {
		t.Fatalf("attempts = %+v, want one timed_out", a)
	}
	assertAllDead(t, pids, 3)
}

func assertAllDead(t *testing.T, pidFile string, want int) {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(string(b))
	if len(fields) < want {
		t.Fatalf("job recorded %d pids, want %d", len(fields), want)
	}
	for _, f := range fields {
		pid, _ := strconv.Atoi(f)
		// The kill is synchronous in the supervisor; allow the kernel a moment to reap.
		waitFor(t, 5*time.Second, fmt.Sprintf("process %d to die", pid), func() bool { return !alive(pid) })
	}
}

func TestCancelQueuedAndRunning(t *testing.T) {
	s := startServer(t, serverOpts{cpus: 1})
	pids := filepath.Join(sharedDir(t), "pids")
	running := s.submit(fmt.Sprintf("name: long\nentrypoint: 'sleep 300 & echo $! >> %[1]s; echo $$ >> %[1]s; wait'\n", pids))
	s.waitState(running.ID, 30*time.Second, "running")
	queued := s.submit("name: waiting\nentrypoint: [sleep, '300']\n")
	waitFor(t, 10*time.Second, "queued job to get a pending reason", func() bool {
		j := s.job(queued.ID)
		return j.Reason != "Submitted" && strings.Contains(j.Message, "1 of 1 CPUs")
	})

	out := s.mustCLI("cancel", strconv.FormatInt(queued.ID, 10), "--reason", "not needed")
	if !strings.Contains(out, strconv.FormatInt(queued.ID, 10)) {
		t.Errorf("cancel printed %q", out)
	}
	if j := s.job(queued.ID); j.State != "canceled" || len(j.Attempts) != 0 || !strings.Contains(j.Message, "not needed") {
		t.Errorf("queued job after cancel: %s, %d attempts, %q", j.State, len(j.Attempts), j.Message)
	}

	waitFor(t, 10*time.Second, "pids recorded", func() bool {
		b, _ := os.ReadFile(pids)
		return len(strings.Fields(string(b))) == 2
	})
	s.mustCLI("cancel", strconv.FormatInt(running.ID, 10))
	j := s.waitState(running.ID, 30*time.Second, "canceled", "failed", "succeeded")
	if j.State != "canceled" || j.Reason != "CanceledByUser" {
		t.Fatalf("running job after cancel: %s %s", j.State, j.Reason)
	}
	if a := s.job(running.ID).Attempts; a[0].State != "canceled" {
		t.Errorf("attempt state %s, want canceled", a[0].State)
	}
	assertAllDead(t, pids, 2)
}

func TestIdempotentSubmit(t *testing.T) {
	s := startServer(t, serverOpts{})
	spec := filepath.Join(t.TempDir(), "s.yaml")
	os.WriteFile(spec, []byte("name: once\nentrypoint: [true]\n"), 0o644)
	a := strings.TrimSpace(s.mustCLI("submit", "--idempotency-key", "k-1", spec))
	b := strings.TrimSpace(s.mustCLI("submit", "--idempotency-key", "k-1", spec))
	c := strings.TrimSpace(s.mustCLI("submit", "--idempotency-key", "k-2", spec))
	if a != b || a == c {
		t.Fatalf("ids %s %s %s: same key must return the same job, another key a new one", a, b, c)
	}
}

func TestGPUsFromDeclaredInventory(t *testing.T) {
	s := startServer(t, serverOpts{cpus: 4, gpus: 4})
	a := s.submit("name: g2\nresources: {gpus: 2}\nentrypoint: 'echo gpus=$CUDA_VISIBLE_DEVICES; sleep 30'\n")
	b := s.submit("name: g1\nresources: {gpus: 2}\nentrypoint: 'echo gpus=$CUDA_VISIBLE_DEVICES'\n")
	s.waitState(b.ID, 30*time.Second, "succeeded")
	if got := s.mustCLI("logs", strconv.FormatInt(b.ID, 10)); got != "gpus=2,3\n" {
		t.Errorf("second job saw %q, want gpus=2,3", got)
	}
	s.waitState(a.ID, 30*time.Second, "running")
	// A request that can never fit is refused at submit, not left pending.
	spec, _ := json.Marshal("name: g8\nresources: {gpus: 8}\nentrypoint: [true]\n")
	var e apitypes.Error
	if code := s.api("POST", "/api/v1/jobs", apitypes.SubmitRequest{Spec: spec}, &e); code != 400 ||
		len(e.Error.Fields) == 0 || e.Error.Fields[0].Path != "resources.gpus" || !strings.Contains(e.Error.Fields[0].Message, "4") {
		t.Errorf("oversized submit: status %d, %+v; want 400 on resources.gpus naming the 4 GPUs there are", code, e)
	}
}
