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
func (s *byteSet) meets(t byteSet) bool {
	return s[0]&t[0]|s[1]&t[1]|s[2]&t[2]|s[3]&t[3] != 0
}
func (s *byteSet) count() (n int, c byte) {
	for i := range 256 {
		if s.has(byte(i)) {
			n, c = n+1, byte(i)
		}
	}
	return n, c
}

// seq is a pattern of bytes: one set of bytes per position, perhaps
// anchored at the text's start or end, perhaps with word boundaries
// (\b, \B) to hold at some of its offsets. Some sets may be runs (x*,
// greedy: the next set holds none of the run's bytes, so a run ends at
// the first byte not in it); most seqs have none, and a fixed length.
type seq struct {
	sets       []byteSet
	begin, end bool
	bounds     []bound // none when there are runs
	runs       uint64  // bit k: sets[k] is a run
	fewest     int     // the fewest bytes a match holds
}

// bound is a word boundary at an offset of a seq: \b, or \B when not.
type bound struct {
	off int
	not bool
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

// runsAt returns where s, which has runs, ends when matched at offset i
// of t; -1 when it does not match there.
func (s *seq) runsAt(t []byte, i int) int {
	for k := range s.sets {
		set := &s.sets[k]
		if s.runs&(1<<k) != 0 {
			for i < len(t) && set.has(t[i]) {
				i++
			}
			continue
		}
		if i >= len(t) || !set.has(t[i]) {
			return -1
		}
		i++
	}
	if s.end && i != len(t) {
		return -1
	}
	return i
}

// boundsAt reports whether the word boundaries of s hold at offset i of t
// (kept out of at, which is inlined: callers call both).
func (s *seq) boundsAt(t []byte, i int) bool {
	for _, b := range s.bounds {
		if wordBoundary(t, i+b.off) == b.not {
			return false
		}
	}
	return true
}

// wordBoundary reports whether \b holds at offset i of t. Word characters
// are ASCII (syntax.IsWordChar), so the bytes on either side decide: the
// bytes of other runes, and invalid bytes, are never word bytes.
func wordBoundary(t []byte, i int) bool {
	before := i > 0 && wordByte(t[i-1])
	after := i < len(t) && wordByte(t[i])
	return before != after
}

func wordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_'
}

// exact decides whether an expression matches a line's text without
// running it, for the expressions that are, as far as finding a match in a
// line goes, alternations of byte patterns (seq), or of chains of them
// with gaps between:
//
//   - literals (their UTF-8 bytes; U+FFFD, which also matches invalid
//     UTF-8, excepted), case-insensitive ones too (`(?i)loss` is the
//     patterns [lL][oO][sS][sS], [lL][oO][sS]ſ, ...: 's' also folds to
//     the long s), and classes of ASCII characters.
//   - concatenations, alternations and x? of those, ^ and $ (a text holds
//     no newline, so (?m) changes nothing), \b and \B (word characters
//     are ASCII).
//   - x*, x+ and x{n,m} at either end of the expression or of one of its
//     top-level alternatives: a line holds a match of `step [0-9]+` if and
//     only if it holds one of `step [0-9]`, of `[0-9]+\.[0-9]+` if and
//     only if of `[0-9]\.[0-9]`; `a*` matches every line.
//   - inside, x* and x+ of a set of bytes that the next set does not
//     meet (`loss \d+\.\d+ lr`: '.' is no digit): such a run ends at the
//     first byte not in it, with no other way to match. x may also be a
//     class of every non-ASCII rune and some ASCII ones (`lr [^ ]+ tok`):
//     its runs are runs of bytes (wideItem).
//   - gaps, .* and .+, between such parts of a top-level alternative
//     (`loss.*tokens`, `^step \d+ .*nan$`): a line holds a match if and
//     only if it holds a match of each part in turn, each after the gap
//     from the end of the one before. Each part is taken at its earliest
//     end (no later part can then be missed), and next to a gap a part
//     is shortened as at the ends: `loss=\d+.*tokens` is `loss=\d.*tokens`.
//
// Others (a bare ., a non-ASCII class, a run the next byte may continue,
// as in `\d+0`, or of more than one byte, as `(ab)+`) are run as
// expressions.
type exact struct {
	alts           // the alternatives without gaps
	chains []chain // the others
}

