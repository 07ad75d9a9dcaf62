package logs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func writeLog(t *testing.T, lines ...string) string {
	t.Helper()
	var b []byte
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, l := range lines {
		b = AppendLine(b, at, Stdout, []byte(l))
	}
	p := filepath.Join(t.TempDir(), "output.log")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLineRoundTrip(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	b := AppendLine(nil, at, Stderr, []byte("hello world"))
	ln := ParseLine(b)
	if !ln.Time.Equal(at) || ln.Stream != Stderr || ln.Text != "hello world" {
		t.Fatalf("parsed %+v from %q", ln, b)
	}
	if ln.String()+"\n" != string(b) {
		t.Fatalf("String() = %q, want %q", ln.String(), b)
	}
	if got := ParseLine([]byte("not a log line")); got.Text != "not a log line" || got.Stream != "" {
		t.Fatalf("foreign line parsed as %+v", got)
	}
}

func TestCopyTail(t *testing.T) {
	p := writeLog(t, "a", "b", "c", "d")
	for n, want := range map[int]string{0: "a\nb\nc\nd\n", 1: "d\n", 3: "b\nc\nd\n", 10: "a\nb\nc\nd\n"} {
		var out bytes.Buffer
		if err := Copy(context.Background(), &out, p, Options{Tail: n}); err != nil {
			t.Fatal(err)
		}
		if out.String() != want {
			t.Errorf("tail %d = %q, want %q", n, out.String(), want)
		}
	}
	var out bytes.Buffer
	if err := Copy(context.Background(), &out, p, Options{Tail: 1, Timestamps: true}); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(out.String(), " stdout d\n") || !strings.HasPrefix(out.String(), "2026-01-02T03:04:05") {
		t.Errorf("timestamped tail = %q", out.String())
	}
}

func TestCopyFollowUntilDone(t *testing.T) {
	p := writeLog(t, "first")
	var done atomic.Bool
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var flushed atomic.Int32
	pr, pw := ioPipe()
	go func() {
		_ = Copy(context.Background(), pw, p, Options{Follow: true, Done: done.Load, Poll: time.Millisecond, Flush: func() { flushed.Add(1) }})
		pw.Close()
	}()
	if got := pr.next(t); got != "first" {
		t.Fatalf("got %q", got)
	}
	f.Write(AppendLine(nil, time.Now(), Stdout, []byte("second")))
	if got := pr.next(t); got != "second" {
		t.Fatalf("got %q", got)
	}
	f.Write(AppendLine(nil, time.Now(), Stdout, []byte("last")))
	done.Store(true)
	if got := pr.next(t); got != "last" {
		t.Fatalf("got %q", got)
	}
	if got := pr.next(t); got != "<eof>" {
		t.Fatalf("follow did not end after done: %q", got)
	}
}

func TestTailOffsetAcrossWindows(t *testing.T) {
	var b []byte
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	long := strings.Repeat("x", 20000)
	for i := range 50 {
		b = AppendLine(b, at, Stdout, []byte(fmt.Sprintf("%d %s", i, long)))
		b = AppendLine(b, at, System, []byte("note"))
	}
	p := filepath.Join(t.TempDir(), "output.log")
	os.WriteFile(p, b, 0o644)
	lines, err := Tail(p, 3)
	if err != nil || len(lines) != 3 || lines[0].Stream != System || !strings.HasPrefix(lines[1].Text, "49 ") {
		t.Fatalf("Tail = %d lines, err %v", len(lines), err)
	}
	var out bytes.Buffer
	if err := Copy(context.Background(), &out, p, Options{Tail: 2}); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(got) != 2 || !strings.HasPrefix(got[0], "48 ") || !strings.HasPrefix(got[1], "49 ") {
		t.Fatalf("tail 2 without system lines = %d lines starting %q", len(got), got[0][:5])
	}
}
