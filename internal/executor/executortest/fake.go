package executortest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
)

var _ executor.Executor = (*Fake)(nil)

// Fake is an in-memory executor: it runs nothing. For control-loop tests it
// reports the events its Script returns; without a Script, an attempt
// whose argv is a Program (Program.Argv) is played in memory, with its
// log, outputs, progress, stop, timeout and loss, so that the Fake passes
// the conformance suite (Exercise) like a real executor; any other argv
// succeeds at once. Set the func fields before first use; each nil field
// has the default behaviour described on it.
//
// Events are delivered synchronously into a channel of FakeBuffer events;
// the consumer must drain it.
type Fake struct {
	// LaunchFunc, when set, replaces Launch entirely (nothing is recorded
	// or scripted); use it to make Launch fail.
	LaunchFunc func(ctx context.Context, l executor.Launch) error
	// Script returns the events a fresh launch reports, in order (Ref is
	// filled in). Nil: Started (PID 1000+JobID) then Exited succeeded. Return
	// only Started to keep the attempt running until Emit or Stop ends it.
	Script func(l executor.Launch) []executor.Event
	// StopFunc, when set, replaces Stop. Default: a running attempt reports
	// Exited canceled with the request's reason (CanceledByUser when it has
	// none); an ended or unknown one is a no-op.
	StopFunc func(ctx context.Context, ref executor.Ref, req executor.StopRequest) error
	// InventoryFunc, when set, replaces Inventory. Default: one node "fake"
	// with 8 CPUs, 64GiB and GPUs 0-3.
	InventoryFunc func(ctx context.Context) (executor.Inventory, error)
	// Caps is what Capabilities reports (zero: single-node, no limits).
	Caps executor.Capabilities

	once     sync.Once
	events   chan executor.Event
	mu       sync.Mutex
	launches []executor.Launch
	stops    []executor.Ref
	requests []executor.StopRequest            // parallel to stops
	history  map[executor.Ref][]executor.Event // events reported per attempt
	releases []executor.Ref

	// The in-memory files: fake_files.go.
	changed  chan struct{} // closed and replaced when a log or history changes
	logs     map[executor.Ref][]fakeLine
	expired  map[int64]executor.LogExpiry // ExpireLogs
	programs map[executor.Ref]*fakeRun
	files    map[string]*fakeFile // by absolute path
	dirs     map[string]bool      // output directories of launches
	lastMod  time.Time
}

// FakeBuffer is the capacity of a Fake's Events channel.
const FakeBuffer = 4096

func (f *Fake) init() {
	f.once.Do(func() {
		f.events = make(chan executor.Event, FakeBuffer)
		f.history = map[executor.Ref][]executor.Event{}
		f.changed = make(chan struct{})
		f.logs = map[executor.Ref][]fakeLine{}
		f.programs = map[executor.Ref]*fakeRun{}
		f.files = map[string]*fakeFile{}
		f.dirs = map[string]bool{}
	})
}

// Launch records l and reports the scripted events. Like a real executor it
// is idempotent per Ref: a running attempt is left alone, and an ended one
// reports its Started and final event again.
func (f *Fake) Launch(ctx context.Context, l executor.Launch) error {
	f.init()
	if f.LaunchFunc != nil {
		return f.LaunchFunc(ctx, l)
	}
	if err := readCode(ctx, l.Code); err != nil {
		return err
	}
	// The job's outputs are files on this machine in tests, as with the
	// local executor: create the directories as it does.
	for _, d := range l.Writable {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return fmt.Errorf("%w: %w", executor.ErrOutputs, err)
		}
	}
	f.mu.Lock()
	f.launches = append(f.launches, l)
	prev, seen := f.history[l.Ref]
	f.mu.Unlock()
	if seen {
		if ended(prev) {
			for _, ev := range prev {
				if ev.Kind == executor.Started || ev.Kind == executor.Exited || ev.Kind == executor.Lost {
					f.events <- ev
				}
			}
		}
		return nil
	}
	script := f.Script
	if script == nil {
		if p, ok := DecodeProgram(l.Argv); ok {
			f.run(l, p) // fake_program.go
			return nil
		}
		script = defaultScript
	}
	evs := script(l)
	f.mu.Lock()
	f.history[l.Ref] = []executor.Event{} // seen, even when the script is empty
	f.mu.Unlock()
	for _, ev := range evs {
		ev.Ref = l.Ref
		f.Emit(ev)
	}
	return nil
}

