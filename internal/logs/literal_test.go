package logs

import (
	"regexp"
	"testing"
)

func TestRequiredLiteral(t *testing.T) {
	for expr, want := range map[string]string{
		`checkpoint`:        "checkpoint",
		`loss=[0-9]+`:       "loss=",
		`step \d+ .*nan`:    "step ",
		`(?i)CHECKPOINT`:    "~point", // ~: case-insensitive
		`(?i)Error: (\w+)`:  "~error: ",
		`a|b`:               "",
		`(?i)ks`:            "",
		`x`:                 "x",   // LiteralPrefix: exact, any length
		`(?i)é+rr`:          "~rr", // é is not ASCII; rr is required too
		`(?i)é`:             "",
		`^.*(fatal)+ at \d`: "fatal",
	} {
		n := requiredLiteral(regexp.MustCompile(expr))
		got := ""
		if n != nil {
			got = string(n.lit)
			if n.fold {
				got = "~" + got
			}
		}
		if got != want {
			t.Errorf("requiredLiteral(%q) = %q, want %q", expr, got, want)
		}
	}
}

// The needle never misses a line the expression matches: every line of a
// mixed-case sample that matches holds it, found by index.
func TestNeedleFindsEveryMatch(t *testing.T) {
	lines := []string{"CHECKPOINT saved", "checkpoint", "ChEcKpOiNt 3", "no match", "checKpoint with kelvin \u212a",
		"PoInT", "loss=0.5 step 3", "Error: disk", "eRRor: x", "poin"}
	for _, expr := range []string{`(?i)CHECKPOINT`, `(?i)error: \w`, `loss=[0-9]`, `(?i)point`} {
		re := regexp.MustCompile(expr)
		n := requiredLiteral(re)
		if n == nil {
			t.Fatalf("%q: no needle", expr)
		}
		for _, l := range lines {
			if re.MatchString(l) && n.index([]byte(l)) < 0 {
				t.Errorf("%q matches %q but the needle %q (fold %v) is not found", expr, l, n.lit, n.fold)
			}
		}
	}
	n := &needle{lit: []byte("point"), fold: true}
	for s, want := range map[string]int{"xxPOINT": 2, "pointy": 0, "poin": -1, "PpOint": 1, "": -1} {
		if got := n.index([]byte(s)); got != want {
			t.Errorf("index(%q) = %d, want %d", s, got, want)
		}
	}
}
