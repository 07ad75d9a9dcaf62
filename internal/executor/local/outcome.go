package local

import (
	"encoding/json"
	"errors"
	"io/fs"
	"path/filepath"
	"time"

	"trainyard/internal/executor"
)

// RecordOutcome writes the outcome of an attempt that another executor ran
// elsewhere (a Kubernetes pod) into its attempt directory dir, as this
// executor's supervisor does: the read side (NewReader) then knows the
// attempt has ended (a log follower stops), and Outcome reads it back
// after a restart. ev is the attempt's Exited event; started is when its
// program started (zero: it never did).
func RecordOutcome(dir string, ev executor.Event, started time.Time) error {
	r := exitRecord{State: ev.State, Reason: ev.Reason, ExitCode: ev.ExitCode, Message: ev.Message,
		StartedAt: started, FinishedAt: ev.At, Outputs: ev.Outputs}
	if !started.IsZero() {
		r.PID = 1 // a container's main process
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, exitFile), append(b, '\n'), 0o600)
}

// Outcome reads the outcome recorded in the attempt directory dir (by
// this executor's supervisor or RecordOutcome): its Exited event, and
// when its program started (zero: it never did). ok is false when none
// is recorded.
func Outcome(dir string) (ev executor.Event, started time.Time, ok bool, err error) {
	r, err := readExit(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return executor.Event{}, time.Time{}, false, nil
	}
	if err != nil {
		return executor.Event{}, time.Time{}, false, err
	}
	ev = executor.Event{Kind: executor.Exited, At: r.FinishedAt, State: r.State, Reason: r.Reason,
		ExitCode: r.ExitCode, Message: r.Message, Outputs: r.Outputs}
	if r.started() {
		started = r.StartedAt
	}
	return ev, started, true, nil
}
