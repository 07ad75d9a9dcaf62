package logs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// numbered is the text of line i of a test log.
func numbered(i int) string { return fmt.Sprintf("line %07d %s", i, strings.Repeat("x", 40)) }

// writeCapped writes lines 0..n-1 through a Writer with limit, in batches
// of batch lines, one second apart per batch, and returns the log's path
// and the bytes written.
func writeCapped(t *testing.T, limit int64, n, batch int) (string, int64) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "output.log")
	w, err := Create(p, limit)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	var total int64
	var b []byte
	for i := 0; i < n; i += batch {
		b = b[:0]
		for j := i; j < min(i+batch, n); j++ {
			b = AppendLine(b, t0.Add(time.Duration(i)*time.Second), Stdout, []byte(numbered(j)))
		}
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
		total += int64(len(b))
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return p, total
}

func diskSize(t *testing.T, path string) (total, capFile int64) {
	t.Helper()
	files, err := LogFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		total += st.Size()
		if strings.HasSuffix(f, capSuffix) {
			capFile = st.Size()
		}
	}
	return total, capFile
}

// checkShape checks that out (text lines) is lines 0..h-1, one marker, and
// lines k..n-1 for some h and k, and returns h and k.
func checkShape(t *testing.T, out string, n int) (head, tailFrom int) {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	next, markers := 0, 0
	head = -1
	for _, l := range lines {
		if strings.HasPrefix(l, MarkerPrefix) {
			markers++
			head = next
			continue
		}
		i, err := strconv.Atoi(strings.Fields(l)[1])
		if err != nil || l != numbered(i) {
			t.Fatalf("unexpected line %q", l)
		}
		if i != next && !(markers == 1 && head == next && i > next) {
			t.Fatalf("line %d follows line %d", i, next-1)
		}
		if i != next {
			tailFrom = i
		}
		next = i + 1
	}
	if markers != 1 || next != n {
		t.Fatalf("%d markers, last line %d; want 1 marker and last line %d", markers, next-1, n-1)
	}
	return head, tailFrom
}

func TestCappedLogKeepsHeadMarkerAndTail(t *testing.T) {
	const limit = MinLimit
	p, total := writeCapped(t, limit, 100_000, 37) // about 8 MiB
	size, capFile := diskSize(t, p)
	if size-capFile > limit {
		t.Fatalf("%d bytes on disk for a limit of %d", size-capFile, limit)
	}
	if size-capFile < limit/2 {
		t.Fatalf("only %d bytes kept of %d", size-capFile, limit)
	}
	var out bytes.Buffer
	if err := Copy(context.Background(), &out, p, Options{}); err != nil {
		t.Fatal(err)
	}
	head, tailFrom := checkShape(t, out.String(), 100_000)
	lineSize := int64(len(AppendLine(nil, time.Time{}, Stdout, []byte(numbered(0)))))
	dropped := int64(tailFrom-head) * lineSize
	wantMarker := Marker(limit, dropped)
	if !strings.Contains(out.String(), "\n"+wantMarker+"\n") {
		t.Fatalf("no marker %q in the log", wantMarker)
	}
	if kept := size - capFile; kept+dropped != total {
		t.Fatalf("kept %d + dropped %d != written %d", kept, dropped, total)
	}
	// The full record shows the marker as a system line, timed as the
	// first line after it.
	out.Reset()
	if err := Copy(context.Background(), &out, p, Options{Timestamps: true, Grep: regexp.MustCompile(`^trainyard: log limit|line 0*` + strconv.Itoa(tailFrom) + ` `)}); err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(got) != 2 || !strings.Contains(got[0], " system "+wantMarker) || got[0][:len(TimeFormat)] != got[1][:len(TimeFormat)] {
		t.Fatalf("marker and first tail line:\n%s", out.String())
	}
}

func TestCappedLogUnderTheLimitIsWhole(t *testing.T) {
	p, total := writeCapped(t, 4*MinLimit, 1000, 10)
	size, _ := diskSize(t, p)
	if size != total {
		t.Fatalf("%d bytes on disk, %d written", size, total)
	}
	if _, err := os.Stat(p + capSuffix); err == nil {
		t.Fatalf("a log under its limit has %s", p+capSuffix)
	}
}

