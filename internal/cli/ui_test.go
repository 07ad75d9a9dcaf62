package cli

import (
	"regexp"
	"strings"
	"testing"
)

// TestUIPrintsASignInLink: the link is the server's sign-in page with a
// token of its own after '#', labelled so the page spends it.
func TestUIPrintsASignInLink(t *testing.T) {
	h := newContractHarness(t)
	r := h.mustRun(0, "ui")
	m := regexp.MustCompile(`^(.+)/signin#token=(ty_[0-9a-f]+)\n$`).FindStringSubmatch(r.stdout)
	if m == nil || m[1] != h.vars[EnvServer] {
		t.Fatalf("ui printed %q; want %s/signin#token=ty_…", r.stdout, h.vars[EnvServer])
	}
	if m[2] == h.vars[EnvToken] {
		t.Error("the link holds the CLI's own token, not one of its own")
	}
	if !strings.Contains(r.stderr, "within 10 minutes") {
		t.Errorf("stderr %q does not say how long the link lasts", r.stderr)
	}
	ls := h.mustRun(0, "token", "ls").stdout
	if !strings.Contains(ls, "web sign-in link") {
		t.Errorf("token ls does not show the link's token:\n%s", ls)
	}
}
