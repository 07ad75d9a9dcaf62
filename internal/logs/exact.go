package logs

import (
	"bytes"
	"math/bits"
	"regexp"
	"regexp/syntax"
	"unicode"
	"unicode/utf8"
)

// byteSet is a set of bytes.
type byteSet [4]uint64

func (s *byteSet) add(c byte)      { s[c>>6] |= 1 << (c & 63) }
func (s *byteSet) has(c byte) bool { return s[c>>6]&(1<<(c&63)) != 0 }
func (s *byteSet) union(t byteSet) {
	s[0], s[1], s[2], s[3] = s[0]|t[0], s[1]|t[1], s[2]|t[2], s[3]|t[3]
}
func (s *byteSet) count() (n int, c byte) {
	for i := range 256 {
		if s.has(byte(i)) {
			n, c = n+1, byte(i)
		}
	}
	return n, c
}

// seq is a fixed-length pattern: one set of bytes per position, perhaps
// anchored at the text's start or end.
type seq struct {
	sets       []byteSet
	begin, end bool
}

func (s *seq) at(t []byte, i int) bool {
	if i+len(s.sets) > len(t) {
		return false
	}
	for k := range s.sets {
		if !s.sets[k].has(t[i+k]) {
			return false
		}
	}
	return true
}

// exact decides whether an expression matches a line's text without
// running it, for the expressions that are, as far as finding a match in a
// line goes, alternations of fixed-length byte patterns:
//
//   - literals (their UTF-8 bytes; U+FFFD, which also matches invalid
//     UTF-8, excepted), case-insensitive ones too (`(?i)loss` is the
//     patterns [lL][oO][sS][sS], [lL][oO][sS]ſ, ...: 's' also folds to
//     the long s), and classes of ASCII characters.
//   - concatenations, alternations and x? of those, ^ and $ (a text holds
//     no newline, so (?m) changes nothing).
//   - x*, x+ and x{n,m} at either end of the expression or of one of its
//     top-level alternatives: a line holds a match of `step [0-9]+` if and
//     only if it holds one of `step [0-9]`, of `[0-9]+\.[0-9]+` if and
//     only if of `[0-9]\.[0-9]`; `a*` matches every line.
//
// Others (., \b, a non-ASCII class, x* inside) are run as expressions.
type exact struct {
	seqs  []seq
	any   bool        // every text matches
	first [256]uint64 // bit k: seqs[k] is not anchored and can start with the byte
	one   int         // when >= 0: the only byte an unanchored seq starts with
	free  bool        // some seq is not anchored
}

// maxSeqs bounds the patterns of an exact matcher (first holds 64 bits).
const maxSeqs = 32

// newExact returns the exact matcher of re, or nil.
func newExact(re *regexp.Regexp) *exact {
	if re == nil {
		return nil
	}
	t, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return nil
	}
	t = t.Simplify()
	for t.Op == syntax.OpCapture {
		t = t.Sub[0]
	}
	branches := []*syntax.Regexp{t}
	if t.Op == syntax.OpAlternate {
		branches = t.Sub
	}
	e := &exact{one: -1}
	for _, br := range branches {
		alts, ok := itemsOf(&syntax.Regexp{Op: syntax.OpConcat, Sub: trimEnds(flatten(br))})
		if !ok || len(e.seqs)+len(alts) > maxSeqs {
			return nil
		}
		for _, a := range alts {
			if s, ok := seqOf(a); ok {
				e.seqs = append(e.seqs, s)
			}
		}
	}
	var firsts byteSet
	for k, s := range e.seqs {
		switch {
		case len(s.sets) == 0 && !(s.begin && s.end):
			e.any = true // empty at the start, the end or anywhere
		case !s.begin && !s.end:
			e.free = true
			firsts.union(s.sets[0])
			for c := range 256 {
				if s.sets[0].has(byte(c)) {
					e.first[c] |= 1 << k
				}
			}
		}
	}
	if n, c := firsts.count(); n == 1 {
		e.one = int(c)
	}
	return e
}

// flatten returns the parts of a concatenation (captures left out), or n.
func flatten(n *syntax.Regexp) []*syntax.Regexp {
	for n.Op == syntax.OpCapture {
		n = n.Sub[0]
	}
	if n.Op != syntax.OpConcat {
		return []*syntax.Regexp{n}
	}
	var out []*syntax.Regexp
	for _, s := range n.Sub {
		out = append(out, flatten(s)...)
	}
	return out
}

// trimEnds drops the repetitions at either end of parts that can match
// empty and shortens the others to their least: a text holds a match of
// the concatenation if and only if it holds one of what is left.
func trimEnds(parts []*syntax.Regexp) []*syntax.Regexp {
	for len(parts) > 0 {
		if p, ok := trimOne(parts[len(parts)-1]); ok {
			parts = append(parts[:len(parts)-1:len(parts)-1], p...)
			continue
		}
		if p, ok := trimOne(parts[0]); ok {
			parts = append(p, parts[1:]...)
			continue
		}
		break
	}
	return parts
}

// trimOne returns what a repetition at an end of a concatenation can be
// replaced with.
func trimOne(n *syntax.Regexp) ([]*syntax.Regexp, bool) {
	switch n.Op {
	case syntax.OpCapture:
		if p := flatten(n); len(p) != 1 || p[0] != n {
			return p, true
		}
	case syntax.OpStar, syntax.OpQuest:
		return nil, true
	case syntax.OpPlus:
		return flatten(n.Sub[0]), true
	case syntax.OpRepeat:
		var p []*syntax.Regexp
		for range n.Min {
			p = append(p, flatten(n.Sub[0])...)
		}
		return p, true
	case syntax.OpConcat:
		return flatten(n), true
	}
	return nil, false
}

