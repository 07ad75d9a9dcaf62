package control_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
)

// failing makes every attempt fail with exit code 1.
func failing(l executor.Launch) []executor.Event {
	return []executor.Event{{Kind: executor.Started, At: time.Now().UTC(), PID: 1000 + int(l.Ref.JobID)},
		exited(domain.AttemptFailed, domain.ReasonExitCode, 1)}
}

// Once three attempts of a project's jobs of one name fail within the
// window, the retry that would follow is paused: the job is held with
// reason RetryStorm, and a job of another name retries as before.
func TestRetryStormPausesRetries(t *testing.T) {
	r := newTunedRig(t, &executortest.Fake{Script: failing}, func(c *control.Config) {
		c.RetryStorm = control.RetryStorm{Failures: 3, Window: time.Hour}
	})
	j := r.submit("name: flaky\nentrypoint: [train]\npolicy: {retries: 5, reentrant: true}\n")
	held := r.wait(j.ID, domain.JobHeld)
	if held.Reason != domain.ReasonRetryStorm || !strings.Contains(held.Message, `3 attempts of project default's jobs named "flaky" failed within 1h`) ||
		!strings.Contains(held.Message, "trainyard release") {
		t.Fatalf("held: %s %q", held.Reason, held.Message)
	}
	if why, err := r.svc.Jobs.Explain(context.Background(), admin, j.ID); err != nil || !strings.Contains(why.Hint, "trainyard logs") {
		t.Fatalf("why = %+v, %v; want a hint to read the logs and release", why, err)
	}
	if n := len(r.attempts(j.ID)); n != 3 {
		t.Fatalf("%d attempts before the pause, want 3", n)
	}
	other := r.submit("name: other\nentrypoint: [train]\npolicy: {retries: 1, reentrant: true}\n")
	if got := r.wait(other.ID, domain.JobFailed); len(r.attempts(other.ID)) != 2 {
		t.Fatalf("a job of another name: %s after %d attempts, want failed after 2", got.State, len(r.attempts(other.ID)))
	}
}
