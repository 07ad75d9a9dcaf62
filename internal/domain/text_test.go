package domain

import (
	"strings"
	"testing"
)

func TestTextProblem(t *testing.T) {
	for _, tc := range []struct {
		s         string
		multiline bool
		want      string // "" means accepted; else a part of the message
	}{
		{"need 8 GPUs for the ablation: ünïcode is fine", false, ""},
		{"two\nlines", true, ""},
		{"a\ttab", true, ""},
		{"two\nlines", false, "line break"},
		{"carriage\rreturn", true, "control character U+000D"},
		{"\x1b[2Jcleared", false, "control character U+001B (at byte 0)"},
		{"bell\a", true, "U+0007"},
		{"del\x7f", false, "U+007F"},
		{"csi\u009b2J", false, "U+009B"},
		{"evil\u202etxt.exe", false, "bidirectional formatting character U+202E"},
		{"isolate\u2066x\u2069", false, "U+2066"},
		{"mark\u200f", false, "U+200F"},
		{"bad \xff utf-8", false, "UTF-8"},
	} {
		got := TextProblem(tc.s, tc.multiline)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("TextProblem(%q, %v) = %q, want %q", tc.s, tc.multiline, got, tc.want)
		}
	}
}
