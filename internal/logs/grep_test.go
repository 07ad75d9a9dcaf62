package logs

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// randExpr returns a random expression of a small grammar: literals with
// letters whose case folds are not ASCII (k, s, é) and U+FFFD, classes,
// anchors, repetitions, alternations, flags.
func randExpr(r *rand.Rand, depth int) string {
	atoms := []string{"a", "b", "ab", "loss", "nan", "k", "S", "é", "\ufffd", "0", " ",
		`[0-9]`, `\d`, `[a-c]`, `[^a]`, `.`, `\w`, `\b`, `^`, `$`, `[éa]`, `\.`, `x`}
	if depth <= 0 || r.IntN(3) == 0 {
		return atoms[r.IntN(len(atoms))]
	}
	switch r.IntN(8) {
	case 0, 1:
		return randExpr(r, depth-1) + randExpr(r, depth-1)
	case 2:
		return randExpr(r, depth-1) + "|" + randExpr(r, depth-1)
	case 3:
		return "(" + randExpr(r, depth-1) + ")" + []string{"*", "+", "?", "{2}", "{1,3}", "{0,2}"}[r.IntN(6)]
	case 4:
		return []string{"(?i)", "(?m)", "(?s)", "(?U)"}[r.IntN(4)] + randExpr(r, depth-1)
	case 5:
		return "(?:" + randExpr(r, depth-1) + ")"
	default:
		return randExpr(r, depth-1) + randExpr(r, depth-1) + randExpr(r, depth-1)
	}
}