func TestCappedLogReads(t *testing.T) {
	const n = 60_000
	p, _ := writeCapped(t, MinLimit, n, 100)
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	tests := map[string]struct {
		opts Options
		want string
	}{
		"tail":              {Options{Tail: 2}, numbered(n-2) + "\n" + numbered(n-1) + "\n"},
		"grep with tail":    {Options{Tail: 1, Grep: regexp.MustCompile(`line 00000[0-9]7`)}, numbered(97) + "\nM\n"},
		"grep in the tail":  {Options{Grep: regexp.MustCompile(`line 005999[89]`)}, "M\n" + numbered(59998) + "\n" + numbered(59999) + "\n"},
		"grep in the head":  {Options{Grep: regexp.MustCompile(`line 000000[12]`)}, numbered(1) + "\n" + numbered(2) + "\n" + "M\n"},
		"since in the tail": {Options{Since: t0.Add((n - 100) * time.Second)}, tailLines(n-100, n)},
		"grep with a tail that spans the marker": {
			Options{Tail: 2, Grep: regexp.MustCompile(`line 0000001|line 0059999`)}, numbered(1) + "\nM\n" + numbered(59999) + "\n"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			if err := Copy(context.Background(), &out, p, tt.opts); err != nil {
				t.Fatal(err)
			}
			got := regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(MarkerPrefix)+`.*$`).ReplaceAllString(out.String(), "M")
			if got != tt.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
	lines, err := Tail(p, 2)
	if err != nil || len(lines) != 2 || lines[1].Text != numbered(n-1) {
		t.Fatalf("Tail = %+v, %v", lines, err)
	}
}

func tailLines(from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		b.WriteString(numbered(i) + "\n")
	}
	return b.String()
}

// A follower reads a capped log while it is written and rotated: it sees
// every line it had time to read, in order, a marker wherever lines were
// dropped before it got to them, and the last line.
func TestCappedLogFollow(t *testing.T) {
	p := filepath.Join(t.TempDir(), "output.log")
	w, err := Create(p, MinLimit)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var done atomic.Bool
	var out bytes.Buffer
	finished := make(chan error)
	go func() {
		finished <- Copy(context.Background(), &out, p, Options{Follow: true, Done: done.Load, Poll: time.Millisecond})
	}()
	const n = 100_000
	var b []byte
	for i := 0; i < n; i += 50 {
		b = b[:0]
		for j := i; j < i+50; j++ {
			b = AppendLine(b, time.Now(), Stdout, []byte(numbered(j)))
		}
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	done.Store(true)
	if err := <-finished; err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	next, gaps := 0, 0
	for _, l := range lines {
		if strings.HasPrefix(l, MarkerPrefix) {
			gaps++
			continue
		}
		f := strings.Fields(l)
		if len(f) < 2 {
			t.Fatalf("torn line %q after line %d (%d markers so far)", l, next-1, gaps)
		}
		i, err := strconv.Atoi(f[1])
		if err != nil || l != numbered(i) || i < next || (i > next && gaps == 0) {
			t.Fatalf("line %q after line %d (%d markers so far)", l, next-1, gaps)
		}
		if i > next {
			gaps = 0 // the marker accounted for this gap
		}
		next = i + 1
	}
	if next != n {
		t.Fatalf("the follower ended at line %d, not %d", next-1, n-1)
	}
	if w.Dropped() == 0 {
		t.Fatal("the writer dropped nothing; the test wrote too little")
	}
}

func TestCreateRejectsATinyLimit(t *testing.T) {
	if _, err := Create(filepath.Join(t.TempDir(), "output.log"), MinLimit-1); err == nil {
		t.Fatal("a limit below MinLimit was accepted")
	}
}

func TestHumanSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0B", 1000: "1000B", 1 << 10: "1KiB", 1536: "1.5KiB", 100 << 20: "100MiB", 1288490189: "1.2GiB"} {
		if got := HumanSize(n); got != want {
			t.Errorf("HumanSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestLayoutLogLimited(t *testing.T) {
	l := Layout{Root: t.TempDir()}
	if err := os.MkdirAll(l.AttemptDir(7, 1), 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := Create(l.LogPath(7, 1), MinLimit)
	if err != nil {
		t.Fatal(err)
	}
	line := AppendLine(nil, time.Now(), Stdout, []byte(numbered(0)))
	if _, err := w.Write(line); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := l.LogLimited(7, 1); ok {
		t.Fatal("a log under its limit is reported limited")
	}
	for range 4 * MinLimit / len(line) {
		if _, err := w.Write(line); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	limit, dropped, ok := l.LogLimited(7, 1)
	if !ok || limit != MinLimit || dropped != w.Dropped() || dropped == 0 {
		t.Fatalf("LogLimited = %d, %d, %v; want %d, %d, true", limit, dropped, ok, MinLimit, w.Dropped())
	}
}
