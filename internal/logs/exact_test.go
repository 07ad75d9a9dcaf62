package logs

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// randChain returns a random expression with gaps: top-level
// alternatives, each parts of the small grammar (randExpr) with .*, .+
// and their variants between them, sometimes anchored.
func randChain(r *rand.Rand) string {
	gaps := []string{".*", ".+", "(?s:.*)", ".*?", "(.*)", ".+.+", ".*.*", "(?s).+", ".+?"}
	var branches []string
	for range 1 + r.IntN(2) {
		var b strings.Builder
		if r.IntN(4) == 0 {
			b.WriteString("^")
		}
		if r.IntN(4) == 0 {
			b.WriteString(gaps[r.IntN(len(gaps))])
		}
		n := 1 + r.IntN(3)
		for k := range n {
			b.WriteString(randExpr(r, 2))
			if k < n-1 || r.IntN(4) == 0 {
				b.WriteString(gaps[r.IntN(len(gaps))])
			}
		}
		if r.IntN(4) == 0 {
			b.WriteString("$")
		}
		branches = append(branches, b.String())
	}
	return strings.Join(branches, "|")
}

// Expressions with gaps are decided as the expression decides them, on
// random texts with multi-byte runes and invalid UTF-8 in the gaps.
func TestExactChainsAsExpression(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	texts := []string{"", "é", "\xff", "a", "ab", "aéb", "a\xffb", "a\xe2\x82b", "nan loss", "_nan_", "x nan"}
	for range 400 {
		texts = append(texts, randText(r)+randText(r))
	}
	chains := 0
	for range 4000 {
		expr := randChain(r)
		re, err := regexp.Compile(expr)
		if err != nil {
			continue
		}
		e := newExact(re)
		if e == nil {
			continue
		}
		if len(e.chains) > 0 {
			chains++
		}
		for _, text := range texts {
			if got, want := e.match([]byte(text)), re.MatchString(text); got != want {
				t.Fatalf("%q on %q: exact says %v, the expression %v", expr, text, got, want)
			}
		}
	}
	t.Logf("%d expressions decided as chains", chains)
	if chains < 500 {
		t.Errorf("only %d expressions decided as chains", chains)
	}
}

// randRuns returns a random concatenation of byte classes, some
// repeated (x*, x+, x{2,}), sometimes anchored, with gaps or alternatives.
func randRuns(r *rand.Rand) string {
	atoms := []string{"a", "b", "x", "0", " ", `\.`, "[0-9]", `\d`, "[a-c]", `\w`, `\s`, "[ab]", `\b`, "(?i:a)", "é",
		`[^ ]`, `\S`, `\D`, `[^a]`, `\W`, `[^é]`}
	reps := []string{"", "", "*", "+", "{2,}", "?"}
	branch := func() string {
		var b strings.Builder
		if r.IntN(5) == 0 {
			b.WriteString("^")
		}
		for range 1 + r.IntN(5) {
			b.WriteString(atoms[r.IntN(len(atoms))] + reps[r.IntN(len(reps))])
			if r.IntN(8) == 0 {
				b.WriteString(".*")
			}
		}
		if r.IntN(5) == 0 {
			b.WriteString("$")
		}
		return b.String()
	}
	if r.IntN(4) == 0 {
		return branch() + "|" + branch()
	}
	return branch()
}

// Runs of a byte class are decided as the expression decides them.
func TestExactRunsAsExpression(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	var texts []string
	for range 300 {
		var b strings.Builder
		for range r.IntN(12) {
			b.WriteString([]string{"a", "b", "x", "0", "7", " ", ".", "_", "A", "é", "\xff", "\t"}[r.IntN(12)])
		}
		texts = append(texts, b.String())
	}
	runs := 0
	for range 15000 {
		expr := randRuns(r)
		re, err := regexp.Compile(expr)
		if err != nil {
			continue
		}
		e := newExact(re)
		if e == nil {
			continue
		}
		has := false
		for _, s := range e.seqs {
			has = has || s.runs != 0
		}
		for _, c := range e.chains {
			for _, p := range c.parts {
				for _, s := range p.seqs {
					has = has || s.runs != 0
				}
			}
		}
		if has {
			runs++
		}
		for _, text := range texts {
			if got, want := e.match([]byte(text)), re.MatchString(text); got != want {
				t.Fatalf("%q on %q: exact says %v, the expression %v", expr, text, got, want)
			}
			if !re.MatchString(text) {
				for i := range len(text) {
					if e.matchAt([]byte(text), i) {
						t.Fatalf("%q: a pattern matches %q at %d, the expression not at all", expr, text, i)
					}
				}
			}
		}
	}
	t.Logf("%d expressions with runs", runs)
	if runs < 800 {
		t.Errorf("only %d expressions decided with runs", runs)
	}
}