// readCode reads a launch's code package to the end, as an unpack would,
// and fails as one would when it cannot be read or does not match.
func readCode(ctx context.Context, c *executor.Code) error {
	if c == nil {
		return nil
	}
	err := errors.New("no way to read the package was given")
	if c.Open != nil {
		var rc io.ReadCloser
		if rc, err = c.Open(ctx); err == nil {
			_, err = io.Copy(io.Discard, rc)
			rc.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("cannot unpack the job's code package %s into %s: %w", c.SHA256, c.Dir, err)
	}
	return nil
}

func defaultScript(l executor.Launch) []executor.Event {
	now := time.Now().UTC()
	zero := 0
	return []executor.Event{
		{Kind: executor.Started, At: now, PID: 1000 + int(l.JobID)},
		{Kind: executor.Exited, At: now, State: domain.AttemptSucceeded, Reason: domain.ReasonCompleted, ExitCode: &zero, Message: "exited with code 0"},
	}
}

func ended(evs []executor.Event) bool {
	for _, ev := range evs {
		if ev.Kind == executor.Exited || ev.Kind == executor.Lost {
			return true
		}
	}
	return false
}

// Emit reports ev (for example, the Exited of an attempt whose script only
// started it).
func (f *Fake) Emit(ev executor.Event) {
	f.init()
	f.mu.Lock()
	f.history[ev.Ref] = append(f.history[ev.Ref], ev)
	f.notifyLocked()
	f.mu.Unlock()
	f.events <- ev
}

// notifyLocked wakes the log followers; f.mu is held.
func (f *Fake) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// Stop records the request; see StopFunc for the default behaviour.
func (f *Fake) Stop(ctx context.Context, ref executor.Ref, req executor.StopRequest) error {
	f.init()
	f.mu.Lock()
	f.stops = append(f.stops, ref)
	f.requests = append(f.requests, req)
	evs, seen := f.history[ref]
	f.mu.Unlock()
	if f.StopFunc != nil {
		return f.StopFunc(ctx, ref, req)
	}
	if f.stopProgram(ref, req) { // fake_program.go
		return nil
	}
	if seen && !ended(evs) {
		reason, msg := req.Reason, "stopped on request"
		if reason == "" {
			reason = domain.ReasonCanceledByUser
		}
		if req.Message != "" {
			msg = "stopped: " + req.Message
		}
		f.Emit(executor.Event{Ref: ref, Kind: executor.Exited, At: time.Now().UTC(),
			State: domain.AttemptCanceled, Reason: reason, Message: msg})
	}
	return nil
}

// Events delivers the reported events.
func (f *Fake) Events() <-chan executor.Event {
	f.init()
	return f.events
}

// Capabilities returns f.Caps.
func (f *Fake) Capabilities() executor.Capabilities { return f.Caps }

// Inventory reports InventoryFunc's inventory or the default one.
func (f *Fake) Inventory(ctx context.Context) (executor.Inventory, error) {
	if f.InventoryFunc != nil {
		return f.InventoryFunc(ctx)
	}
	return executor.Inventory{Nodes: []executor.Node{{Name: "fake", CPUs: 8, Memory: 64 << 30, GPUs: []int{0, 1, 2, 3}}}}, nil
}

// Launches returns every Launch call recorded, in order.
func (f *Fake) Launches() []executor.Launch {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.launches)
}

// Stops returns the Refs of every Stop call, in order.
func (f *Fake) Stops() []executor.Ref {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.stops)
}

// StopRequests returns the request of every Stop call, in the order of
// Stops.
func (f *Fake) StopRequests() []executor.StopRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.requests)
}
