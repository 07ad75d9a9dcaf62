package local

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
)

// checkRig launches attempts whose environment check counts its runs in a
// file the test owns, outside every attempt's directories.
type checkRig struct {
	h       *executortest.Harness
	clock   *clock.Fake
	counter string
	bin     string // on the check's PATH; holds ty-check, the counting check
	exit    string // the check's exit status
}

func newCheckRig(t *testing.T, ttl time.Duration, cache string) *checkRig {
	t.Helper()
	dir := t.TempDir()
	r := &checkRig{clock: clock.NewFake(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)),
		counter: filepath.Join(dir, "check-runs"), bin: filepath.Join(dir, "bin"), exit: "0"}
	if err := os.MkdirAll(r.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\necho \"$PWD ${JOB_SECRET:-none} ${ENV_VAR:-unset}\" >> " + r.counter + "\nexit ${CHECK_EXIT:-0}\n"
	if err := os.WriteFile(filepath.Join(r.bin, "ty-check"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r.restart(t, ttl, cache)
	return r
}

// restart starts a new executor (as a restarted server would).
func (r *checkRig) restart(t *testing.T, ttl time.Duration, cache string) {
	r.h = executortest.NewHarness(t, newExecWith(t, func(c *Config) {
		c.EnvCheckTTL, c.EnvCheckCache, c.Now = ttl, cache, r.clock.Now
	}))
}

// run launches argv in the environment named ref with digest and waits
// for its end; it returns the launch and its Started event (zero when it
// did not start).
func (r *checkRig) run(t *testing.T, ref, digest string, argv ...string) (executor.Launch, executor.Event, executor.Event) {
	t.Helper()
	if len(argv) == 0 {
		argv = []string{"true"}
	}
	l := r.h.Launch(t, argv, func(l *executor.Launch) {
		l.Check = []string{"ty-check"}
		l.CheckEnv = []string{"PATH=" + r.bin + ":/usr/bin:/bin", "ENV_VAR=from-env", "CHECK_EXIT=" + r.exit}
		l.EnvRef, l.EnvDigest = ref, digest
		l.Env = append(l.Env, "JOB_SECRET=s3cret-value")
	})
	end := r.h.Wait(t, l.Ref, executor.Exited)
	var started executor.Event
	for _, ev := range r.h.Events(l.Ref) {
		if ev.Kind == executor.Started {
			started = ev
		}
	}
	return l, started, end
}

// runs is how often the check ran so far.
func (r *checkRig) runs(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(r.counter)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

func logOf(t *testing.T, l executor.Launch) string {
	t.Helper()
	b, err := os.ReadFile(l.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestEnvCheckRunsOncePerVersionUntilTheTTL(t *testing.T) {
	r := newCheckRig(t, time.Hour, "")
	first, started, end := r.run(t, "py3@1", "sha256:one")
	if end.State != domain.AttemptSucceeded || r.runs(t) != 1 {
		t.Fatalf("first attempt ended %s (%s) with %d check runs; want success after one", end.State, end.Message, r.runs(t))
	}
	if started.CheckNote != "" || strings.Contains(logOf(t, first), "not run again") {
		t.Errorf("the first attempt ran its check but says it skipped it: %q", started.CheckNote)
	}
	// The check ran in its own environment, in /, without the job's variables.
	if b, _ := os.ReadFile(r.counter); string(b) != "/ none from-env\n" {
		t.Errorf("the check ran as %q; want \"/ none from-env\" (directory /, none of the job's variables, the environment's)", b)
	}

	// Later attempts of the same version on this node skip it, and say so.
	const want = "environment check py3@1 passed on node "
	for i := range 3 {
		r.clock.Advance(10 * time.Minute)
		l, started, end := r.run(t, "py3@1", "sha256:one")
		if end.State != domain.AttemptSucceeded {
			t.Fatalf("attempt %d ended %s: %s", i+2, end.State, end.Message)
		}
		if !strings.HasPrefix(started.CheckNote, want) || !strings.Contains(started.CheckNote, "at 2026-03-01 12:00:00 UTC; not run again until 2026-03-01 13:00:00 UTC") {
			t.Errorf("Started.CheckNote = %q; want it to say when the check passed and until when it is not run", started.CheckNote)
		}
		if log := logOf(t, l); !strings.Contains(log, want) {
			t.Errorf("the log does not say the check was skipped:\n%s", log)
		}
	}
	if n := r.runs(t); n != 1 {
		t.Fatalf("the check ran %d times over 4 attempts of one version; want once", n)
	}

	// Past the TTL it runs again, once.
	r.clock.Advance(31 * time.Minute) // 1h01m after the pass
	if _, started, _ := r.run(t, "py3@1", "sha256:one"); started.CheckNote != "" || r.runs(t) != 2 {
		t.Errorf("after the TTL: %d runs, note %q; want the check run again", r.runs(t), started.CheckNote)
	}
	r.run(t, "py3@1", "sha256:one")
	if n := r.runs(t); n != 2 {
		t.Errorf("right after a fresh pass the check ran again (%d runs)", n)
	}

	// A new version (another digest) runs its own check.
	if _, started, _ := r.run(t, "py3@2", "sha256:two"); started.CheckNote != "" || r.runs(t) != 3 {
		t.Errorf("a new version: %d runs, note %q; want its check run", r.runs(t), started.CheckNote)
	}

	// Installing a program in a directory on the check's PATH changes the
	// node's software: the check runs again.
	if err := os.WriteFile(filepath.Join(r.bin, "new-tool"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, _ = r.run(t, "py3@2", "sha256:two"); r.runs(t) != 4 {
		t.Errorf("after a program was installed on the check's PATH the check ran %d times in all; want 4", r.runs(t))
	}

	// An attempt that fails after skipping the check makes the next one
	// check again.
	if _, started, end := r.run(t, "py3@2", "sha256:two", "false"); started.CheckNote == "" || end.State != domain.AttemptFailed {
		t.Fatalf("want a failed attempt that skipped its check; got %s, note %q", end.State, started.CheckNote)
	}
	if _, started, _ := r.run(t, "py3@2", "sha256:two"); started.CheckNote != "" || r.runs(t) != 5 {
		t.Errorf("after a failure with a skipped check: %d runs, note %q; want the check run again", r.runs(t), started.CheckNote)
	}
}

func TestEnvCheckTTLZeroChecksEveryAttempt(t *testing.T) {
	r := newCheckRig(t, 0, filepath.Join(t.TempDir(), "env-checks.json"))
	for i := range 3 {
		if _, started, end := r.run(t, "py3@1", "sha256:one"); end.State != domain.AttemptSucceeded || started.CheckNote != "" {
			t.Fatalf("attempt %d ended %s, note %q", i+1, end.State, started.CheckNote)
		}
	}
	if n := r.runs(t); n != 3 {
		t.Errorf("with no TTL the check ran %d times over 3 attempts; want 3", n)
	}
}

func TestEnvCheckFailureIsNeverRemembered(t *testing.T) {
	r := newCheckRig(t, time.Hour, "")
	r.exit = "3"
	for i := range 3 {
		_, started, end := r.run(t, "py3@1", "sha256:one", "true")
		if end.State != domain.AttemptFailed || end.Reason != domain.ReasonEnvironmentCheckFailed || started.Kind != "" {
			t.Fatalf("attempt %d ended %s (%s) %q, started %v; want failed EnvironmentCheckFailed, never started", i+1, end.State, end.Reason, end.Message, started.Kind)
		}
	}
	if n := r.runs(t); n != 3 {
		t.Errorf("a failing check ran %d times over 3 attempts; want 3", n)
	}
	// Fixed: it passes once, then is remembered.
	r.exit = "0"
	r.run(t, "py3@1", "sha256:one")
	r.run(t, "py3@1", "sha256:one")
	if n := r.runs(t); n != 4 {
		t.Errorf("after the fix the check ran %d times in all; want 4 (once more)", n)
	}
}

func TestEnvCheckPassesSurviveARestart(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "env-checks.json")
	r := newCheckRig(t, time.Hour, cache)
	r.run(t, "py3@1", "sha256:one")
	st, err := os.Stat(cache)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("cache file: %v, mode %v; want it written 0600", err, st.Mode())
	}
	// A new executor (a restarted server) reads the passes.
	r.restart(t, time.Hour, cache)
	if _, started, _ := r.run(t, "py3@1", "sha256:one"); started.CheckNote == "" || r.runs(t) != 1 {
		t.Errorf("after a restart: %d runs, note %q; want the remembered pass used", r.runs(t), started.CheckNote)
	}
	// A damaged file holds no passes: the check runs.
	if err := os.WriteFile(cache, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	r.restart(t, time.Hour, cache)
	if _, started, _ := r.run(t, "py3@1", "sha256:one"); started.CheckNote != "" || r.runs(t) != 2 {
		t.Errorf("with a damaged cache file: %d runs, note %q; want the check run", r.runs(t), started.CheckNote)
	}
}

// A launch without CheckEnv (an older control loop) runs its check in the
// job's environment every time, never remembered.
func TestEnvCheckWithoutCheckEnvIsNotRemembered(t *testing.T) {
	r := newCheckRig(t, time.Hour, "")
	for range 2 {
		l := r.h.Launch(t, []string{"true"}, func(l *executor.Launch) {
			l.Check = []string{r.bin + "/ty-check"}
			l.EnvRef, l.EnvDigest = "py3@1", "sha256:one"
		})
		r.h.Wait(t, l.Ref, executor.Exited)
	}
	if n := r.runs(t); n != 2 {
		t.Errorf("the check ran %d times; want 2", n)
	}
}
