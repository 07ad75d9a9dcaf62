package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"trainyard/internal/executor"
	"trainyard/internal/logs"

	"golang.org/x/sys/unix"
)

var benchJob atomic.Int64

func benchLaunch(root string, argv []string) executor.Launch {
	id := benchJob.Add(1)
	dir := filepath.Join(root, strconv.FormatInt(id, 10))
	return executor.Launch{
		Ref:     executor.Ref{JobID: id, Attempt: 1},
		Argv:    argv,
		Env:     []string{"PATH=/usr/bin:/bin"},
		Dir:     dir,
		WorkDir: filepath.Join(dir, "work"),
		LogPath: filepath.Join(dir, "output.log"),
	}
}

// BenchmarkLaunchTrue launches b.N attempts of `true` without waiting between
// them and waits for every Exited event: end-to-end executor throughput.
func BenchmarkLaunchTrue(b *testing.B) {
	e := newExec(b)
	root := b.TempDir()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := e.Launch(context.Background(), benchLaunch(root, []string{"true"})); err != nil {
			b.Fatal(err)
		}
	}
	for done := 0; done < b.N; {
		ev := <-e.Events()
		switch ev.Kind {
		case executor.Exited:
			if ev.State != "succeeded" {
				b.Fatalf("attempt %s: %s %s", ev.Ref, ev.State, ev.Message)
			}
			done++
		case executor.Lost:
			b.Fatalf("attempt %s lost: %s", ev.Ref, ev.Message)
		}
	}
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
}

// BenchmarkStartLatency measures Launch → Started, one attempt at a time.
func BenchmarkStartLatency(b *testing.B) {
	e := newExec(b)
	root := b.TempDir()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		l := benchLaunch(root, []string{"true"})
		t0 := time.Now()
		if err := e.Launch(context.Background(), l); err != nil {
			b.Fatal(err)
		}
		for started := false; !started; {
			ev := <-e.Events()
			if ev.Ref == l.Ref && ev.Kind == executor.Started {
				lat = append(lat, time.Since(t0))
				started = true
			}
		}
		for ev := <-e.Events(); ev.Ref != l.Ref || ev.Kind != executor.Exited; ev = <-e.Events() {
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))]) / 1e6 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.9), "p90-ms")
	b.ReportMetric(q(0.99), "p99-ms")
}

// threadCPU is the CPU time (user and system) the calling thread has used,
// in nanoseconds. Unlike wall time it leaves out the time other work on the
// machine takes the CPU away.
func threadCPU(b *testing.B) int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		b.Fatal(err)
	}
	return ts.Nano()
}

