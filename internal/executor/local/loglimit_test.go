package local

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/logs"
)

// TestLaunchCapsLog is the log cap's acceptance test: a job that prints as
// fast as it can (`yes`, bounded by head to about 40 MiB) under a 4 MiB limit
// leaves at most the limit (plus the few bytes of the limit record) on
// disk, and its log reads as the head, one marker, and the tail up to the
// job's last line.
func TestLaunchCapsLog(t *testing.T) {
	const limit = 4 << 20
	h := executortest.NewHarness(t, newExec(t))
	l := h.Launch(t, shell(`yes trainyard-log-cap-line | head -n 1800000; echo last-line`), func(l *executor.Launch) {
		l.LogLimit = limit
	})
	if ev := h.Wait(t, l.Ref, executor.Exited); ev.State != domain.AttemptSucceeded {
		t.Fatalf("exit event %+v, want succeeded", ev)
	}
	// The shim reported reaching the limit, once, before the end.
	var limited []executor.Event
	for _, ev := range h.Events(l.Ref) {
		if ev.Kind == executor.LogLimited {
			limited = append(limited, ev)
		}
	}
	if len(limited) != 1 || limited[0].Limit != limit || limited[0].At.IsZero() {
		t.Errorf("LogLimited events %+v, want one with Limit %d", limited, limit)
	}
	files, err := logs.LogFiles(l.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	var total, record int64
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		total += st.Size()
		if strings.HasSuffix(f, ".cap") {
			record = st.Size()
		}
	}
	if total-record > limit || record > 64 {
		t.Fatalf("%d bytes on disk (%d of them the limit record) for a limit of %d: %v", total, record, limit, files)
	}
	var out bytes.Buffer
	if err := logs.Copy(context.Background(), &out, l.LogPath, logs.Options{}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	markers := 0
	for i, ln := range lines {
		switch {
		case strings.HasPrefix(ln, logs.MarkerPrefix+"4MiB reached; "):
			markers++
			if i < 1000 || i > len(lines)-1000 {
				t.Errorf("marker at line %d of %d: want it between the head and the tail", i, len(lines))
			}
		case ln != "trainyard-log-cap-line" && !(i == len(lines)-1 && ln == "last-line"):
			t.Fatalf("line %d: %q", i, ln)
		}
	}
	if markers != 1 || lines[len(lines)-1] != "last-line" {
		t.Fatalf("%d markers, last line %q; want 1 marker and the job's last line", markers, lines[len(lines)-1])
	}
	var tail bytes.Buffer
	if err := logs.Copy(context.Background(), &tail, l.LogPath, logs.Options{Tail: 1}); err != nil || tail.String() != "last-line\n" {
		t.Fatalf("tail 1 = %q, %v", tail.String(), err)
	}
}

// A log that reaches its limit while no server watches is reported by the
// executor that reattaches; a log under its limit is not reported.
func TestReattachReportsLogLimit(t *testing.T) {
	const limit = 1 << 20
	g := newGate(t)
	a := newExec(t)
	ha := executortest.NewHarness(t, a)
	// Past half the limit (the head) only after the gate opens.
	l := ha.Launch(t, shell(`echo start; read x < `+string(g)+`; yes trainyard-log-cap-line | head -n 60000; read x < `+string(g)), func(l *executor.Launch) {
		l.LogLimit = limit
	})
	ha.Wait(t, l.Ref, executor.Started)
	a.Close()

	b := newExec(t)
	hb := executortest.NewHarness(t, b)
	if err := b.Launch(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	hb.Wait(t, l.Ref, executor.Started)
	for _, ev := range hb.Events(l.Ref) {
		if ev.Kind == executor.LogLimited {
			t.Fatalf("LogLimited %+v before the log reached its limit", ev)
		}
	}
	g.release(t)
	if ev := hb.Wait(t, l.Ref, executor.LogLimited); ev.Limit != limit || ev.At.IsZero() {
		t.Errorf("reattached LogLimited = %+v, want Limit %d", ev, limit)
	}
	g.release(t)
	hb.Wait(t, l.Ref, executor.Exited)
	n := 0
	for _, ev := range hb.Events(l.Ref) {
		if ev.Kind == executor.LogLimited {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d LogLimited events after reattach, want 1", n)
	}
}
