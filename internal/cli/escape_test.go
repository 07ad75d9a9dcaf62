package cli

import (
	"encoding/json"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"trainyard/internal/api/apitypes"
)

func TestText(t *testing.T) {
	for in, want := range map[string]string{
		"plain text, ünïcode":       "plain text, ünïcode",
		"two\nlines\tand a tab":     "two\nlines\tand a tab",
		"\x1b[2J\x1b[Hcleared":      `\x1b[2J\x1b[Hcleared`,
		"over\rwrite\b":             `over\x0dwrite\x08`,
		"c1 \u009b2J del \x7f":      `c1 \u009b2J del \x7f`,
		"evil\u202etxt.exe\u2066":   `evil\u202etxt.exe\u2066`,
		"not utf-8 \x9b\xff":        `not utf-8 \x9b\xff`,
		"lrm\u200e alm\u061c":       `lrm\u200e alm\u061c`,
		"emoji 🚀 and arrows → fine": "emoji 🚀 and arrows → fine",
	} {
		if got := text(in); got != want {
			t.Errorf("text(%q) = %q, want %q", in, got, want)
		}
	}
	if got := cell("a\tb\nc\x1b"); got != `a b c\x1b` {
		t.Errorf("cell = %q", got)
	}
}

// drives reports the first character of out that could drive a terminal
// (newline and tab aside), or "".
func drives(out string) string {
	for _, r := range out {
		if unsafeInText(r) {
			return strings.TrimPrefix(text(string(r)), `\`)
		}
	}
	return ""
}

// TestStoredEscapesAreShownNotObeyed: text stored before the server refused
// control characters (or written by a job) is printed escaped in every
// format, and JSON and YAML still read back to the stored strings.
func TestStoredEscapesAreShownNotObeyed(t *testing.T) {
	h := newHarness(t)
	evil := "done\x1b[2J\x1b[H\rjob succeeded\u009b\u202eexe.txt"
	h.srv.addJob(apitypes.Job{Name: "resnet", Project: "vision", State: "canceled", Reason: "CanceledByUser",
		Message: "canceled by ana: " + evil, Submitter: "ana\x1b]0;owned\x07",
		Transitions: []apitypes.Transition{{From: "queued", To: "canceled", Actor: "ana", Message: evil}}})
	h.srv.addJob(apitypes.Job{Name: "old", State: "succeeded\x1b]52;c;cm0gLXJmIH4=\x07"})

	for _, args := range [][]string{{"ls"}, {"ls", "-o", "wide"}, {"show", "1"}} {
		r := h.mustRun(0, args...)
		if c := drives(r.stdout); c != "" {
			t.Errorf("trainyard %s prints %s raw:\n%q", strings.Join(args, " "), c, r.stdout)
		}
		if args[0] == "show" && !strings.Contains(r.stdout, `done\x1b[2J\x1b[H job succeeded\u009b\u202eexe.txt`) {
			t.Errorf("show does not show the escaped message:\n%s", r.stdout)
		}
	}
	r := h.mustRun(0, "show", "1", "-o", "json")
	var j apitypes.Job
	if c := drives(r.stdout); c != "" || json.Unmarshal([]byte(r.stdout), &j) != nil || j.Message != "canceled by ana: "+evil {
		t.Errorf("show -o json: raw %q, message %q:\n%s", c, j.Message, r.stdout)
	}
	r = h.mustRun(0, "show", "1", "-o", "yaml")
	var y struct {
		Message   string `yaml:"message"`
		Submitter string `yaml:"submitter"`
	}
	if c := drives(r.stdout); c != "" || yaml.Unmarshal([]byte(r.stdout), &y) != nil || y.Message != "canceled by ana: "+evil || y.Submitter != "ana\x1b]0;owned\x07" {
		t.Errorf("show -o yaml: raw %q, read back %+v:\n%s", c, y, r.stdout)
	}
	// An error quoting stored text: the job's state, in the server's message.
	r = h.mustRun(ExitConflict, "cancel", "2")
	if c := drives(r.stderr); c != "" || !strings.Contains(r.stderr, `succeeded\x1b]52;c;cm0gLXJmIH4=\x07`) {
		t.Errorf("cancel error prints %q raw:\n%q", c, r.stderr)
	}
}
