package logs

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// bigLog is a 1 GiB log shared by the benchmarks, written once per test
// binary run: training-like stdout lines with a rare "checkpoint" line
// (one in 100,000) and an error line near the start.
var bigLog struct {
	once sync.Once
	dir  string
	path string
	err  error
}

const bigLogSize = 1 << 30

func bigLogPath(b *testing.B) string {
	b.Helper()
	bigLog.once.Do(func() {
		bigLog.dir, bigLog.err = os.MkdirTemp("", "trainyard-logs-bench-")
		if bigLog.err != nil {
			return
		}
		bigLog.path = filepath.Join(bigLog.dir, "output.log")
		bigLog.err = writeBigLog(bigLog.path, bigLogSize)
	})
	if bigLog.err != nil {
		b.Fatal(bigLog.err)
	}
	return bigLog.path
}

func writeBigLog(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	t := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	var line, text []byte
	var n int64
	for i := 0; n < size; i++ {
		text = append(text[:0], "step "...)
		text = strconv.AppendInt(text, int64(i), 10)
		switch {
		case i == 10:
			text = append(text, " error: rare failure near the start"...)
		case i%100000 == 0:
			text = append(text, " checkpoint saved"...)
		default:
			text = append(text, " loss 0.4321 lr 0.0003 tokens/s 182345.7"...)
		}
		line = AppendLine(line[:0], t.Add(time.Duration(i)*time.Microsecond), Stdout, text)
		n += int64(len(line))
		if _, err := w.Write(line); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bigLog.dir != "" {
		os.RemoveAll(bigLog.dir)
	}
	os.Exit(code)
}

// benchCopy also reports the process's CPU seconds per GiB (user and
// system, all threads): on a shared machine the wall time depends on the
// other processes, the CPU time much less.
func benchCopy(b *testing.B, opts Options) {
	path := bigLogPath(b)
	cpu0 := cpuTime()
	b.ResetTimer()
	for b.Loop() {
		if err := Copy(context.Background(), io.Discard, path, opts); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric((cpuTime()-cpu0).Seconds()/float64(b.N)*(1<<30)/bigLogSize, "cpu-s/GiB")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCopy1GiB: `logs` of a whole 1 GiB log, texts only: what a
// grep that keeps every line costs at least.
func BenchmarkCopy1GiB(b *testing.B) { benchCopy(b, Options{}) }

// BenchmarkTail1GiB: `logs --tail 10` on a 1 GiB log.
func BenchmarkTail1GiB(b *testing.B) { benchCopy(b, Options{Tail: 10}) }

// BenchmarkGrepTail1GiB: `logs --grep checkpoint --tail 10`: matches are
// spread through the log, so the backward scan stops early.
func BenchmarkGrepTail1GiB(b *testing.B) {
	benchCopy(b, Options{Tail: 10, Grep: regexp.MustCompile(`checkpoint`)})
}

// BenchmarkGrepTailRare1GiB: `logs --grep error --tail 10` whose only
// match is near the start: the scan covers the whole log.
func BenchmarkGrepTailRare1GiB(b *testing.B) {
	benchCopy(b, Options{Tail: 10, Grep: regexp.MustCompile(`error`)})
}

// BenchmarkGrep1GiB: `logs --grep checkpoint` reads the whole log.
func BenchmarkGrep1GiB(b *testing.B) {
	benchCopy(b, Options{Grep: regexp.MustCompile(`checkpoint`)})
}

// BenchmarkGrepNoLiteral1GiB: `logs --grep '(?i)CHECKPOINT'`: no literal
// prefix, but a required case-insensitive literal ("point"), searched for
// before any line is looked at (requiredLiterals).
func BenchmarkGrepNoLiteral1GiB(b *testing.B) {
	benchCopy(b, Options{Grep: regexp.MustCompile(`(?i)CHECKPOINT`)})
}

// BenchmarkSince1GiB: `logs --since` near the end of a 1 GiB log (the log
// spans about 12 s of timestamps; the last 10 ms of them).
func BenchmarkSince1GiB(b *testing.B) {
	benchCopy(b, Options{Since: time.Date(2026, 1, 2, 3, 0, 11, 780_000_000, time.UTC)})
}

// BenchmarkGrepRegexp1GiB: `logs --grep` with expressions that hold no
// single literal (alternations, classes) or whose literal is on every
// line. Most of them match nearly every line of the benchmark log.
func BenchmarkGrepRegexp1GiB(b *testing.B) {
	for _, bc := range []struct{ name, expr string }{
		{"alt", `loss|nan`},             // every line
		{"alt-none", `nan|inf`},         // no line
		{"fold-alt", `(?i)error|warn`},  // one line
		{"digits", `\d{4}`},             // every line
		{"step-digits", `step [0-9]+`},  // every line
		{"fold-every-line", `(?i)loss`}, // every line
		{"gap", `loss.*tokens`},         // every line
		// "tokens/s " on nearly every line, "saved" on one in 100,000
		// (and never both): the rarer literal is searched for.
		{"rare-literal", `tokens/s \d+.*saved`},
		{"runs", `loss \d+\.\d+ lr`},    // every line; each \d+ ends at the next byte
		{"wide-run", `lr [^ ]+ tokens`}, // every line; [^ ] is any rune but a space
		// Run on every line: a repeated group.
		{"run", `lr (\d+\.)+\d+ tokens`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			benchCopy(b, Options{Grep: regexp.MustCompile(bc.expr)})
		})
	}
}
