package cgroup

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func detect(t *testing.T) Hierarchy {
	t.Helper()
	h, err := Detect("")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no writable cgroup memory controller here: %v; CI machines must have one", err)
		}
		t.Skipf("no writable cgroup memory controller here: %v", err)
	}
	return h
}

func TestCreateSetsLimitAndRemoves(t *testing.T) {
	h := detect(t)
	name := "test-" + strconv.Itoa(os.Getpid())
	g, err := h.Create(name, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	limitFile := map[Version]string{V1: "memory.limit_in_bytes", V2: "memory.max"}[h.Version]
	b, err := os.ReadFile(filepath.Join(g.Path(), limitFile))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != strconv.Itoa(64<<20) {
		t.Errorf("%s = %s, want %d", limitFile, got, 64<<20)
	}
	if n, known, err := g.OOMKills(); err != nil || (known && n != 0) {
		t.Errorf("OOMKills of a fresh group = %d, %v, %v; want 0", n, known, err)
	}
	if err := g.Kill(time.Second); err != nil {
		t.Errorf("Kill on an empty group = %v", err)
	}
	if err := g.Remove(time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.Path()); !os.IsNotExist(err) {
		t.Errorf("group still exists after Remove: %v", err)
	}
	if err := g.Remove(time.Second); err != nil {
		t.Errorf("second Remove: %v, want nil", err)
	}
}

// TestDetectAtOnce: detections running at once in one process (executors
// made in parallel) each find the controller. They once shared one probe
// group, and one removed it while another looked inside: that executor ran
// its jobs without their memory limits.
func TestDetectAtOnce(t *testing.T) {
	detect(t)
	const n = 16
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := Detect("")
			if err == nil {
				_, err = DetectTracking("")
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("Detect at once: %v", err)
		}
	}
}

func TestCreateRejectsBadInput(t *testing.T) {
	h := Hierarchy{Version: V2, Mount: t.TempDir(), Parent: t.TempDir()}
	cases := map[string]struct {
		name  string
		limit int64
	}{
		"zero limit":     {"a", 0},
		"negative limit": {"a", -1},
		"slash in name":  {"a/b", 1 << 20},
		"dot-dot":        {"..", 1 << 20},
		"empty name":     {"", 1 << 20},
	}
	for name, tc := range cases {
		if _, err := h.Create(tc.name, tc.limit); err == nil {
			t.Errorf("%s: Create(%q, %d) succeeded, want an error", name, tc.name, tc.limit)
		}
	}
}

func TestDetectExplainsFailure(t *testing.T) {
	root := t.TempDir()
	_, err := Detect(root)
	if err == nil || !strings.Contains(err.Error(), root) {
		t.Errorf("Detect(%q) = %v, want an error naming the path", root, err)
	}
}

// TestCPUQuota: an attempt planned with CPUs gets that quota on its job's
// group in the hierarchy DetectCPU found (v2 cpu.max, v1 cpu.cfs_quota_us).
func TestCPUQuota(t *testing.T) {
	h, err := DetectCPU("")
	if err != nil {
		t.Skipf("no writable cgroup cpu controller here: %v", err)
	}
	a, err := Layout{CPU: &h}.Plan("test-cpu-"+strconv.Itoa(os.Getpid()), Limits{CPUs: 1.5})
	if err != nil || a == nil {
		t.Fatalf("Plan = %v, %v", a, err)
	}
	if err := a.Create(); err != nil {
		t.Fatal(err)
	}
	defer a.Remove(time.Second)
	g := a.CPUGroup()
	if g == nil {
		t.Fatal("no CPU group")
	}
	if got := g.CPUQuota(); got != 1.5 {
		t.Errorf("quota = %g CPUs, want 1.5", got)
	}
	if err := a.Remove(time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.Path()); !os.IsNotExist(err) {
		t.Errorf("group still exists after Remove: %v", err)
	}
}
