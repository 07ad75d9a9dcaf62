package e2e

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// provided are the tour lines the test does not run, and why: what they
// set up, the test provides itself.
var provided = map[string]string{
	"go install ./cmd/...": "the test builds the binaries and puts them on PATH",
}

// tourLines are the lines of the README's "A tour of the CLI" block.
func tourLines(t *testing.T) []string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(file)), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	state := 0 // 0: before the section, 1: in it, 2: in its code block
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case state == 0 && line == "## A tour of the CLI":
			state = 1
		case state == 1 && strings.HasPrefix(line, "```"):
			state = 2
		case state == 2 && strings.HasPrefix(line, "```"):
			return lines
		case state == 2 && strings.TrimSpace(line) != "":
			lines = append(lines, line)
		}
	}
	t.Fatal("README.md has no code block under \"## A tour of the CLI\"")
	return nil
}

// TestReadmeTour runs every line of the README's CLI tour, in order, with
// bash, from the checkout, against a fresh server on its embedded
// defaults; each must exit 0.
func TestReadmeTour(t *testing.T) {
	lines := tourLines(t)
	if len(lines) < 20 {
		t.Fatalf("the tour has %d lines; the README section was not found whole", len(lines))
	}
	s := startServer(t, serverOpts{defaults: true})
	work := repoRoot()
	t.Cleanup(func() { os.RemoveAll(filepath.Join(work, "run1")) }) // artifacts get --dest ./run1
	env := append(s.env(), "PATH="+filepath.Dir(binary)+":"+os.Getenv("PATH"), "WANDB_KEY=not-a-real-key")
	for i, line := range lines {
		if why, ok := skipReason(line); ok {
			t.Logf("line %d not run (%s): %s", i+1, why, line)
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", line)
		cmd.Dir, cmd.Env = work, env
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("README tour line %d failed (%v):\n  %s\n%s", i+1, err, line, out)
		}
	}
}

func skipReason(line string) (string, bool) {
	for prefix, why := range provided {
		if strings.HasPrefix(line, prefix) {
			return why, true
		}
	}
	return "", false
}
