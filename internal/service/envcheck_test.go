package service

import (
	"testing"

	"trainyard/internal/domain"
)

func TestCheckSkipNote(t *testing.T) {
	const note = "environment check py3@1 passed on node n1 at 2026-03-01 12:00:00 UTC; not run again until 2026-03-01 13:00:00 UTC"
	events := []domain.Event{
		{To: domain.JobRunning, Message: "attempt 1 started (pid 6)"},
		{To: domain.JobQueued, Message: "attempt 1 failed; retrying"},
		{To: domain.JobRunning, Message: "attempt 2 started (pid 7); " + note},
	}
	if got, want := checkSkipNote(events, 2), "attempt 2 skipped its environment check: "+note; got != want {
		t.Errorf("attempt 2: %q\nwant %q", got, want)
	}
	if got := checkSkipNote(events, 1); got != "" {
		t.Errorf("attempt 1 ran its check, but the note is %q", got)
	}
	if got := checkSkipNote(nil, 1); got != "" {
		t.Errorf("no events: %q", got)
	}
}
