package sample

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// fakeProcs is a /proc fixture of attempts: each attempt's user process
// (pid 1000+i) with the CPU ticks and resident pages the test sets.
type fakeProcs struct {
	t    *testing.T
	root string
}

func newFakeProcs(t *testing.T) *fakeProcs { return &fakeProcs{t: t, root: t.TempDir()} }

// set writes process pid's stat with utime ticks and rss pages, and
// returns the attempt directory naming it as the user's process.
func (f *fakeProcs) set(pid, ticks, pages int) string {
	f.t.Helper()
	if err := os.MkdirAll(filepath.Join(f.root, fmt.Sprint(pid)), 0o755); err != nil {
		f.t.Fatal(err)
	}
	stat := fmt.Sprintf("%d (train) R 1 %d %d 0 -1 0 0 0 0 0 %d 0 0 0 20 0 1 0 1 1000 %d 0 0\n", pid, pid, pid, ticks, pages)
	if err := os.WriteFile(filepath.Join(f.root, fmt.Sprint(pid), "stat"), []byte(stat), 0o644); err != nil {
		f.t.Fatal(err)
	}
	dir := filepath.Join(f.root, "attempts", fmt.Sprint(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	writePID(f.t, dir, "child.pid", pid)
	return dir
}

// The history keeps the last HistoryLen readings of an attempt, oldest
// first, with their CPU, memory, limit and GPU utilisation; a round
// that cannot read the attempt adds nothing, and Latest is as before.
func TestHistoryKeepsTheLastReadings(t *testing.T) {
	procs := newFakeProcs(t)
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	gpus := &fakeGPUs{}
	for r := range 5 {
		util := []GPUStat{{Index: 2, Utilization: float64(10 * r)}, {Index: 5, Utilization: 50}}
		if r == 3 {
			util = util[1:] // GPU 2 not read this round
		}
		gpus.replies = append(gpus.replies, fakeReply{stats: util})
	}
	dir := procs.set(1000, 0, 1)
	s := New(Config{ProcRoot: procs.root, CgroupRoot: t.TempDir(), GPU: gpus, HistoryLen: 3, Now: func() time.Time { return now },
		Targets: func(context.Context) []Target {
			return []Target{{JobID: 4, Attempt: 2, GPUs: []int{2, 5}, Dir: dir, MemoryLimit: 8 << 30}}
		}})
	if got := s.History(4, 2); got != nil {
		t.Fatalf("before any round: %+v, want none", got)
	}
	for r := range 5 {
		procs.set(1000, 100*r, 10*(r+1)) // r CPU seconds, 10(r+1) pages
		s.SampleOnce(context.Background())
		now = now.Add(15 * time.Second)
	}
	got := s.History(4, 2)
	if len(got) != 3 {
		t.Fatalf("after 5 rounds with HistoryLen 3: %d readings, want 3: %+v", len(got), got)
	}
	page := int64(os.Getpagesize())
	start := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	for i, x := range got {
		r := i + 2 // rounds 2, 3, 4 remain
		if !x.At.Equal(start.Add(time.Duration(r)*15*time.Second)) || x.CPUSeconds != float64(r) ||
			x.RSSBytes != int64(10*(r+1))*page || x.MemoryLimit != 8<<30 {
			t.Errorf("reading %d: %+v, want round %d's", i, x, r)
		}
		if len(x.GPUs) != 2 || x.GPUs[0].Index != 2 || x.GPUs[1].Index != 5 || x.GPUs[1].Utilization != 50 {
			t.Fatalf("reading %d GPUs: %+v, want GPUs 2 and 5", i, x.GPUs)
		}
		if u := x.GPUs[0].Utilization; (r == 3) != math.IsNaN(u) || (r != 3 && u != float64(10*r)) {
			t.Errorf("reading %d: GPU 2 at %v, want %v (NaN when not read)", i, u, 10*r)
		}
	}
	if l := s.Latest(); len(l) != 1 || !l[0].OK || l[0].CPUSeconds != 4 || len(l[0].GPUs) != 2 {
		t.Errorf("Latest: %+v, want the last round's sample alone", l)
	}

	// A round that cannot read the attempt (its process is gone) adds
	// nothing and keeps what there is.
	os.RemoveAll(filepath.Join(procs.root, "1000"))
	s.SampleOnce(context.Background())
	if again := s.History(4, 2); !slices.EqualFunc(again, got, func(a, b Reading) bool { return a.At.Equal(b.At) }) {
		t.Errorf("after an unreadable round: %+v, want %+v", again, got)
	}
	// The caller's copy is its own.
	got[0].GPUs[1].Utilization = -1
	if s.History(4, 2)[0].GPUs[1].Utilization != 50 {
		t.Error("History returned the sampler's own memory")
	}
}

// An ended attempt's readings are kept for HistoryGrace, and only the
// HistoryEnded ended most recently; a running one's are never dropped.
// An attempt never read has none.
func TestHistoryEvictsEndedAttempts(t *testing.T) {
	procs := newFakeProcs(t)
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	running := map[int64]bool{1: true, 2: true, 3: true, 4: true}
	dirs := map[int64]string{}
	for id := range running {
		dirs[id] = procs.set(1000+int(id), 100, 10)
	}
	never := t.TempDir() // an attempt that never started: no child.pid
	s := New(Config{ProcRoot: procs.root, CgroupRoot: t.TempDir(), HistoryGrace: time.Minute, HistoryEnded: 2,
		Now: func() time.Time { return now },
		Targets: func(context.Context) []Target {
			ts := []Target{{JobID: 9, Attempt: 1, Dir: never}}
			for id := int64(1); id <= 4; id++ {
				if running[id] {
					ts = append(ts, Target{JobID: id, Attempt: 1, Dir: dirs[id]})
				}
			}
			return ts
		}})
	round := func() {
		s.SampleOnce(context.Background())
		now = now.Add(15 * time.Second)
	}
	kept := func() []int64 {
		var ids []int64
		for id := int64(1); id <= 4; id++ {
			if len(s.History(id, 1)) > 0 {
				ids = append(ids, id)
			}
		}
		return ids
	}
	round()
	round()
	if got := kept(); !slices.Equal(got, []int64{1, 2, 3, 4}) {
		t.Fatalf("all running: history of %v, want 1-4", got)
	}
	if s.History(9, 1) != nil || len(s.hist) != 4 {
		t.Errorf("an attempt never read has history %+v (rings: %d)", s.History(9, 1), len(s.hist))
	}
	// 1 ends, then 2, then 3: with two ended kept, 1's goes when 3 ends.
	running[1] = false
	round()
	running[2] = false
	round()
	if got := kept(); !slices.Equal(got, []int64{1, 2, 3, 4}) || len(s.History(1, 1)) != 2 {
		t.Fatalf("two ended within the grace: history of %v, want 1-4 (1 with its 2 readings)", got)
	}
	running[3] = false
	round()
	if got := kept(); !slices.Equal(got, []int64{2, 3, 4}) {
		t.Fatalf("three ended, two kept: history of %v, want 2, 3, 4", got)
	}
	// A minute after they ended, 2's and 3's go; 4 runs on.
	for range 4 {
		round()
	}
	if got := kept(); !slices.Equal(got, []int64{4}) || len(s.hist) != 1 {
		t.Fatalf("past the grace: history of %v (rings: %d), want 4's alone", got, len(s.hist))
	}
	if n := len(s.History(4, 1)); n != 9 {
		t.Errorf("running attempt 4: %d readings, want all 9 rounds'", n)
	}
}

// A negative HistoryLen keeps no history; Latest works as before.
func TestHistoryOff(t *testing.T) {
	procs := newFakeProcs(t)
	dir := procs.set(1000, 100, 10)
	s := New(Config{ProcRoot: procs.root, CgroupRoot: t.TempDir(), HistoryLen: -1,
		Targets: func(context.Context) []Target { return []Target{{JobID: 1, Attempt: 1, Dir: dir}} }})
	s.SampleOnce(context.Background())
	if h := s.History(1, 1); h != nil || len(s.Latest()) != 1 {
		t.Fatalf("history %+v, latest %+v; want no history and the latest sample", h, s.Latest())
	}
}

// The ring stays within its size however many rounds run, and a reading
// not newer than the last (a concurrent round's) is not added.
func TestHistoryRingBound(t *testing.T) {
	r := &ring{gpus: []int{0}}
	at := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	for i := range 1000 {
		r.add(&Sample{At: at.Add(time.Duration(i) * time.Second), OK: true, CPUSeconds: float64(i), GPUs: []GPUStat{{Index: 0, Utilization: float64(i % 100)}}}, 360)
	}
	r.add(&Sample{At: at, OK: true, CPUSeconds: -1}, 360)
	if len(r.rs) != 360 || cap(r.rs) != 360 || len(r.util) != 360 || cap(r.util) != 360 {
		t.Fatalf("ring holds %d readings (cap %d) and %d GPU values, want 360", len(r.rs), cap(r.rs), len(r.util))
	}
	got := r.readings()
	if got[0].CPUSeconds != 640 || got[359].CPUSeconds != 999 || got[359].GPUs[0].Utilization != 99 {
		t.Fatalf("oldest %+v, newest %+v; want readings 640 to 999", got[0], got[359])
	}
}