// Gaps, word boundaries and parts next to gaps.
func TestExactChains(t *testing.T) {
	for _, c := range []struct {
		expr  string
		chain bool
		yes   []string
		no    []string
	}{
		{`loss.*tokens`, true, []string{"step 1 loss 0.4 tokens/s 1", "losstokens"}, []string{"tokens loss", "loss token", ""}},
		{`a.+b`, true, []string{"axb", "aéb", "a\xffb", "xaxbx"}, []string{"ab", "ba", "a"}},
		{`a.+.+b`, true, []string{"axxb", "aééb", "a\xff\xffb"}, []string{"aéb", "axb", "a\xffb"}},
		{`a.+\d*.+b`, true, []string{"axxb", "a1éb"}, []string{"aéb", "ab"}},
		{`loss=\d+.*tokens`, true, []string{"loss=1 tokens", "loss=123tokens"}, []string{"loss= tokens", "loss=1 token"}},
		{`^step \d+.*nan$`, true, []string{"step 1 x nan", "step 12nan"}, []string{" step 1 nan", "step 1 nan ", "step x nan"}},
		{`.+`, true, []string{"x", "é"}, []string{""}},
		{`^.+$`, true, []string{"x"}, []string{""}},
		{`x.*`, false, []string{"x"}, []string{""}},
		{`.*`, false, []string{"", "x"}, nil},
		{`\bnan\b`, false, []string{"nan", "x nan", "nan.", "énan"}, []string{"nano", "_nan", "a nan1"}},
		{`\Bnan`, false, []string{"xnan", "_nan"}, []string{"nan", " nan", "énan"}},
		{`(?i)error.*\btimeout\b|nan`, true, []string{"ERROR: Timeout", "nan", "error timeout."}, []string{"error timeouts", "timeout error"}},
		{`a$.*b`, true, nil, []string{"ab", "a b", "a"}},
		{`(a|).*^b`, true, []string{"b", "bab"}, []string{"ab", "xb"}},
		{`(a|).+^b`, true, nil, []string{"b", "ab"}},
		// Runs the next byte ends.
		{`loss \d+\.\d+ lr`, false, []string{"loss 0.4321 lr 1", "loss 12.3 lr"}, []string{"loss .4 lr", "loss 1. lr", "loss 1.2lr"}},
		{`a[0-9]*b`, false, []string{"ab", "a123b", "xa1b"}, []string{"a12", "a1xb"}},
		{`^\d*x`, false, []string{"x", "12x"}, []string{"a12x", " x"}},
		{`\d*^x`, false, []string{"x"}, []string{"1x"}},
		{`\d+$`, false, []string{"1", "a12"}, []string{"", "1a"}},
		{`x\d*$`, false, []string{"x", "ax12"}, []string{"x1a"}},
		{`^x\d*$`, false, []string{"x", "x12"}, []string{"ax", "x1a"}},
		{`(?i)epoch \d+/\d+.*nan`, true, []string{"Epoch 1/10 nan", "epoch 12/3: nan"}, []string{"epoch 1/ nan", "epoch /1 nan"}},
		{`[a-z]+_\d+`, false, []string{"ab_1", "x_12"}, []string{"_1", "ab_", "AB_1"}},
		{`lr [^ ]+ tokens`, false, []string{"lr 0.1 tokens", "lr é\xff tokens"}, []string{"lr  tokens", "lr 1 2 tokens"}},
		{`^\S+ x`, false, []string{"é x", "ab\xff x"}, []string{" x", "a b x"}},
		{`a[^ ]+ .+b`, true, []string{"aé xb", "ax yyb"}, []string{"aé b", "a  xb"}},
	} {
		re := regexp.MustCompile(c.expr)
		e := newExact(re)
		if e == nil {
			t.Errorf("%q is not decided exactly", c.expr)
			continue
		}
		if got := len(e.chains) > 0; got != c.chain {
			t.Errorf("%q: chains %v, want %v", c.expr, got, c.chain)
		}
		for _, s := range c.yes {
			if !re.MatchString(s) || !e.match([]byte(s)) {
				t.Errorf("%q on %q: exact %v, expression %v; want both true", c.expr, s, e.match([]byte(s)), re.MatchString(s))
			}
		}
		for _, s := range c.no {
			if re.MatchString(s) || e.match([]byte(s)) {
				t.Errorf("%q on %q: exact %v, expression %v; want both false", c.expr, s, e.match([]byte(s)), re.MatchString(s))
			}
		}
	}
	for _, expr := range []string{`a.b`, `a.?b`, `a[0-9]*1`, `x\d+\w`, `a\d*\b`, `x(ab)+c`, `\b`, `é.*\pL`,
		`a[^ ]b`, `a[^ ]+é`, `(a[^ ]+|b)`, `a\pL+ `} {
		if newExact(regexp.MustCompile(expr)) != nil {
			t.Errorf("%q is decided exactly", expr)
		}
	}
}

// FuzzFilterMatch: the filter decides a text as the expression does.
func FuzzFilterMatch(f *testing.F) {
	for _, s := range [][2]string{
		{`loss.*tokens`, "step 1 loss 0.4 tokens/s"}, {`a.+.+b`, "aéb"}, {`\bnan\b`, "x nan."},
		{`(?i)error|warn`, "WARNING"}, {`\d{4}`, "step 12345"}, {`step [0-9]+`, "step 1"},
		{`^a.*b$`, "a\xffb"}, {`(?i)k.*s`, "\u212a \u017f"},
		{`loss \d+\.\d+ lr`, "loss 0.5 lr"}, {`^x\d*$`, "x12"}, {`a[0-9]*b|c+d`, "a1b ccd"},
		{`lr [^ ]+ tokens`, "lr é tokens"}, {`^\S+ \D*x$`, "\xffé ax"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, expr, text string) {
		if len(expr) > 64 {
			return
		}
		re, err := regexp.Compile(expr)
		if err != nil {
			return
		}
		text = strings.ReplaceAll(text, "\n", "")
		fl := Options{Grep: re}.filter()
		if got, want := fl.match([]byte(text)), re.MatchString(text); got != want {
			t.Fatalf("%q on %q: filter says %v, the expression %v", expr, text, got, want)
		}
	})
}
