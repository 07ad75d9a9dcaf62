package e2e

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// envInt is the integer environment variable name, or def when unset.
func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// submit --wait returns only once the job's outputs are recorded: an
// `artifacts ls` right after lists them, run after run, however large the
// output. TRAINYARD_E2E_WAIT_RUNS (default 5) and
// TRAINYARD_E2E_WAIT_OUTPUT_MB (default 50) size the test; the issue's
// check is 100 runs of 300 MB.
func TestSubmitWaitReturnsWithOutputsRecorded(t *testing.T) {
	runs := envInt(t, "TRAINYARD_E2E_WAIT_RUNS", 5)
	mb := envInt(t, "TRAINYARD_E2E_WAIT_OUTPUT_MB", 50)
	s := startServer(t, serverOpts{})
	spec := filepath.Join(s.dir, "big.yaml")
	if err := os.WriteFile(spec, []byte(`name: big-output
entrypoint: [sh, -c, 'head -c `+strconv.Itoa(mb)+`M /dev/zero > $TRAINYARD_OUTPUT_DIR/model.bin && echo done > $TRAINYARD_OUTPUT_DIR/report.txt']
`), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for i := range runs {
		out, errOut, code := s.cli("submit", "--wait", spec)
		if code != 0 {
			t.Fatalf("run %d: submit --wait: exit %d\n%s%s", i, code, out, errOut)
		}
		id := strings.TrimSpace(out)
		ls, errOut, code := s.cli("artifacts", "ls", id)
		if code != 0 || !strings.Contains(ls, "model.bin") || !strings.Contains(ls, "report.txt") {
			t.Fatalf("run %d: artifacts ls %s right after submit --wait: exit %d\n%s%s", i, id, code, ls, errOut)
		}
		// What is listed is what was written, whole.
		n, _ := strconv.ParseInt(id, 10, 64)
		dir := s.job(n).OutputDir
		if fi, err := os.Stat(filepath.Join(dir, "model.bin")); err != nil || fi.Size() != int64(mb)<<20 {
			t.Fatalf("run %d: model.bin: %v %v", i, fi, err)
		}
		removeOutputs(t, dir) // keep the disk use of many runs to one output
	}
	t.Logf("%d runs with a %d MB output: every artifacts ls right after submit --wait listed the outputs (%s)",
		runs, mb, time.Since(start).Round(time.Second))
}

// removeOutputs removes a job's output directory, read-only once the job
// succeeded.
func removeOutputs(t *testing.T, dir string) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
}
