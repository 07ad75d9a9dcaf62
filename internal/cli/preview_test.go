package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"trainyard/internal/api/apitypes"
)

// submit --dry-run shows what would be submitted against a real server and
// submits nothing; it refuses what a submit refuses.
func TestSubmitDryRun(t *testing.T) {
	h := newContractHarness(t) // holds job 1
	dir := t.TempDir()
	file := writeSpec(t, dir, "probe.yaml", "name: probe\nentrypoint: [\"true\"]\nresources: {gpus: 1, cpus: 2, memory: 4GiB}\npolicy: {timeout: 90m}\n")
	r := h.mustRun(0, "submit", file, "--dry-run")
	for _, want := range []string{"dry run: nothing was submitted", "job      probe (project default, priority normal)",
		"pool     default", "request  1 GPU, 2 CPUs, 4GiB, 1 node; timeout 1h30m", "queue    not known", "cost     0.00 USD at most", "spec     sha256:"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = h.mustRun(0, "submit", file, "--dry-run", "-o", "json")
	var pv apitypes.SubmitPreview
	if err := json.Unmarshal([]byte(r.stdout), &pv); err != nil || !pv.DryRun || pv.Resources.GPUs != 1 {
		t.Fatalf("-o json: %v %s", err, r.stdout)
	}
	if ls := h.mustRun(0, "ls", "-o", "json").stdout; strings.Contains(ls, "probe") {
		t.Fatalf("a dry run submitted a job: %s", ls)
	}
	big := writeSpec(t, dir, "big.yaml", "name: big\nentrypoint: [\"true\"]\nresources: {gpus: 8}\n")
	if r := h.run("submit", big, "--dry-run"); r.code != ExitUsage || !strings.Contains(r.stderr, "resources.gpus") {
		t.Errorf("oversized dry run: exit %d, stderr %q; want %d naming resources.gpus", r.code, r.stderr, ExitUsage)
	}
	if r := h.run("submit", file, "--dry-run", "--wait"); r.code != ExitUsage || !strings.Contains(r.stderr, "nothing to --wait for") {
		t.Errorf("--dry-run --wait: exit %d, stderr %q", r.code, r.stderr)
	}
}