// randText returns a line's text of pieces the expressions are about,
// with case variants, non-ASCII folds (the Kelvin sign, the long s) and
// invalid UTF-8.
func randText(r *rand.Rand) string {
	pieces := []string{"a", "b", "A", "B", "loss", "LoSS", "nan", "NaN", "k", "K", "\u212a", "s", "S", "\u017f",
		"é", "É", "0", "12", "2026", " ", ".", "x", "\xff", "\xc3", "\ufffd", "_", "\r", "\t"}
	var b strings.Builder
	for range r.IntN(8) {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	return b.String()
}

// The filter's prefilters and exact matchers decide every text as the
// expression does.
func TestFilterMatchesAsExpression(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	texts := []string{""}
	for range 300 {
		texts = append(texts, randText(r))
	}
	fixed := []string{`loss|nan`, `(?i)error|warn`, `\d{4}`, `step [0-9]+`, `a*`, `^$`, `^a*$`, `x*$`, `^`,
		`(?i)loss|nan`, `é|ü`, `[0-9]+\.[0-9]+`, `(?i)k`, `(?i)s+`, `\x{FFFD}`, `a$^`, `$^`, `(?m)^a|b$`, `[^a]`}
	exprs := fixed
	for range 3000 {
		exprs = append(exprs, randExpr(r, 4))
	}
	exactCount, anchoredCount := 0, 0
	for _, expr := range exprs {
		re, err := regexp.Compile(expr)
		if err != nil {
			continue
		}
		f := Options{Grep: re}.filter()
		if f.exact != nil {
			exactCount++
		}
		if f.anchored != nil {
			anchoredCount++
		}
		for _, text := range texts {
			want := re.MatchString(text)
			if got := f.match([]byte(text)); got != want {
				t.Fatalf("%q on %q: filter says %v, the expression %v (exact %v, literals %q)",
					expr, text, got, want, f.exact != nil, setString(f.lits))
			}
			if f.exact != nil && !want {
				for i := range len(text) {
					if f.exact.matchAt([]byte(text), i) {
						t.Fatalf("%q: a pattern matches %q at %d, the expression not at all", expr, text, i)
					}
				}
			}
			for _, set := range f.sets {
				if want && !set.in([]byte(text)) {
					t.Fatalf("%q matches %q without any of its literals %q", expr, text, setString(set))
				}
			}
		}
	}
	if exactCount < len(exprs)/10 {
		t.Errorf("only %d of %d expressions decided without running them", exactCount, len(exprs))
	}
	if anchoredCount < len(exprs)/40 {
		t.Errorf("only %d of %d expressions run anchored at their leading literal", anchoredCount, len(exprs))
	}
	for _, expr := range []string{`lr (\d+\.)+\d+ tokens`, `(loss (\d+)+x)`} {
		if (Options{Grep: regexp.MustCompile(expr)}).filter().anchored == nil {
			t.Errorf("%q is not run anchored at its leading literal", expr)
		}
	}
	for _, expr := range []string{`(?i)lr (\d+\.)+`, `\x{FFFD}(a+)+b`, `.lr(a+)+`} {
		if (Options{Grep: regexp.MustCompile(expr)}).filter().anchored != nil {
			t.Errorf("%q is run anchored, though its matches need not start with its literal", expr)
		}
	}
	for _, expr := range []string{`loss|nan`, `(?i)error|warn`, `\d{4}`, `step [0-9]+`, `a*`, `[0-9]+\.[0-9]+`,
		`(?i)loss`, `(?i)CHECKPOINT`, `(?i)é`} {
		if (Options{Grep: regexp.MustCompile(expr)}).filter().exact == nil {
			t.Errorf("%q is run, not decided exactly", expr)
		}
	}
}

// Copying a log with --grep (with and without --tail and --timestamps)
// writes the lines a plain line-by-line match keeps, on random logs and
// expressions.
func TestCopyGrepAsNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	dir := t.TempDir()
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	for iter := range 300 {
		type rec struct {
			full, text string
			system     bool
		}
		var recs []rec
		var log []byte
		for i := range r.IntN(60) {
			text := randText(r)
			if r.IntN(20) == 0 { // a line without the format
				line := "foreign " + text
				recs = append(recs, rec{full: line, text: line})
				log = append(log, line+"\n"...)
				continue
			}
			stream := []string{Stdout, Stderr, System}[r.IntN(3)]
			line := AppendLine(nil, t0.Add(time.Duration(i)*time.Millisecond), stream, []byte(text))
			log = append(log, line...)
			recs = append(recs, rec{full: string(line[:len(line)-1]), text: text, system: stream == System})
		}
		p := filepath.Join(dir, "output.log")
		if err := os.WriteFile(p, log, 0o644); err != nil {
			t.Fatal(err)
		}
		expr := randExpr(r, 3)
		switch iter % 3 {
		case 0:
			expr = []string{`loss|nan`, `(?i)loss|nan`, `\d{4}`, `(?i)a|k`, `a*`, `0+\.`, `^$`, `loss.*nan`, `\bnan\b`}[iter/3%9]
		case 1:
			expr = randChain(r)
		}
		re, err := regexp.Compile(expr)
		if err != nil {
			continue
		}
		for _, ts := range []bool{false, true} {
			var want []string
			for _, rc := range recs {
				if rc.system && !ts {
					continue
				}
				if re.MatchString(rc.text) {
					if ts {
						want = append(want, rc.full+"\n")
					} else {
						want = append(want, rc.text+"\n")
					}
				}
			}
			for _, tail := range []int{0, 3} {
				var out bytes.Buffer
				if err := Copy(context.Background(), &out, p, Options{Grep: re, Timestamps: ts, Tail: tail}); err != nil {
					t.Fatal(err)
				}
				w := want
				if tail > 0 && len(w) > tail {
					w = w[len(w)-tail:]
				}
				if got := out.String(); got != strings.Join(w, "") {
					t.Fatalf("grep %q, timestamps %v, tail %d:\ngot  %q\nwant %q", expr, ts, tail, got, strings.Join(w, ""))
				}
			}
		}
	}
}