// item is a set of bytes to match, or an anchor (when anchor != 0).
type item struct {
	set    byteSet
	anchor byte // '^' or '$'
}

// itemsOf returns the alternatives of n as sequences of items.
func itemsOf(n *syntax.Regexp) ([][]item, bool) {
	switch n.Op {
	case syntax.OpLiteral:
		out := [][]item{{}}
		for _, r := range n.Rune {
			if r == utf8.RuneError {
				return nil, false
			}
			// The rune in each case: the ASCII ones in one set, each
			// other (the Kelvin sign, the long s, é) as its bytes.
			var ascii byteSet
			var alts [][]item
			for f := r; ; {
				if f < utf8.RuneSelf {
					ascii.add(byte(f))
				} else {
					var a []item
					for _, c := range utf8.AppendRune(nil, f) {
						var s byteSet
						s.add(c)
						a = append(a, item{set: s})
					}
					alts = append(alts, a)
				}
				if n.Flags&syntax.FoldCase == 0 {
					break
				}
				if f = unicode.SimpleFold(f); f == r {
					break
				}
			}
			if ascii != (byteSet{}) {
				alts = append(alts, []item{{set: ascii}})
			}
			if len(out)*len(alts) > maxSeqs {
				return nil, false
			}
			var next [][]item
			for _, x := range out {
				for _, y := range alts {
					next = append(next, append(x[:len(x):len(x)], y...))
				}
			}
			out = next
		}
		return out, true
	case syntax.OpCharClass:
		var s byteSet
		for i := 0; i+1 < len(n.Rune); i += 2 {
			if n.Rune[i+1] >= utf8.RuneSelf {
				return nil, false
			}
			for r := n.Rune[i]; r <= n.Rune[i+1]; r++ {
				s.add(byte(r))
			}
		}
		return [][]item{{{set: s}}}, true
	case syntax.OpBeginLine, syntax.OpBeginText:
		return [][]item{{{anchor: '^'}}}, true
	case syntax.OpEndLine, syntax.OpEndText:
		return [][]item{{{anchor: '$'}}}, true
	case syntax.OpEmptyMatch:
		return [][]item{{}}, true
	case syntax.OpNoMatch:
		return nil, true
	case syntax.OpCapture:
		return itemsOf(n.Sub[0])
	case syntax.OpQuest:
		a, ok := itemsOf(n.Sub[0])
		if !ok || len(a)+1 > maxSeqs {
			return nil, false
		}
		return append(a, nil), true
	case syntax.OpAlternate:
		var out [][]item
		for _, s := range n.Sub {
			a, ok := itemsOf(s)
			if !ok || len(out)+len(a) > maxSeqs {
				return nil, false
			}
			out = append(out, a...)
		}
		return out, true
	case syntax.OpConcat:
		out := [][]item{{}}
		for _, s := range n.Sub {
			a, ok := itemsOf(s)
			if !ok || len(out)*len(a) > maxSeqs {
				return nil, false
			}
			var next [][]item
			for _, x := range out {
				for _, y := range a {
					next = append(next, append(x[:len(x):len(x)], y...))
				}
			}
			out = next
		}
		return out, true
	}
	return nil, false
}

// seqOf makes a seq of items; ok is false when they can never match a
// text (it holds no newline, so ^ after a byte or $ before one never holds).
func seqOf(items []item) (s seq, ok bool) {
	for _, it := range items {
		switch it.anchor {
		case '^':
			if len(s.sets) > 0 {
				return seq{}, false
			}
			s.begin = true
		case '$':
			s.end = true
		default:
			if s.end {
				return seq{}, false
			}
			s.sets = append(s.sets, it.set)
		}
	}
	return s, true
}

// matchAt reports whether an unanchored pattern matches text at offset i:
// if so the expression matches text; if not it may still.
func (e *exact) matchAt(t []byte, i int) bool {
	if i >= len(t) {
		return false
	}
	for m := e.first[t[i]]; m != 0; m &= m - 1 {
		if e.seqs[bits.TrailingZeros64(m)].at(t, i) {
			return true
		}
	}
	return false
}

// match reports whether the expression matches text.
func (e *exact) match(t []byte) bool {
	if e.any {
		return true
	}
	for k := range e.seqs {
		s := &e.seqs[k]
		switch {
		case s.begin && s.end:
			if len(t) == len(s.sets) && s.at(t, 0) {
				return true
			}
		case s.begin:
			if s.at(t, 0) {
				return true
			}
		case s.end:
			if len(t) >= len(s.sets) && s.at(t, len(t)-len(s.sets)) {
				return true
			}
		}
	}
	if !e.free {
		return false
	}
	if e.one >= 0 {
		c := byte(e.one)
		for i := 0; ; i++ {
			j := bytes.IndexByte(t[i:], c)
			if j < 0 {
				return false
			}
			i += j
			for m := e.first[c]; m != 0; m &= m - 1 {
				if e.seqs[bits.TrailingZeros64(m)].at(t, i) {
					return true
				}
			}
		}
	}
	for i, c := range t {
		for m := e.first[c]; m != 0; m &= m - 1 {
			if e.seqs[bits.TrailingZeros64(m)].at(t, i) {
				return true
			}
		}
	}
	return false
}
