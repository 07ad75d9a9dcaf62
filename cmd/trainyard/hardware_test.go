package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trainyard/internal/cli"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
)

// A GPU-less 2-CPU machine against pools that declare GPUs and more CPUs.
func TestHardwareBeyond(t *testing.T) {
	hw := hardware{detected: executor.Node{CPUs: 2, Memory: 8 << 30}}
	gpus := domain.Pool{Name: "gpu", Nodes: []domain.Node{{Name: "a", CPUs: 16, Memory: 128 << 30, GPUs: []int{0, 1, 2, 3}}}}
	small := domain.Pool{Name: "small", Nodes: []domain.Node{{Name: "b", CPUs: 1, Memory: 1 << 30}}}
	if b, sim := hw.pool(gpus); b != "declares 4 GPUs (indices 0,1,2,3), 16 CPUs, 128GiB memory; this machine has 0 GPUs, 2 CPUs, 8GiB memory" || sim {
		t.Errorf("pool gpu: %q, simulated %v", b, sim)
	}
	if b, _ := hw.pool(small); b != "" {
		t.Errorf("a pool within the hardware: %q", b)
	}
	withGPUs := hardware{detected: executor.Node{CPUs: 32, Memory: 256 << 30, GPUs: []int{0, 1, 2, 3}}}
	if b, _ := withGPUs.pool(gpus); b != "" {
		t.Errorf("a pool within a GPU machine: %q", b)
	}

	var buf bytes.Buffer
	hw.warn(slog.New(slog.NewTextHandler(&buf, nil)), nil, []domain.Pool{gpus, small})
	if !strings.Contains(buf.String(), "level=WARN") || !strings.Contains(buf.String(), "pool=gpu") ||
		!strings.Contains(buf.String(), "simulated: true") || strings.Contains(buf.String(), "pool=small") {
		t.Errorf("warning at start:\n%s", buf.String())
	}
	if !strings.Contains(hw.summary([]domain.Pool{gpus, small}), "pool(s) gpu declare more") {
		t.Errorf("status: %q", hw.summary([]domain.Pool{gpus, small}))
	}

	hw.simulated = true
	buf.Reset()
	hw.warn(slog.New(slog.NewTextHandler(&buf, nil)), nil, []domain.Pool{gpus})
	if buf.Len() != 0 {
		t.Errorf("warned though simulated:\n%s", buf.String())
	}
	if _, sim := hw.pool(gpus); !sim {
		t.Error("pool gpu is not marked simulated")
	}
	if !strings.HasPrefix(hw.summary([]domain.Pool{gpus}), "simulated: ") {
		t.Errorf("status: %q", hw.summary([]domain.Pool{gpus}))
	}
}

// pool ls and status say when pools declare more than this machine has,
// and that it is simulated once the config says so.
func TestPoolListShowsDeclaredBeyondHardware(t *testing.T) {
	for _, simulated := range []bool{false, true} {
		data := t.TempDir()
		path := filepath.Join(t.TempDir(), "server.yaml")
		doc := "pools:\n  - {name: huge, nodes: [{name: n, cpus: 100000, memory: 1GiB, gpus: [1000]}]}\n"
		if simulated {
			doc += "inventory: {simulated: true}\n"
		}
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := loadServerConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Data = data
		startServerWith(t, cfg)
		run := func(args ...string) string {
			root := rootCommand()
			var stdout bytes.Buffer
			root.SetOut(&stdout)
			root.SetErr(io.Discard)
			root.SetArgs(args)
			if code := cli.ExecuteContext(context.Background(), root); code != 0 {
				t.Fatalf("trainyard %s: exit %d", strings.Join(args, " "), code)
			}
			return stdout.String()
		}
		ls, status := run("pool", "ls"), run("status")
		wantLS, wantStatus := "warning: pool huge declares 1 GPUs (indices 1000), 100000 CPUs", "hardware: pool(s) huge declare more"
		if simulated {
			wantLS, wantStatus = "pool huge is simulated: it declares 1 GPUs", "hardware: simulated: pool(s) huge"
		}
		if !strings.Contains(ls, wantLS) {
			t.Errorf("simulated %v: pool ls lacks %q:\n%s", simulated, wantLS, ls)
		}
		if !strings.Contains(status, wantStatus) {
			t.Errorf("simulated %v: status lacks %q:\n%s", simulated, wantStatus, status)
		}
	}
}