// A literal on more than denseRun lines in a row makes the copier read the
// rest of the chunk line by line: the lines kept are the same.
func TestCopyGrepDense(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	var log []byte
	var texts []string
	for i := range 3 * denseRun {
		text := "step " + strings.Repeat("1", i%7) + " loss 0.5"
		if i >= 2*denseRun || i%(denseRun+5) == denseRun+2 {
			text = randText(r) // lines without the literal, after a dense run
		}
		texts = append(texts, text)
		log = AppendLine(log, t0.Add(time.Duration(i)*time.Millisecond), Stdout, []byte(text))
	}
	p := filepath.Join(t.TempDir(), "output.log")
	if err := os.WriteFile(p, log, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, expr := range []string{`loss|nan`, `(?i)LOSS`, `1{3} loss`, `lo.s 0`, `(?i)lo(s|x)`, `^step 1{6}`} {
		re := regexp.MustCompile(expr)
		var want strings.Builder
		for _, text := range texts {
			if re.MatchString(text) {
				want.WriteString(text + "\n")
			}
		}
		var out bytes.Buffer
		if err := Copy(context.Background(), &out, p, Options{Grep: re}); err != nil {
			t.Fatal(err)
		}
		if out.String() != want.String() {
			t.Errorf("grep %q:\ngot  %q\nwant %q", expr, out.String(), want.String())
		}
	}
}

// A log long enough to be filtered in two halves at once (copier.lines)
// is written as a plain line-by-line match writes it, in order, on one
// core and on two.
func TestCopyGrepHalves(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	type rec struct {
		full, text string
		system     bool
	}
	var recs []rec
	var log []byte
	for i := 0; len(log) < 5*readChunk+12345; i++ {
		text := "step " + strings.Repeat("7", i%9) + " loss 0.5 tokens/s 1"
		switch {
		case i%97 == 0:
			text = randText(r)
		case i%1013 == 0:
			text = strings.Repeat("long line ", 5000) // across chunk ends
		}
		if i%501 == 0 {
			line := "foreign " + text
			recs = append(recs, rec{full: line, text: line})
			log = append(log, line+"\n"...)
			continue
		}
		stream := Stdout
		if i%331 == 0 {
			stream = System
		}
		line := AppendLine(nil, t0.Add(time.Duration(i)*time.Millisecond), stream, []byte(text))
		log = append(log, line...)
		recs = append(recs, rec{full: string(line[:len(line)-1]), text: text, system: stream == System})
	}
	p := filepath.Join(t.TempDir(), "output.log")
	if err := os.WriteFile(p, log, 0o644); err != nil {
		t.Fatal(err)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2} {
		runtime.GOMAXPROCS(procs)
		for _, expr := range []string{`loss.*tokens`, `(?i)LOSS`, `step 7{8} `, `a|k`, `^$`, `long line`, `x*`, `lo\w+ 0`} {
			re := regexp.MustCompile(expr)
			for _, ts := range []bool{false, true} {
				var want strings.Builder
				for _, rc := range recs {
					if (!rc.system || ts) && re.MatchString(rc.text) {
						if ts {
							want.WriteString(rc.full + "\n")
						} else {
							want.WriteString(rc.text + "\n")
						}
					}
				}
				var out bytes.Buffer
				if err := Copy(context.Background(), &out, p, Options{Grep: re, Timestamps: ts}); err != nil {
					t.Fatal(err)
				}
				if out.String() != want.String() {
					t.Fatalf("GOMAXPROCS %d, grep %q, timestamps %v: %d bytes written, want %d", procs, expr, ts, out.Len(), want.Len())
				}
			}
		}
	}
}

// Filtering lines allocates nothing per line, whatever decides the grep.
func TestFilterLinesAllocs(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	var b []byte
	for i := range 1000 {
		text := "step " + strings.Repeat("1", i%7) + " loss 0.5 lr 0.1 tokens/s 2"
		if i%10 == 0 {
			text = "error: nan"
		}
		b = AppendLine(b, t0.Add(time.Duration(i)*time.Millisecond), Stdout, []byte(text))
	}
	for _, expr := range []string{`loss|nan`, `(?i)loss`, `\d{4}`, `loss.*tokens`, `\bnan\b`, `lo\w+ 0`, `[a-z]+\d`} {
		f := Options{Grep: regexp.MustCompile(expr)}.filter()
		if f.exact == nil && raceEnabled {
			continue // the regexp's pooled machines are dropped
		}
		out := make([]byte, 0, len(b))
		f.appendLines(out, b) // warm the regexp's machines
		if n := testing.AllocsPerRun(20, func() { out = f.appendLines(out[:0], b) }); n != 0 {
			t.Errorf("%q: %v allocations per 1000 lines", expr, n)
		}
	}
}
