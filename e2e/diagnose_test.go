package e2e

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

func TestWhyNamesMissingDependency(t *testing.T) {
	s := startServer(t, serverOpts{})
	job := s.submit(`name: needs-torchvision
entrypoint: |
  echo 'loading model'
  echo 'Traceback (most recent call last):' >&2
  echo '  File "train.py", line 3, in <module>' >&2
  echo "ModuleNotFoundError: No module named 'torchvision'" >&2
  exit 1
`)
	id := strconv.FormatInt(job.ID, 10)
	if j := s.waitState(job.ID, time.Minute, "succeeded", "failed"); j.State != "failed" {
		t.Fatalf("job ended %s, want failed", j.State)
	}
	why := s.mustCLI("why", id)
	t.Logf("trainyard why %s:\n%s", id, why)
	for _, want := range []string{
		"class: missing-dependency",
		"lacks a dependency: torchvision",
		"log | ModuleNotFoundError: No module named 'torchvision'",
		"attempt 1 exited with code 1",
		"hint: install the package that provides torchvision",
	} {
		if !strings.Contains(why, want) {
			t.Errorf("why lacks %q:\n%s", want, why)
		}
	}
	var w apitypes.Why
	if err := json.Unmarshal([]byte(s.mustCLI("why", "-o", "json", id)), &w); err != nil {
		t.Fatal(err)
	}
	if w.Class != "missing-dependency" {
		t.Errorf("why -o json class = %q", w.Class)
	}

	// Server-side filters: grep, grep with tail, since.
	if got := s.mustCLI("logs", id, "--grep", "Error|Traceback"); got != "Traceback (most recent call last):\nModuleNotFoundError: No module named 'torchvision'\n" {
		t.Errorf("logs --grep = %q", got)
	}
	if got := s.mustCLI("logs", id, "--grep", "^[A-Z]", "--tail", "1"); got != "ModuleNotFoundError: No module named 'torchvision'\n" {
		t.Errorf("logs --grep --tail 1 = %q", got)
	}
	if got := s.mustCLI("logs", id, "--since", "1h"); strings.Count(got, "\n") != 4 {
		t.Errorf("logs --since 1h = %q, want all 4 lines", got)
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if got := s.mustCLI("logs", id, "--since", future); got != "" {
		t.Errorf("logs --since %s = %q, want nothing", future, got)
	}
	out, errOut, code := s.cli("logs", id, "--grep", "(")
	if code == 0 || !strings.Contains(errOut, "grep") {
		t.Errorf("logs --grep '(': exit %d, stdout %q, stderr %q; want a failure naming grep", code, out, errOut)
	}
}
