package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"trainyard/internal/metrics/sample"
)

// sampleHistory hands the service the sampler's readings of an attempt,
// GPU utilisation as a fraction and unread GPUs left out; without a
// sampler it is nil, so the service keeps none.
func TestSampleHistoryConvertsTheSamplersReadings(t *testing.T) {
	if sampleHistory(nil) != nil {
		t.Fatal("sampleHistory(nil) is not nil")
	}
	procRoot, dir := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(procRoot, "700"), 0o755)
	stat := "700 (train) R 1 700 700 0 -1 0 0 0 0 0 250 0 0 0 20 0 1 0 1 1000 10 0 0\n" // 2.5 CPU seconds
	if err := os.WriteFile(filepath.Join(procRoot, "700", "stat"), []byte(stat), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "child.pid"), []byte("700\n"), 0o644)
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	gpus := gpuReply{{Index: 0, Utilization: 40}}
	s := sample.New(sample.Config{ProcRoot: procRoot, CgroupRoot: t.TempDir(), GPU: gpus, Now: func() time.Time { return now },
		Targets: func(context.Context) []sample.Target {
			return []sample.Target{{JobID: 5, Attempt: 1, GPUs: []int{0, 1}, Dir: dir, MemoryLimit: 4 << 30}}
		}})
	s.SampleOnce(context.Background())
	h := sampleHistory(s)
	if got := h(5, 2); got != nil {
		t.Errorf("another attempt: %+v, want none", got)
	}
	got := h(5, 1)
	if len(got) != 1 || !got[0].At.Equal(now) || got[0].CPUSeconds != 2.5 || got[0].RSSBytes != 10*int64(os.Getpagesize()) || got[0].MemoryLimit != 4<<30 {
		t.Fatalf("got %+v, want the one reading", got)
	}
	if u := got[0].GPUUtil; len(u) != 1 || u[0] != 0.4 {
		t.Errorf("GPU utilisation %v, want GPU 0 at 0.4 and unread GPU 1 left out", u)
	}
}

// gpuReply is a GPU reader that always reads the same.
type gpuReply []sample.GPUStat

func (g gpuReply) ReadGPUs(context.Context) ([]sample.GPUStat, error) { return g, nil }
