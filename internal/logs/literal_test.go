package logs

import (
	"bytes"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestRequiredLiterals(t *testing.T) {
	for expr, want := range map[string]string{
		`checkpoint`:         "checkpoint",
		`loss=[0-9]+`:        "loss=",
		`step \d+ .*nan`:     "step ",
		`(?i)CHECKPOINT`:     "~point", // ~: case-insensitive
		`(?i)Error: (\w+)`:   "~error: ",
		`a|b`:                "a,b", // exact: any length
		`a|b+`:               "",    // one byte, not exact
		`(?i)ks`:             "",
		`x`:                  "x",
		`(?i)é+rr`:           "~rr", // é is not ASCII; rr is required too
		`(?i)é`:              "",
		`^.*(fatal)+ at \d`:  "fatal",
		`loss|nan`:           "loss,nan",
		`(?i)error|warn`:     "~error,~warn",
		`(a|b)c`:             "ac,bc",
		`(a|b)cdef`:          "acdef,bcdef",
		`(a|bb)\d+(cde|fgh)`: "cde,fgh",
		`[Ee]rror`:           "~error",
		`[EF]rror`:           "Error,Frror",
		`colou?r`:            "color,colour",
		`(loss|nan).*grad`:   "grad",
		`loss|nan|.`:         "",
		`loss|x*`:            "",
		`\d{4}`:              "",
		`step [0-9]+`:        "step ",
		`(?i)loss|Nan`:       "~lo,~nan", // 's' folds to the long s
		`Error(?i:x)`:        "~errorx",  // joined: case-insensitive
		"\ufffdab":           "ab",       // U+FFFD matches invalid UTF-8
		`é|ü`:                "é,ü",
		`a|b|c|d|e|f|g|h|i`:  "", // too many
	} {
		got := setString(requiredLiterals(regexp.MustCompile(expr)))
		if got != want {
			t.Errorf("requiredLiterals(%q) = %q, want %q", expr, got, want)
		}
	}
}

func setString(s litSet) string {
	var out []string
	for _, l := range s {
		if l.fold {
			out = append(out, "~"+string(l.b))
		} else {
			out = append(out, string(l.b))
		}
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// Case folds that ASCII decides exactly are those of every ASCII letter
// but k and s.
func TestASCIIFolds(t *testing.T) {
	for r := rune(0); r < 0x80; r++ {
		want := r != 'k' && r != 'K' && r != 's' && r != 'S'
		if got := asciiFolds(r); got != want {
			t.Errorf("asciiFolds(%q) = %v", r, got)
		}
	}
	if asciiFolds('é') {
		t.Error("asciiFolds(é)")
	}
}

// The finder returns, from each offset on, the first occurrence of any
// literal of its set, whichever literal is frequent and which rare, and
// never a false one.
func TestFinder(t *testing.T) {
	f := newFinder(litSet{{b: []byte("nan")}, {b: []byte("loss")}, {b: []byte("warn"), fold: true}})
	chunk := "loss 1\nloss 2 nan\nx WaRn y\nno\nWARNING loss\nwar\nnaN\n"
	want := []int{0, 7, 14, 20, 30, 38}
	f.reset([]byte(chunk))
	var got []int
	for from := 0; ; {
		i := f.index(from)
		if i < 0 {
			break
		}
		got = append(got, i)
		from = i + 1
	}
	if !slices.Equal(got, want) {
		t.Errorf("offsets %v, want %v", got, want)
	}
	// The same answers from offsets that skip ahead, as readers do.
	f.reset([]byte(chunk))
	for _, c := range []struct{ from, want int }{{0, 0}, {3, 7}, {12, 14}, {15, 20}, {31, 38}, {39, -1}} {
		if got := f.index(c.from); got != c.want {
			t.Errorf("index(%d) = %d, want %d", c.from, got, c.want)
		}
	}
	n := litSet{{b: []byte("point"), fold: true}}
	for s, want := range map[string]bool{"xxPOINT": true, "pointy": true, "poin": false, "PpOint": true, "": false} {
		if got := n.in([]byte(s)); got != want {
			t.Errorf("in(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestRequiredSets(t *testing.T) {
	for expr, want := range map[string]string{
		`step \d+ .*nan`:        "step |nan",
		`loss.*tokens`:          "tokens|loss",
		`loss=(\d+)\.\d+ lr`:    "loss=| lr",
		`(?i)error: (\w+) code`: "~error: |~ code",
		`(ab|cd)+x[0-9]yz`:      "yz|ab,cd", // [0-9]: too many literals
		`loss|nan`:              "loss,nan",
		`a|b`:                   "a,b",
		`\d{4}`:                 "",
		`(a.*bc)+ de`:           " de|bc",
		`aa.bb.cc.dd.ee.ff`:     "aa|bb|cc|dd",
	} {
		var got []string
		for _, s := range requiredSets(regexp.MustCompile(expr)) {
			got = append(got, setString(s))
		}
		if g := strings.Join(got, "|"); g != want {
			t.Errorf("requiredSets(%q) = %q, want %q", expr, g, want)
		}
	}
}

// A filter searches a chunk for its rarest required set.
func TestFilterChoose(t *testing.T) {
	var b []byte
	for i := range 500 {
		text := "step 12 loss 0.5"
		if i%50 == 0 {
			text += " nan"
		}
		b = append(b, text+"\n"...)
	}
	f := Options{Grep: regexp.MustCompile(`step \d+ .*nan`)}.filter()
	if got := setString(f.lits); got != "step " {
		t.Fatalf("before choosing: %q", got)
	}
	f.choose(b)
	if got := setString(f.lits); got != "nan" {
		t.Errorf("chose %q, want nan", got)
	}
	f.choose([]byte("nan nan\nnan\nstep \n"))
	if got := setString(f.lits); got != "step " {
		t.Errorf("chose %q, want step", got)
	}
	// Where the expression runs, a line is checked only for the sets
	// that not every line of the sample holds.
	var c []byte
	for i := range 500 {
		text := "lr 0.1 tokens"
		if i%50 == 0 {
			text += " nan"
		}
		c = append(c, text+"\n"...)
	}
	f = Options{Grep: regexp.MustCompile(`lr (\d+\.)+\d+ .*nan`)}.filter()
	if f.exact != nil {
		t.Fatal("decided exactly")
	}
	f.choose(c)
	var checks []string
	for _, s := range f.checks {
		checks = append(checks, setString(s))
	}
	if got := setString(f.lits); got != "nan" || strings.Join(checks, "|") != "nan" {
		t.Errorf("chose %q, checks %q; want nan, nan", got, checks)
	}
}

// naiveIndex is the offset of the first literal of s at or after from in
// b, or -1.
func naiveIndex(s litSet, b []byte, from int) int {
	for i := from; i < len(b); i++ {
		for _, l := range s {
			if i+len(l.b) > len(b) {
				continue
			}
			w := b[i : i+len(l.b)]
			if l.fold && asciiEqualFold(w, l.b) || !l.fold && bytes.Equal(w, l.b) {
				return i
			}
		}
	}
	return -1
}

// A finder searching for any byte of its literals, each as common as
// any, finds what a naive search finds, from every offset and skipping
// ahead.
func TestFinderTuned(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	alphabet := []byte("abAB.\n0x")
	word := func(n int) []byte {
		w := make([]byte, n)
		for i := range w {
			w[i] = alphabet[r.IntN(len(alphabet)-1)] // no newline
		}
		return w
	}
	for range 2000 {
		var s litSet
		for range 1 + r.IntN(3) {
			l := lit{b: word(1 + r.IntN(4)), fold: r.IntN(2) == 0}
			s = append(s, mkLit(l.b, l.fold))
		}
		b := make([]byte, r.IntN(200))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		f := newFinder(s)
		var freq [256]int
		for c := range freq {
			freq[c] = r.IntN(100)
		}
		switch r.IntN(3) {
		case 0:
			f.tune(&freq, 100)
		case 1:
			f.tune(&freq, 100000) // every byte rare
		}
		f.reset(b)
		for from := 0; from <= len(b); from += 1 + r.IntN(3) {
			if got, want := f.index(from), naiveIndex(s, b, from); got != want {
				t.Fatalf("literals %q in %q from %d: %d, want %d", setString(s), b, from, got, want)
			}
		}
	}
}