// alts is an alternation of patterns.
type alts struct {
	seqs  []seq
	any   bool        // every text matches
	first [256]uint64 // bit k: seqs[k] is scanned and can start with the byte
	one   int         // when >= 0: the only byte a scanned seq starts with
	free  bool        // some seq is scanned
	fixed bool        // some seq is not scanned
	short int         // the fewest bytes a match of a scanned seq holds
	lit   []byte      // when the only seq is a plain string: its bytes
}

// chain is parts to match in turn: gaps[k] runes at least (the bytes of
// one rune, or one invalid byte) before parts[k], gaps[len(parts)] after
// the last; the first gap counts from the text's start.
type chain struct {
	parts []*alts
	gaps  []int
}

// maxSeqs bounds the patterns of an alternation (first holds 64 bits).
const maxSeqs = 32

// maxParts bounds the parts of the chains of an exact matcher.
const maxParts = 16

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
	var single []seq
	var chains []chain
	nparts := 0
	for _, br := range branches {
		parts, gaps := splitGaps(flatten(br))
		var seqs [][]seq
		for _, p := range parts {
			s, ok := seqsOf(trimEnds(p))
			if !ok {
				return nil
			}
			seqs = append(seqs, s)
		}
		switch {
		case len(parts) == 0 && gaps[0] == 0: // .*: the empty pattern
			single = append(single, seq{})
		case len(parts) == 1 && gaps[0] == 0 && gaps[1] == 0:
			if single = append(single, seqs[0]...); len(single) > maxSeqs {
				return nil
			}
		default:
			if nparts += len(parts); nparts > maxParts {
				return nil
			}
			c := chain{gaps: gaps}
			for _, s := range seqs {
				c.parts = append(c.parts, newAlts(s))
			}
			chains = append(chains, c)
		}
	}
	return &exact{alts: *newAlts(single), chains: chains}
}

// seqsOf returns the patterns of the concatenation of parts; ok is false
// when it is not an alternation of seqs.
func seqsOf(parts []*syntax.Regexp) (seqs []seq, ok bool) {
	items, ok := itemsOf(&syntax.Regexp{Op: syntax.OpConcat, Sub: parts})
	if !ok || len(items) > maxSeqs {
		return nil, false
	}
	for _, it := range items {
		s, ok, exact := seqOf(it)
		if !exact {
			return nil, false
		}
		if !ok {
			continue // never matches
		}
		if len(s.sets) == 0 && len(s.bounds) > 0 {
			return nil, false // a bare \b: no byte to look for
		}
		seqs = append(seqs, s)
	}
	return seqs, true
}

// scanned reports whether s is looked for at every offset: it is not
// anchored at the start, nor of a fixed length at the end.
func (s *seq) scanned() bool { return !s.begin && (!s.end || s.runs != 0) }

func newAlts(seqs []seq) *alts {
	a := &alts{seqs: seqs, one: -1}
	var firsts byteSet
	for k, s := range a.seqs {
		switch {
		case len(s.sets) == 0 && !(s.begin && s.end):
			a.any = true // empty at the start, the end or anywhere
		case !s.scanned():
			a.fixed = true
		default:
			if !a.free || s.fewest < a.short {
				a.short = s.fewest
			}
			a.free = true
			firsts.union(s.sets[0])
			for c := range 256 {
				if s.sets[0].has(byte(c)) {
					a.first[c] |= 1 << k
				}
			}
		}
	}
	if n, c := firsts.count(); n == 1 {
		a.one = int(c)
	}
	if len(seqs) == 1 && a.free && len(seqs[0].bounds) == 0 && seqs[0].runs == 0 {
		for _, set := range seqs[0].sets {
			n, c := set.count()
			if n != 1 {
				a.lit = nil
				break
			}
			a.lit = append(a.lit, c)
		}
	}
	return a
}

