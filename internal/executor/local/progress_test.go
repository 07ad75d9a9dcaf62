package local

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"trainyard/internal/logs"
)

// Progress lines stay in the log, go to metrics.jsonl, and notify at most
// once per second; the last one is sent at close.
func TestPumpProgress(t *testing.T) {
	dir := t.TempDir()
	var mu sync.Mutex
	var notes []string
	prog := newProgressSink(filepath.Join(dir, metricsFile), func(l string) {
		mu.Lock()
		notes = append(notes, l)
		mu.Unlock()
	})
	var log bytes.Buffer
	w := &logWriter{f: &log}
	in := "hello\ntrainyard: {\"step\": 1, \"loss\": 0.9}\ntrainyard: {\"step\": 2, \"loss\": 0.8}\ntrainyard: bad\ntrainyard: {\"step\": 3, \"loss\": 0.7}"
	w.pumpProgress(strings.NewReader(in), logs.Stdout, nil, prog)
	prog.close()
	if got := strings.Count(log.String(), "trainyard: "); got != 4 {
		t.Errorf("log holds %d progress lines, want 4:\n%s", got, log.String())
	}
	b, err := os.ReadFile(filepath.Join(dir, metricsFile))
	if err != nil {
		t.Fatal(err)
	}
	// The reports are stored as printed, and read back to the same values.
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 {
		t.Fatalf("metrics.jsonl holds %d records, want 3:\n%s", len(lines), b)
	}
	for i, l := range lines {
		at, step, ms, ok := logs.ParseMetricRecord([]byte(l), nil)
		want := []float64{0.9, 0.8, 0.7}[i]
		if !ok || step != int64(i+1) || len(ms) != 1 || string(ms[0].Key) != "loss" || ms[0].Value != want || at.IsZero() {
			t.Errorf("record %d %s = %v %d %v %v; want step %d loss %v", i, l, at, step, ms, ok, i+1, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// One read carries the first three lines: the latest step of that
	// batch is sent at once; step 3 (the last line, at EOF) within the
	// second waits for close.
	if len(notes) != 2 || !strings.HasPrefix(notes[0], "progress 2 ") || !strings.HasPrefix(notes[1], "progress 3 ") {
		t.Errorf("notifications %q; want step 2 at once and step 3 at close", notes)
	}
}
