package cli

import (
	"slices"
	"strings"
	"testing"
)

// complete runs cobra's hidden __complete command, as a shell does, and
// returns the offered completions (without the trailing directive line).
func complete(t *testing.T, h *harness, args ...string) []string {
	t.Helper()
	r := h.mustRun(0, append([]string{"__complete"}, args...)...)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) == 0 || !strings.HasPrefix(lines[len(lines)-1], ":") {
		t.Fatalf("__complete %v: no directive line in %q", args, r.stdout)
	}
	return lines[:len(lines)-1]
}

func TestCompletionFromLiveServer(t *testing.T) {
	h := newContractHarness(t) // job 1 "first", pool default, project default
	h.mustRun(0, "submit", writeSpec(t, t.TempDir(), "j.yaml", "name: second\nentrypoint: [\"true\"]\n"))
	h.mustRun(0, "cancel", "2")

	want := []string{"2\tcanceled second", "1\tqueued first"} // newest first
	for _, argv := range [][]string{{"show", ""}, {"logs", ""}, {"rerun", ""}, {"artifacts", "ls", ""}} {
		if got := complete(t, h, argv...); !slices.Equal(got, want) {
			t.Errorf("complete %v = %q, want %q", argv, got, want)
		}
	}
	if got := complete(t, h, "why", "2"); !slices.Equal(got, want[:1]) {
		t.Errorf("complete why 2 = %q, want %q", got, want[:1])
	}
	// compare and metrics take several ids: each offers those not given yet.
	for _, argv := range [][]string{{"compare", "1", ""}, {"metrics", "1", ""}} {
		if got := complete(t, h, argv...); !slices.Equal(got, want[:1]) {
			t.Errorf("complete %v = %q, want %q", argv, got, want[:1])
		}
	}
	if got := complete(t, h, "compare", "1", "2", ""); len(got) != 0 {
		t.Errorf("complete compare 1 2 <tab> = %q, want nothing: both ids are given", got)
	}
	if got := complete(t, h, "show", "1", ""); len(got) != 0 {
		t.Errorf("complete show 1 <tab> = %q, want nothing after the one id", got)
	}
	if got := complete(t, h, "pool", "show", ""); len(got) != 1 || !strings.HasPrefix(got[0], "default\t2 GPUs") {
		t.Errorf("complete pool show = %q, want the pool default with its GPUs", got)
	}
	h.mustRun(0, "project", "set", "vision", "--shares", "2")
	if got := complete(t, h, "quota", "set", "v"); !slices.Equal(got, []string{"vision"}) {
		t.Errorf("complete quota set v = %q, want the project vision", got)
	}
	if got := complete(t, h, "quota", "set", "vision", ""); len(got) != 1 || !strings.HasPrefix(got[0], "default\t") {
		t.Errorf("complete quota set vision <tab> = %q, want the pool default", got)
	}
	if got := complete(t, h, "queue", "--pool", "d"); len(got) != 1 || !strings.HasPrefix(got[0], "default") {
		t.Errorf("complete queue --pool d = %q", got)
	}
	if got := complete(t, h, "ls", "--state", "run"); !slices.Equal(got, []string{"running"}) {
		t.Errorf("complete ls --state run = %q, want running", got)
	}
	if got := complete(t, h, "ls", "-o", ""); !slices.Equal(got, []string{"table", "wide", "json", "yaml"}) {
		t.Errorf("complete ls -o = %q", got)
	}
	if got := complete(t, h, "metrics", "1", "-o", "c"); !slices.Equal(got, []string{"csv"}) {
		t.Errorf("complete metrics -o c = %q, want csv", got)
	}

	// A server that cannot be reached offers nothing, quickly, and no error.
	h.vars[EnvServer] = "http://127.0.0.1:1"
	if got := complete(t, h, "show", ""); len(got) != 0 {
		t.Errorf("complete with no server = %q", got)
	}
}