// splitGaps splits the parts of a concatenation at its gaps (.* and .+,
// consecutive ones joined): gaps[k] is the fewest runes of the gap before
// segs[k], gaps[len(segs)] of the gap after the last.
func splitGaps(parts []*syntax.Regexp) (segs [][]*syntax.Regexp, gaps []int) {
	var cur []*syntax.Regexp
	gap := 0
	for _, p := range parts {
		g, isGap := gapOf(p)
		if !isGap {
			cur = append(cur, p)
			continue
		}
		if len(cur) > 0 {
			segs, gaps = append(segs, cur), append(gaps, gap)
			cur, gap = nil, 0
		}
		gap += g
	}
	if len(cur) > 0 {
		segs, gaps = append(segs, cur), append(gaps, gap)
		gap = 0
	}
	return segs, append(gaps, gap)
}

// gapOf reports whether n is a gap, .* or .+ (with or without (?s): a
// text holds no newline), and the fewest runes it matches.
func gapOf(n *syntax.Regexp) (int, bool) {
	if n.Op != syntax.OpStar && n.Op != syntax.OpPlus {
		return 0, false
	}
	if sub := n.Sub[0].Op; sub != syntax.OpAnyCharNotNL && sub != syntax.OpAnyChar {
		return 0, false
	}
	if n.Op == syntax.OpPlus {
		return 1, true
	}
	return 0, true
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
	anchor byte // '^', '$', 'b' (\b) or 'B' (\B)
	run    bool // x*: set repeated
	wide   bool // set stands for a class of runes holding every non-ASCII one
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
			if ascii != (byteSet{}) { // first: the patterns are tried in order
				alts = append([][]item{{{set: ascii}}}, alts...)
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
	case syntax.OpWordBoundary:
		return [][]item{{{anchor: 'b'}}}, true
	case syntax.OpNoWordBoundary:
		return [][]item{{{anchor: 'B'}}}, true
	case syntax.OpEmptyMatch:
		return [][]item{{}}, true
	case syntax.OpNoMatch:
		return nil, true
	case syntax.OpCapture:
		return itemsOf(n.Sub[0])
	case syntax.OpStar, syntax.OpPlus:
		// Of one set of bytes: a run (x+ is x then x*).
		it, ok := wideItem(n.Sub[0])
		if !ok {
			a, ok := itemsOf(n.Sub[0])
			if !ok || len(a) != 1 || len(a[0]) != 1 || a[0][0].anchor != 0 || a[0][0].run {
				return nil, false
			}
			it = a[0][0]
		}
		run := it
		run.run = true
		if n.Op == syntax.OpStar {
			return [][]item{{run}}, true
		}
		return [][]item{{it, run}}, true
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

// wideItem returns the item of a class holding every non-ASCII rune
// (`[^ ]`, \S, \D), to be repeated: a run of its runes is a run of the
// bytes of its ASCII runes and of every byte from 0x80, as every byte of
// another rune, and an invalid byte (U+FFFD), is one of those. Alone it is
// no set of bytes: a rune may be several.
func wideItem(n *syntax.Regexp) (item, bool) {
	if n.Op != syntax.OpCharClass {
		return item{}, false
	}
	var it item
	covered := rune(utf8.RuneSelf) // runes from 0x80 below this are in
	for i := 0; i+1 < len(n.Rune); i += 2 {
		lo, hi := n.Rune[i], n.Rune[i+1]
		for r := lo; r <= hi && r < utf8.RuneSelf; r++ {
			it.set.add(byte(r))
		}
		if lo <= covered && hi >= covered {
			covered = hi + 1
		}
	}
	if covered <= unicode.MaxRune {
		return item{}, false
	}
	for c := utf8.RuneSelf; c < 256; c++ {
		it.set.add(byte(c))
	}
	it.wide = true
	return it, true
}

// seqOf makes a seq of items; ok is false when they can never match a
// text (it holds no newline, so ^ after a byte or $ before one never
// holds); exact is false when a run is not ended by the next set (`\d*1`,
// `\d*\w`), or is next to a word boundary.
func seqOf(items []item) (s seq, ok, exact bool) {
	var els []item
	runs := false
	for _, it := range items {
		switch it.anchor {
		case '^':
			for _, e := range els {
				if !e.run {
					return seq{}, false, true
				}
			}
			els = els[:0] // runs before ^ match empty
			s.begin = true
		case '$':
			s.end = true
		case 'b', 'B':
			s.bounds = append(s.bounds, bound{off: len(els), not: it.anchor == 'B'})
		default:
			if s.end {
				if it.run {
					continue // empty at the end
				}
				return seq{}, false, true
			}
			els = append(els, it)
			runs = runs || it.run
		}
	}
	if !runs {
		for _, e := range els {
			s.sets = append(s.sets, e.set)
		}
		s.fewest = len(s.sets)
		return s, true, true
	}
	if s.bounds != nil {
		return seq{}, false, false
	}
	// A run first matches as well empty, unless anchored; so does one
	// last.
	for !s.begin && len(els) > 0 && els[0].run {
		els = els[1:]
	}
	for !s.end && len(els) > 0 && els[len(els)-1].run {
		els = els[:len(els)-1]
	}
	if len(els) > 64 {
		return seq{}, false, false
	}
	for k, e := range els {
		if e.wide && !e.run && (k+1 == len(els) || !els[k+1].run || els[k+1].set != e.set) {
			return seq{}, false, false // one rune of a wide class, no run after
		}
		if e.run {
			if k+1 < len(els) {
				next := els[k+1]
				if next.run || next.set.meets(e.set) {
					return seq{}, false, false
				}
			}
			s.runs |= 1 << k
		} else {
			s.fewest++
		}
		s.sets = append(s.sets, e.set)
	}
	return s, true, true
}

// matchAt reports whether a pattern of the alternatives without gaps
// that is looked for at every offset matches text at offset i: if so the
// expression matches text; if not it may still.
func (a *alts) matchAt(t []byte, i int) bool {
	if i >= len(t) {
		return false
	}
	for m := a.first[t[i]]; m != 0; m &= m - 1 {
		s := &a.seqs[bits.TrailingZeros64(m)]
		if s.runs == 0 {
			if s.at(t, i) && (s.bounds == nil || s.boundsAt(t, i)) {
				return true
			}
		} else if s.runsAt(t, i) >= 0 {
			return true
		}
	}
	return false
}

// match reports whether the expression matches text.
func (e *exact) match(t []byte) bool {
	if e.alts.match(t) {
		return true
	}
	return e.chains != nil && e.matchChains(t)
}

func (e *exact) matchChains(t []byte) bool {
	for k := range e.chains {
		if e.chains[k].match(t) {
			return true
		}
	}
	return false
}

// anchoredEnd returns where s, which is not scanned (anchored at the
// start, or of a fixed length at the end), ends in t; -1 when it does not
// match.
func (s *seq) anchoredEnd(t []byte) int {
	if s.runs != 0 {
		return s.runsAt(t, 0)
	}
	n := len(s.sets)
	i := 0
	if s.end {
		if i = len(t) - n; i < 0 || s.begin && i != 0 {
			return -1
		}
	}
	if s.at(t, i) && (s.bounds == nil || s.boundsAt(t, i)) {
		return i + n
	}
	return -1
}

// match reports whether a pattern matches text.
func (a *alts) match(t []byte) bool {
	if a.lit != nil {
		return bytes.Contains(t, a.lit)
	}
	if a.any {
		return true
	}
	for k := 0; a.fixed && k < len(a.seqs); k++ {
		if s := &a.seqs[k]; !s.scanned() && s.anchoredEnd(t) >= 0 {
			return true
		}
	}
	if !a.free {
		return false
	}
	if a.one >= 0 {
		c := byte(a.one)
		for i := 0; ; i++ {
			j := bytes.IndexByte(t[i:], c)
			if j < 0 {
				return false
			}
			i += j
			for m := a.first[c]; m != 0; m &= m - 1 {
				s := &a.seqs[bits.TrailingZeros64(m)]
				if s.runs == 0 {
					if s.at(t, i) && (s.bounds == nil || s.boundsAt(t, i)) {
						return true
					}
				} else if s.runsAt(t, i) >= 0 {
					return true
				}
			}
		}
	}
	for i, c := range t {
		for m := a.first[c]; m != 0; m &= m - 1 {
			s := &a.seqs[bits.TrailingZeros64(m)]
			if s.runs == 0 {
				if s.at(t, i) && (s.bounds == nil || s.boundsAt(t, i)) {
					return true
				}
			} else if s.runsAt(t, i) >= 0 {
				return true
			}
		}
	}
	return false
}

// match reports whether the chain matches text: each part at its earliest
// end after the gap before it.
func (c *chain) match(t []byte) bool {
	pos := 0
	for k, p := range c.parts {
		from, ok := skipRunes(t, pos, c.gaps[k])
		if !ok {
			return false
		}
		if pos = p.next(t, from); pos < 0 {
			return false
		}
	}
	_, ok := skipRunes(t, pos, c.gaps[len(c.parts)])
	return ok
}

// skipRunes returns the offset n runes after offset i of t, a rune's
// start, as the expression steps through text (utf8.DecodeRune: an
// invalid byte is one rune); ok is false past the end.
func skipRunes(t []byte, i, n int) (int, bool) {
	for range n {
		if i >= len(t) {
			return i, false
		}
		if t[i] < utf8.RuneSelf {
			i++
			continue
		}
		_, w := utf8.DecodeRune(t[i:])
		i += w
	}
	return i, true
}

// next returns the earliest end of a match of a pattern that starts at or
// after offset from of t, a rune's start; -1 when there is none.
func (a *alts) next(t []byte, from int) int {
	if a.lit != nil {
		if j := bytes.Index(t[from:], a.lit); j >= 0 {
			return from + j + len(a.lit)
		}
		return -1
	}
	best := -1
	better := func(e int) {
		if e >= 0 && (best < 0 || e < best) {
			best = e
		}
	}
	for k := range a.seqs {
		s := &a.seqs[k]
		switch {
		case len(s.sets) == 0 && !s.begin && !s.end:
			better(from)
		case s.scanned(): // below
		case s.begin:
			if from == 0 {
				better(s.anchoredEnd(t))
			}
		default: // of a fixed length, at the end
			if len(t)-len(s.sets) >= from {
				better(s.anchoredEnd(t))
			}
		}
	}
	if !a.free {
		return best
	}
	// A pattern starting at i ends at i+a.short at the earliest: once that
	// is the best end found, no later start ends earlier.
	for i := from; i < len(t) && (best < 0 || i+a.short < best); i++ {
		if a.one >= 0 {
			j := bytes.IndexByte(t[i:], byte(a.one))
			if j < 0 {
				break
			}
			if i += j; best >= 0 && i+a.short >= best {
				break
			}
		}
		for m := a.first[t[i]]; m != 0; m &= m - 1 {
			s := &a.seqs[bits.TrailingZeros64(m)]
			if s.runs == 0 {
				if s.at(t, i) && (s.bounds == nil || s.boundsAt(t, i)) {
					better(i + len(s.sets))
				}
			} else {
				better(s.runsAt(t, i))
			}
		}
	}
	return best
}