// BenchmarkPump measures the log collector's CPU time per line on three
// logs: ordinary output only, a progress report every 10th line (a training
// script that reports every few steps among its other output), and
// progress reports only (the worst case). Every iteration collects the log
// twice, in alternating order, into output.log as the shim does: without
// progress handling ("off", as for stderr) and with it ("on", as for
// stdout: checking reports, metrics.jsonl, notifications). The pair
// differs only by the progress handling and sees the same conditions on
// the machine; overhead-% is on/off - 1.
func BenchmarkPump(b *testing.B) {
	plain := "epoch 3 batch 1234: forward pass done in 12.5ms, memory 1.2GiB\n"
	prog := `trainyard: {"step": 1234, "loss": 0.53217, "lr": 0.001, "acc": 0.912}` + "\n"
	for _, log := range []struct {
		name  string
		every int // a progress line every that many lines; 0: none
	}{{"plain", 0}, {"progress-1-in-10", 10}, {"progress-all", 1}} {
		var in strings.Builder
		const lines = 10000
		for i := range lines {
			if log.every > 0 && i%log.every == 0 {
				in.WriteString(prog)
			} else {
				in.WriteString(plain)
			}
		}
		data := in.String()
		b.Run(log.name, func(b *testing.B) {
			runtime.LockOSThread() // threadCPU measures this goroutine
			defer runtime.UnlockOSThread()
			// One log and one metric log for the whole run, as for one
			// attempt: opening them is not a per-line cost.
			dir := b.TempDir()
			logPath, metricsPath := filepath.Join(dir, "output.log"), filepath.Join(dir, metricsFile)
			f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			w := &logWriter{f: f}
			sink := newProgressSink(metricsPath, func(string) {})
			defer sink.close()
			var cpu [2]int64 // off, on
			collect := func(on bool) {
				// Emptied between runs so that they do not grow with b.N.
				for _, p := range []string{logPath, metricsPath} {
					if err := os.Truncate(p, 0); err != nil && !errors.Is(err, os.ErrNotExist) {
						b.Fatal(err)
					}
				}
				s := sink
				if !on {
					s = nil
				}
				t0 := threadCPU(b)
				w.pumpProgress(strings.NewReader(data), logs.Stdout, nil, s)
				if on {
					cpu[1] += threadCPU(b) - t0
				} else {
					cpu[0] += threadCPU(b) - t0
				}
			}
			b.SetBytes(2 * int64(len(data)))
			b.ResetTimer()
			for i := range b.N {
				collect(i%2 == 1)
				collect(i%2 == 0)
			}
			n := float64(b.N * lines)
			b.ReportMetric(float64(cpu[0])/n, "off-ns/line")
			b.ReportMetric(float64(cpu[1])/n, "on-ns/line")
			b.ReportMetric(100*(float64(cpu[1])/float64(cpu[0])-1), "overhead-%")
		})
	}
}

// BenchmarkStartLatencyIsolation measures Launch → Exited of `true`, one
// attempt at a time, for four kinds of attempt in turn, so that all see the
// same conditions. With attempt directories under /tmp (as in tests; no
// private /tmp then): as the server's user ("plain") and as a project's
// own user ("isolated"). With them under /var/lib (as in production): as
// the server's user ("plain-var") and as a project's own user with a
// private /tmp in a mount namespace of its own ("private-tmp"). Needs root.
func BenchmarkStartLatencyIsolation(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cfg := testConfig(self)
	cfg.Isolation = &Isolation{FirstUID: 913_000, LastUID: 913_099, StateFile: filepath.Join(b.TempDir(), "uids.json")}
	iso, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer iso.Close()
	plain := newExec(b)
	tmpRoot := b.TempDir()
	for d := tmpRoot; d != "/tmp"; d = filepath.Dir(d) {
		os.Chmod(d, 0o711)
	}
	varRoot, err := os.MkdirTemp("/var/lib", "trainyard-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(varRoot)
	os.Chmod(varRoot, 0o711)
	modes := []struct {
		name string
		e    *Executor
		root string
	}{{"plain", plain, tmpRoot}, {"isolated", iso, tmpRoot}, {"private-tmp", iso, varRoot}, {"plain-var", plain, varRoot}}
	lat := make([][]time.Duration, len(modes))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for m, mode := range modes {
			l := benchLaunch(mode.root, []string{"true"})
			l.Project = "bench"
			l.Env = []string{"PATH=/usr/bin:/bin"}
			t0 := time.Now()
			if err := mode.e.Launch(context.Background(), l); err != nil {
				b.Fatal(err)
			}
			for ev := <-mode.e.Events(); ; ev = <-mode.e.Events() {
				if ev.Ref == l.Ref && ev.Kind == executor.Lost {
					b.Fatalf("%s: lost: %s", mode.name, ev.Message)
				}
				if ev.Ref == l.Ref && ev.Kind == executor.Exited {
					if ev.State != "succeeded" {
						b.Fatalf("%s: %s (%s): %s", mode.name, ev.State, ev.Reason, ev.Message)
					}
					break
				}
			}
			lat[m] = append(lat[m], time.Since(t0))
		}
	}
	b.StopTimer()
	for m, mode := range modes {
		slices.Sort(lat[m])
		b.ReportMetric(float64(lat[m][len(lat[m])/2])/1e6, mode.name+"-p50-ms")
	}
}
