package local

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
)

// launchWithCheck runs an entrypoint that creates a marker file, after
// check, and returns the Exited event and whether the marker exists.
func launchWithCheck(t *testing.T, check []string) (executor.Event, []executor.Event, bool, string) {
	t.Helper()
	h := executortest.NewHarness(t, newExec(t))
	marker := filepath.Join(t.TempDir(), "entrypoint-ran")
	l := h.Launch(t, []string{"/bin/sh", "-c", "touch " + marker}, func(l *executor.Launch) {
		l.Check = check
		l.Env = append(l.Env, "CHECK_SEES=env-var-value")
	})
	ev := h.Wait(t, l.Ref, executor.Exited)
	_, err := os.Stat(marker)
	log, _ := os.ReadFile(l.LogPath)
	return ev, h.Events(l.Ref), err == nil, string(log)
}

func TestEnvironmentCheckFailsTheAttemptBeforeTheEntrypoint(t *testing.T) {
	tests := map[string]struct {
		check   []string
		message string
	}{
		"check exits 1": {[]string{"false"}, "environment check `false` exited with code 1"},
		"check exits 3": {[]string{"/bin/sh", "-c", "echo torch missing >&2; exit 3"}, "environment check `/bin/sh -c echo torch missing >&2; exit 3` exited with code 3"},
		"check program missing": {[]string{"trainyard-no-such-check"},
			"environment check `trainyard-no-such-check` could not start: program \"trainyard-no-such-check\" not found in PATH="},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ev, evs, ran, log := launchWithCheck(t, tc.check)
			if ev.State != domain.AttemptFailed || ev.Reason != domain.ReasonEnvironmentCheckFailed {
				t.Errorf("ended %s (%s): %s; want failed (EnvironmentCheckFailed)", ev.State, ev.Reason, ev.Message)
			}
			if !strings.HasPrefix(ev.Message, tc.message) {
				t.Errorf("message = %q, want it to start with %q", ev.Message, tc.message)
			}
			if ran {
				t.Error("the entrypoint ran although the environment check failed")
			}
			for _, e := range evs {
				if e.Kind == executor.Started {
					t.Errorf("a Started event was reported for an attempt whose check failed: %+v", e)
				}
			}
			if !strings.Contains(log, tc.message) {
				t.Errorf("the log does not say why:\n%s", log)
			}
			if name == "check exits 3" && !strings.Contains(log, "torch missing") {
				t.Errorf("the check's output is not in the log:\n%s", log)
			}
		})
	}
}

func TestEnvironmentCheckPassesThenTheEntrypointRuns(t *testing.T) {
	// The check sees the attempt's environment and working directory.
	ev, evs, ran, log := launchWithCheck(t, []string{"/bin/sh", "-c", `test "$CHECK_SEES" = env-var-value && test -d "$PWD" && echo check-ok`})
	if ev.State != domain.AttemptSucceeded || !ran {
		t.Fatalf("ended %s (%s): %s, entrypoint ran %v; want success after a passing check\n%s", ev.State, ev.Reason, ev.Message, ran, log)
	}
	if evs[0].Kind != executor.Started {
		t.Errorf("first event %s, want started", evs[0].Kind)
	}
	if strings.Index(log, "check-ok") < 0 || strings.Index(log, "check-ok") > strings.Index(log, "started [") {
		t.Errorf("the check's output should come before the entrypoint starts:\n%s", log)
	}
}
