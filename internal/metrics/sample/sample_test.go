package sample

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeGPUs is a scripted GPUReader: each call returns the next reply.
type fakeGPUs struct {
	replies []fakeReply
	calls   int
}

type fakeReply struct {
	stats []GPUStat
	err   error
}

func (f *fakeGPUs) ReadGPUs(ctx context.Context) ([]GPUStat, error) {
	r := f.replies[min(f.calls, len(f.replies)-1)]
	f.calls++
	return r.stats, r.err
}

// startBusy starts a process that burns CPU until the test ends.
func startBusy(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start busy child: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

func writePID(t *testing.T, dir, name string, pid int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(strconv.Itoa(pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSamplerMeasuresARealProcess(t *testing.T) {
	dir := t.TempDir()
	child := startBusy(t)
	writePID(t, dir, "child.pid", child.Process.Pid)
	gpus := &fakeGPUs{replies: []fakeReply{{stats: []GPUStat{
		{Index: 0, Utilization: 10, MemoryUsed: 1 << 30, MemoryTotal: 80 << 30, Temperature: 40},
		{Index: 1, Utilization: 97, MemoryUsed: 70 << 30, MemoryTotal: 80 << 30, Temperature: 71},
	}}}}
	s := New(Config{GPU: gpus, Targets: func(context.Context) []Target {
		return []Target{{JobID: 7, Attempt: 2, Project: "vision", Pool: "a100", GPUs: []int{1}, Dir: dir}}
	}})
	// Right after the fork, before its exec completes, the child may show no
	// resident memory yet: poll until it does.
	var first []Sample
	for deadline := time.Now().Add(10 * time.Second); ; {
		s.SampleOnce(context.Background())
		first = s.Latest()
		if len(first) != 1 || !first[0].OK {
			t.Fatalf("first round: want one readable sample, got %+v", first)
		}
		if first[0].RSSBytes > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("want RSS > 0 from /proc within 10s, got %+v", first[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
	if first[0].Processes < 1 || first[0].Source != "proc" {
		t.Fatalf("want at least one process read from /proc, got %+v", first[0])
	}
	if got := first[0].GPUs; len(got) != 1 || got[0].Index != 1 || got[0].Utilization != 97 || got[0].MemoryUsed != 70<<30 {
		t.Fatalf("want exactly the assigned GPU 1's reading, got %+v", got)
	}
	// The child burns CPU: a later round must see more CPU time.
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		s.SampleOnce(context.Background())
		if now := s.Latest(); len(now) == 1 && now[0].CPUSeconds > first[0].CPUSeconds {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CPU seconds did not increase past %v within 20s", first[0].CPUSeconds)
		}
		<-tick.C
	}
}

func TestSamplerWalksTheSupervisorsTree(t *testing.T) {
	// The test process plays the supervisor: its children (the user's
	// process and an "orphan" re-parented to it) all count.
	dir := t.TempDir()
	a, b := startBusy(t), startBusy(t)
	writePID(t, dir, "child.pid", a.Process.Pid)
	writePID(t, dir, "shim.pid", os.Getpid())
	s := New(Config{Targets: func(context.Context) []Target { return []Target{{JobID: 1, Attempt: 1, Dir: dir}} }})
	s.SampleOnce(context.Background())
	got := s.Latest()
	if len(got) != 1 || got[0].Processes < 2 {
		t.Fatalf("want both children of the supervisor (pids %d, %d) counted, got %+v", a.Process.Pid, b.Process.Pid, got)
	}
}

func TestSamplerSharedSupervisorCountsItsAttemptOnly(t *testing.T) {
	// The test process plays a supervisor shared by two attempts: only
	// the tree under this attempt's process counts.
	dir := t.TempDir()
	a, b := startBusy(t), startBusy(t)
	writePID(t, dir, "child.pid", a.Process.Pid)
	claim := strconv.Itoa(os.Getpid()) + " 1\nshared\n"
	if err := os.WriteFile(filepath.Join(dir, "shim.pid"), []byte(claim), 0o644); err != nil {
		t.Fatal(err)
	}
	s := New(Config{Targets: func(context.Context) []Target { return []Target{{JobID: 1, Attempt: 1, Dir: dir}} }})
	s.SampleOnce(context.Background())
	got := s.Latest()
	if len(got) != 1 || got[0].Processes != 1 {
		t.Fatalf("want only the attempt's process (pid %d) counted, not the other attempt's (pid %d), got %+v", a.Process.Pid, b.Process.Pid, got)
	}
}

func TestSamplerGoneOrUnstartedAttempt(t *testing.T) {
	cases := map[string]func(dir string){
		"no child.pid yet":  func(string) {},
		"process has ended": func(dir string) { writePID(t, dir, "child.pid", deadPID(t)) },
		"garbage pid file":  func(dir string) { os.WriteFile(filepath.Join(dir, "child.pid"), []byte("x\n"), 0o644) },
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			setup(dir)
			s := New(Config{Targets: func(context.Context) []Target { return []Target{{JobID: 1, Attempt: 1, Dir: dir}} }})
			s.SampleOnce(context.Background())
			got := s.Latest()
			if len(got) != 1 || got[0].OK || got[0].RSSBytes != 0 {
				t.Fatalf("want one sample marked not OK, got %+v", got)
			}
		})
	}
}

func deadPID(t *testing.T) int {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func TestSamplerGPUErrorKeepsSampling(t *testing.T) {
	dir := t.TempDir()
	writePID(t, dir, "child.pid", startBusy(t).Process.Pid)
	gpus := &fakeGPUs{replies: []fakeReply{{err: errors.New("NVIDIA-SMI has failed")}, {stats: []GPUStat{{Index: 3, Utilization: 5}}}}}
	s := New(Config{GPU: gpus, Targets: func(context.Context) []Target { return []Target{{JobID: 1, Attempt: 1, GPUs: []int{3}, Dir: dir}} }})
	s.SampleOnce(context.Background())
	if got := s.Latest(); len(got) != 1 || !got[0].OK || len(got[0].GPUs) != 0 {
		t.Fatalf("with a failing reader: want the process sample and no GPU reading, got %+v", got)
	}
	s.SampleOnce(context.Background())
	if got := s.Latest(); len(got[0].GPUs) != 1 || got[0].GPUs[0].Utilization != 5 {
		t.Fatalf("after the reader recovers: want GPU 3's reading, got %+v", got[0].GPUs)
	}
	// No attempt holds a GPU: the reader is not called at all.
	calls := gpus.calls
	s2 := New(Config{GPU: gpus, Targets: func(context.Context) []Target { return []Target{{JobID: 1, Attempt: 1, Dir: dir}} }})
	s2.SampleOnce(context.Background())
	if gpus.calls != calls {
		t.Fatalf("GPU reader called for attempts without GPUs")
	}
}

func TestSamplerReadsTheAttemptsCgroup(t *testing.T) {
	procRoot, cgRoot, dir := t.TempDir(), t.TempDir(), t.TempDir()
	mk := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// pid 500 (the user's process, command with spaces and parens) in its
	// attempt's v2 group; 501 its child; 400 the supervisor.
	mk(filepath.Join(procRoot, "400", "stat"), "400 (trainyard) S 1 400 400 0 -1 0 0 0 0 0 5 5 0 0 20 0 1 0 1 1000 10 0 0\n")
	mk(filepath.Join(procRoot, "500", "stat"), "500 (my (odd) prog) R 400 500 500 0 -1 0 0 0 0 0 300 100 50 50 20 0 1 0 1 1000 256 0 0\n")
	mk(filepath.Join(procRoot, "501", "stat"), "501 (worker) R 500 500 500 0 -1 0 0 0 0 0 100 0 0 0 20 0 1 0 1 1000 128 0 0\n")
	mk(filepath.Join(procRoot, "500", "cgroup"), "0::/trainyard/3-1-400\n")
	mk(filepath.Join(cgRoot, "trainyard", "3-1-400", "memory.current"), "123456789\n")
	mk(filepath.Join(cgRoot, "trainyard", "3-1-400", "cpu.stat"), "usage_usec 9500000\nuser_usec 9000000\n")
	writePID(t, dir, "child.pid", 500)
	mk(filepath.Join(dir, "shim.pid"), "400 12345\n")

	targets := func(context.Context) []Target { return []Target{{JobID: 3, Attempt: 1, Dir: dir}} }
	s := New(Config{ProcRoot: procRoot, CgroupRoot: cgRoot, Targets: targets})
	s.SampleOnce(context.Background())
	got := s.Latest()[0]
	if got.Source != "cgroup" || got.RSSBytes != 123456789 || got.CPUSeconds != 9.5 || got.Processes != 2 {
		t.Fatalf("want cgroup memory 123456789, cpu 9.5s and 2 processes, got %+v", got)
	}

	// Without the group, the /proc tree counts: (300+100+50+50 + 100) ticks
	// and (256+128) pages.
	os.RemoveAll(filepath.Join(cgRoot, "trainyard"))
	s.SampleOnce(context.Background())
	got = s.Latest()[0]
	page := int64(os.Getpagesize())
	if got.Source != "proc" || got.CPUSeconds != 6 || got.RSSBytes != 384*page {
		t.Fatalf("want /proc totals 6s and %d bytes, got %+v", 384*page, got)
	}
}

func TestParseNvidiaSMI(t *testing.T) {
	cases := map[string]struct {
		in      string
		want    []GPUStat
		wantErr bool
	}{
		"two GPUs": {in: "0, 87, 40536, 81559, 63\n1, 0, 4, 81559, 31\n", want: []GPUStat{
			{Index: 0, Utilization: 87, MemoryUsed: 40536 << 20, MemoryTotal: 81559 << 20, Temperature: 63},
			{Index: 1, Utilization: 0, MemoryUsed: 4 << 20, MemoryTotal: 81559 << 20, Temperature: 31}}},
		"unsupported fields": {in: "2, [N/A], [N/A], 16384, [Not Supported]\n", want: []GPUStat{
			{Index: 2, Utilization: math.NaN(), MemoryTotal: 16384 << 20, Temperature: math.NaN()}}},
		"empty output":  {in: "\n", want: nil},
		"bad index":     {in: "GPU-x, 1, 2, 3, 4\n0, 1, 2, 3, 4\n", want: []GPUStat{{Index: 0, Utilization: 1, MemoryUsed: 2 << 20, MemoryTotal: 3 << 20, Temperature: 4}}, wantErr: true},
		"wrong columns": {in: "No devices were found\n", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseNvidiaSMI([]byte(tc.in))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if !sameStat(got[i], tc.want[i]) {
					t.Errorf("GPU %d: got %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func sameStat(a, b GPUStat) bool {
	eq := func(x, y float64) bool { return x == y || (math.IsNaN(x) && math.IsNaN(y)) }
	return a.Index == b.Index && a.MemoryUsed == b.MemoryUsed && a.MemoryTotal == b.MemoryTotal &&
		eq(a.Utilization, b.Utilization) && eq(a.Temperature, b.Temperature)
}

func TestNvidiaSMIRunsTheTool(t *testing.T) {
	dir := t.TempDir()
	args := filepath.Join(dir, "args")
	script := fmt.Sprintf("#!/bin/sh\necho \"$@\" > %s\necho '0, 55, 1024, 2048, 50'\n", args)
	tool := filepath.Join(dir, "nvidia-smi")
	if err := os.WriteFile(tool, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := NvidiaSMI{Path: tool}.ReadGPUs(context.Background())
	if err != nil || len(got) != 1 || got[0].Utilization != 55 || got[0].MemoryTotal != 2048<<20 {
		t.Fatalf("got %+v, %v", got, err)
	}
	b, _ := os.ReadFile(args)
	if want := "--query-gpu=index,utilization.gpu,memory.used,memory.total,temperature.gpu --format=csv,noheader,nounits\n"; string(b) != want {
		t.Fatalf("nvidia-smi called with %q, want %q", b, want)
	}

	failing := filepath.Join(dir, "broken-smi")
	os.WriteFile(failing, []byte("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver' >&2\nexit 9\n"), 0o755)
	if _, err := (NvidiaSMI{Path: failing}).ReadGPUs(context.Background()); err == nil || !strings.Contains(err.Error(), "could not communicate") {
		t.Fatalf("want the tool's own message in the error, got %v", err)
	}
}

// GPUSeconds adds, between two rounds, each GPU's mean utilisation times
// the time between them; a long gap counts as two rounds, and a GPU
// without a reading counts nothing.
func TestSamplerCountsGPUSeconds(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	gpus := &fakeGPUs{replies: []fakeReply{
		{stats: []GPUStat{{Index: 0, Utilization: 40}, {Index: 1, Utilization: 100}}},
		{stats: []GPUStat{{Index: 0, Utilization: 60}, {Index: 1, Utilization: 100}}},        // 10 s later
		{stats: []GPUStat{{Index: 0, Utilization: 60}, {Index: 1, Utilization: math.NaN()}}}, // 60 s later
	}}
	s := New(Config{GPU: gpus, Interval: 10 * time.Second, Now: func() time.Time { return now },
		Targets: func(context.Context) []Target { return []Target{{JobID: 1, Attempt: 1, GPUs: []int{0, 1}, Dir: dir}} }})
	s.SampleOnce(context.Background())
	if got := s.Latest()[0].GPUSeconds; got != 0 {
		t.Fatalf("after one round: %g GPU-seconds, want 0", got)
	}
	now = now.Add(10 * time.Second)
	s.SampleOnce(context.Background())
	// GPU 0 at a mean of 50% and GPU 1 at 100% for 10 s.
	if got := s.Latest()[0].GPUSeconds; math.Abs(got-15) > 1e-9 {
		t.Fatalf("after two rounds: %g GPU-seconds, want 15", got)
	}
	now = now.Add(60 * time.Second)
	s.SampleOnce(context.Background())
	// 60 s count as 20; GPU 1 has no reading.
	if got := s.Latest()[0].GPUSeconds; math.Abs(got-27) > 1e-9 {
		t.Fatalf("after a gap: %g GPU-seconds, want 15 + 0.6×20 = 27", got)
	}
}
