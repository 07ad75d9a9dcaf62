package cli

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"trainyard/internal/api/apitypes"
)

// TestInterruptSaysJobKeepsRunning: Ctrl-C while submit --wait/--follow or
// logs -f waits stops the CLI, not the job, and says so.
func TestInterruptSaysJobKeepsRunning(t *testing.T) {
	const want = "stopped following; job 1 keeps running — trainyard cancel 1 to stop it\n"
	for _, flag := range []string{"--wait", "--follow"} {
		h := newHarness(t)
		ctx, cancel := context.WithCancel(context.Background())
		h.ctx = ctx
		h.srv.progress = func(*apitypes.Job) { cancel() } // the user presses Ctrl-C while it waits
		r := h.mustRun(ExitInterrupted, "submit", writeSpec(t, t.TempDir(), "s.yaml", "name: s\n"), flag)
		if !strings.HasSuffix(r.stderr, want) {
			t.Errorf("submit %s interrupted: stderr %q, want it to end %q", flag, r.stderr, want)
		}
	}

	h := newHarness(t)
	h.srv.addJob(apitypes.Job{Name: "long", State: "running", AttemptCount: 1})
	ctx, cancel := context.WithCancel(context.Background())
	h.ctx = ctx
	h.srv.onLogs = func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("step 1\n"))
		w.(http.Flusher).Flush()
		cancel()
		<-r.Context().Done()
	}
	r := h.mustRun(ExitInterrupted, "logs", "-f", "1")
	if r.stderr != want {
		t.Errorf("logs -f interrupted: stderr %q, want %q", r.stderr, want)
	}
}

// TestLogsOfJobThatNeverStarted: no log is not an error for a job that has
// not started; it says why on stderr and exits 0.
func TestLogsOfJobThatNeverStarted(t *testing.T) {
	h := newHarness(t)
	h.srv.addJob(apitypes.Job{Name: "waiting", State: "queued"})
	h.srv.addJob(apitypes.Job{Name: "dropped", State: "canceled"})
	r := h.mustRun(0, "logs", "1")
	if want := "job 1 has no logs yet: it is queued (trainyard why 1; trainyard logs -f 1 waits for them)\n"; r.stderr != want || r.stdout != "" {
		t.Errorf("logs of a queued job: stdout %q stderr %q, want stderr %q", r.stdout, r.stderr, want)
	}
	r = h.mustRun(0, "logs", "2")
	if want := "job 2 has no logs: it ended (canceled) without ever starting (trainyard why 2)\n"; r.stderr != want {
		t.Errorf("logs of a job canceled in the queue: stderr %q, want %q", r.stderr, want)
	}
	h.mustRun(ExitNotFound, "logs", "9") // no such job: still an error
}
