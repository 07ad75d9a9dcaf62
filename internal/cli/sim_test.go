package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

func TestSimText(t *testing.T) {
	h := newHarness(t)
	r := h.mustRun(0, "sim", filepath.Join("..", "simulate", "testdata", "gang.yaml"))
	for _, want := range []string{"Makespan:", "POOL", "UTILISATION", "PROJECT", "WAIT-P99", "quads"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	if len(h.srv.seenRequests()) != 0 {
		t.Errorf("sim talked to the server: %v", h.srv.seenRequests())
	}
}

func TestSimJSON(t *testing.T) {
	h := newHarness(t)
	r := h.mustRun(0, "sim", filepath.Join("..", "simulate", "testdata", "gang.yaml"), "-o", "json")
	var v struct {
		Submitted int `json:"submitted"`
		Drained   bool
		Pools     []struct{ Pool string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, r.stdout)
	}
	if v.Submitted != 250 || !v.Drained || len(v.Pools) != 1 || v.Pools[0].Pool != "multi" {
		t.Errorf("report %+v; want 250 jobs submitted, drained, pool multi", v)
	}
}

func TestSimInvalidWorkloadExit2(t *testing.T) {
	h := newHarness(t)
	file := writeSpec(t, t.TempDir(), "w.yaml", "seed: 1\nduration: 1h\nworkers: 3\n")
	r := h.mustRun(2, "sim", file)
	for _, want := range []string{"error: workload " + file + " is invalid", `workers (line 3): unknown field "workers"`, "pools: is required"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if r.stdout != "" {
		t.Errorf("stdout = %q, want nothing", r.stdout)
	}
}
