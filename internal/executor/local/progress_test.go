package local

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"trainyard/internal/logs"
)

func TestParseProgress(t *testing.T) {
	tests := map[string]struct {
		in   string
		step int64
		m    map[string]float64
		ok   bool
	}{
		"loss":           {`{"step": 100, "loss": 0.53}`, 100, map[string]float64{"loss": 0.53}, true},
		"several":        {`{"step":3,"loss":-1e-3,"acc":1}`, 3, map[string]float64{"loss": -0.001, "acc": 1}, true},
		"non-numeric":    {`{"step": 1, "phase": "eval", "ok": true, "loss": 2}`, 1, map[string]float64{"loss": 2}, true},
		"float step":     {`{"step": 1.5, "loss": 2}`, 0, nil, false},
		"negative step":  {`{"step": -1, "loss": 2}`, 0, nil, false},
		"no step":        {`{"loss": 2}`, 0, nil, false},
		"not json":       {`step 1 loss 2`, 0, nil, false},
		"array":          {`[1, 2]`, 0, nil, false},
		"step only":      {`{"step": 7}`, 7, map[string]float64{}, true},
		"trailing stuff": {`{"step": 1} extra`, 0, nil, false},
		"escaped key":    {`{"step": 2, "lo\u0073s": 1}`, 2, map[string]float64{"loss": 1}, true},
		"nested":         {`{"step": 2, "x": {"a": 1}, "loss": 3}`, 2, map[string]float64{"loss": 3}, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for _, parse := range []func([]byte, []metric) (int64, []metric, bool){parseProgress, decodeProgress} {
				step, ms, ok := parse([]byte(tc.in), nil)
				m := map[string]float64{}
				for _, x := range ms {
					m[string(x.key)] = x.val
				}
				if ok != tc.ok || (ok && (step != tc.step || len(m) != len(tc.m))) {
					t.Fatalf("parse(%s) = %d %v %v; want %d %v %v", tc.in, step, m, ok, tc.step, tc.m, tc.ok)
				}
				for k, v := range tc.m {
					if m[k] != v {
						t.Errorf("%s = %v, want %v", k, m[k], v)
					}
				}
			}
		})
	}
}

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
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], `"step":3,"m":{"loss":0.7}}`) {
		t.Errorf("metrics.jsonl:\n%s", b)
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

// BenchmarkPump measures the log collector's cost per line for ordinary
// output and for output where every 10th line, or every line, reports
// progress.
func BenchmarkPump(b *testing.B) {
	plain := "epoch 3 batch 1234: forward pass done in 12.5ms, memory 1.2GiB\n"
	prog := `trainyard: {"step": 1234, "loss": 0.53217, "lr": 0.001, "acc": 0.912}` + "\n"
	for name, every := range map[string]int{"plain": 0, "progress-1-in-10": 10, "progress-all": 1} {
		b.Run(name, func(b *testing.B) {
			var in strings.Builder
			const lines = 10000
			for i := range lines {
				if every > 0 && i%every == 0 {
					in.WriteString(prog)
				} else {
					in.WriteString(plain)
				}
			}
			data := in.String()
			dir := b.TempDir()
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			for range b.N {
				sink := newProgressSink(filepath.Join(dir, metricsFile), func(string) {})
				w := &logWriter{f: io.Discard}
				w.pumpProgress(strings.NewReader(data), logs.Stdout, nil, sink)
				sink.close()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*lines), "ns/line")
		})
	}
}
