package logs

import (
	"bytes"
	"regexp"
	"regexp/syntax"
	"slices"
	"unicode"
	"unicode/utf8"
)

// lit is a literal that matches of an expression hold.
type lit struct {
	b    []byte
	fold bool // ASCII case-insensitive: b has no upper-case ASCII letter
}

// litSet is a set of literals, one of which every match of an expression
// holds, found anywhere in the expression, not only at its start:
// `(?i)loss=\d+` holds "loss=", `step \d+ .*error` holds "error",
// `loss|nan` holds "loss" or "nan", `(a|b)c` holds "ac" or "bc". Lines
// without any of them cannot match, so readers search chunks for them at
// about memory speed (finder) and look only at the lines that hold one.
type litSet []lit

// maxLits bounds a literal set: a chunk is searched once per literal (twice
// for a case-insensitive one starting with a letter).
const maxLits = 8

// maxClassLits is the largest character class taken as literals: [Ee]rror
// holds "Error" or "error".
const maxClassLits = 4

// requiredLiterals returns the best set of literals, one of which every
// match of re holds: the one whose shortest literal is longest, then the
// smallest. It returns nil when there is none, or when its shortest literal
// is a single byte (found too often to pay off) unless every match is
// exactly one of the literals (`x`, `a|b`).
//
// A case-insensitive literal is used only as ASCII, and only in pieces
// without the letters whose Unicode case folds are not ASCII ('k': the
// Kelvin sign, 's': the long s) nor other non-ASCII letters: an ASCII
// search is then exact. A literal holding U+FFFD, which the expression
// also matches on invalid UTF-8, is used only in pieces without it.
func requiredLiterals(re *regexp.Regexp) litSet {
	if re == nil {
		return nil
	}
	t, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return nil
	}
	in := infoOf(t.Simplify())
	if best := bestSet(in.req, in.exact); best != nil && minLen(best) >= 2 {
		return best
	}
	if in.exactOK && len(in.exact) > 0 && minLen(in.exact) >= 1 {
		return in.exact
	}
	return nil
}

// requiredSets returns sets of literals such that every match of re holds
// one literal of each (`step \d+ .*nan`: "step " and "nan"), at most
// maxSets, the one requiredLiterals returns first; nil when there is none.
// Readers search for the set that is rarest where they read, and check
// the others on a line before running the expression on it.
func requiredSets(re *regexp.Regexp) []litSet {
	best := requiredLiterals(re)
	if best == nil {
		return nil
	}
	sets := []litSet{best}
	t, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return sets
	}
	var more [][]lit
	for _, s := range reqs(infoOf(t.Simplify())) {
		if minLen(s) >= 2 && !sameSet(s, best) && !slices.ContainsFunc(more, func(m []lit) bool { return sameSet(m, s) }) {
			more = append(more, s)
		}
	}
	// Best first, as bestSet ranks them.
	slices.SortStableFunc(more, func(a, b []lit) int {
		if minLen(a) != minLen(b) {
			return minLen(b) - minLen(a)
		}
		return len(a) - len(b)
	})
	for _, s := range more {
		if len(sets) == maxSets {
			break
		}
		sets = append(sets, s)
	}
	return sets
}

// maxSets bounds the literal sets a reader chooses from.
const maxSets = 4

func sameSet(a, b []lit) bool {
	return slices.EqualFunc(a, b, func(x, y lit) bool { return x.fold == y.fold && bytes.Equal(x.b, y.b) })
}

// reqs returns the sets of literals of in, one of each of which every
// match holds.
func reqs(in info) [][]lit {
	out := in.all
	if in.req != nil {
		out = append(out[:len(out):len(out)], in.req)
	}
	if in.exactOK && len(in.exact) > 0 {
		out = append(out[:len(out):len(out)], in.exact)
	}
	return out
}

// info is what a syntax tree says of the literals in its matches.
type info struct {
	exactOK bool
	exact   []lit   // when exactOK: every match is one of these ("" for empty)
	req     []lit   // nil, or a set one of which every match holds
	all     [][]lit // other such sets
}

func infoOf(n *syntax.Regexp) info {
	switch n.Op {
	case syntax.OpLiteral:
		return literalInfo(n.Rune, n.Flags&syntax.FoldCase != 0)
	case syntax.OpCharClass:
		var ls []lit
		for i := 0; i+1 < len(n.Rune); i += 2 {
			for r := n.Rune[i]; r <= n.Rune[i+1]; r++ {
				if len(ls) == maxClassLits || r == utf8.RuneError {
					return info{}
				}
				ls = append(ls, lit{b: utf8.AppendRune(nil, r)})
			}
		}
		if len(ls) == 0 {
			return info{}
		}
		return info{exactOK: true, exact: ls}
	case syntax.OpEmptyMatch, syntax.OpBeginLine, syntax.OpEndLine, syntax.OpBeginText,
		syntax.OpEndText, syntax.OpWordBoundary, syntax.OpNoWordBoundary:
		return info{exactOK: true, exact: []lit{{}}}
	case syntax.OpCapture:
		return infoOf(n.Sub[0])
	case syntax.OpPlus:
		s := infoOf(n.Sub[0])
		return info{req: bestSet(s.req, s.exact), all: reqs(s)}
	case syntax.OpRepeat:
		if n.Min == 0 {
			return info{}
		}
		s := infoOf(n.Sub[0])
		return info{req: bestSet(s.req, s.exact), all: reqs(s)}
	case syntax.OpQuest:
		s := infoOf(n.Sub[0])
		if s.exactOK {
			if u := union(s.exact, []lit{{}}); u != nil {
				return info{exactOK: true, exact: u}
			}
		}
		return info{}
	case syntax.OpConcat:
		return concatInfo(n.Sub)
	case syntax.OpAlternate:
		out := info{exactOK: true}
		for i, sub := range n.Sub {
			s := infoOf(sub)
			r := bestSet(s.req, s.exact)
			if i == 0 {
				out.req = r
			} else if out.req != nil {
				out.req = union(out.req, r)
			}
			if out.exactOK = out.exactOK && s.exactOK; out.exactOK {
				if i == 0 {
					out.exact = s.exact
				} else if out.exact = union(out.exact, s.exact); out.exact == nil {
					out.exactOK = false
				}
			}
		}
		if !out.exactOK {
			out.exact = nil
		}
		return out
	}
	return info{} // any character, star, no match
}

// literalInfo is the info of a literal: exact, or for a case-insensitive
// literal with letters that ASCII cannot fold, its longest piece without
// them, required.
func literalInfo(runes []rune, fold bool) info {
	var pieces [][]byte
	cur := []byte{}
	for _, r := range runes {
		ok := r != utf8.RuneError
		if fold {
			ok = ok && asciiFolds(r)
			if 'A' <= r && r <= 'Z' {
				r += 'a' - 'A'
			}
		}
		if !ok {
			pieces = append(pieces, cur)
			cur = []byte{}
			continue
		}
		cur = utf8.AppendRune(cur, r)
	}
	if pieces == nil {
		return info{exactOK: true, exact: []lit{mkLit(cur, fold)}}
	}
	pieces = append(pieces, cur)
	best := pieces[0]
	for _, p := range pieces {
		if len(p) > len(best) {
			best = p
		}
	}
	if len(best) == 0 {
		return info{}
	}
	return info{req: []lit{mkLit(best, fold)}}
}

// asciiFolds reports whether r is ASCII and every rune its case folds to
// is ASCII too.
func asciiFolds(r rune) bool {
	if r >= utf8.RuneSelf {
		return false
	}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		if f >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// mkLit makes a literal of b, case-insensitive only if it has a letter.
func mkLit(b []byte, fold bool) lit {
	if fold {
		fold = false
		for i, c := range b {
			if 'A' <= c && c <= 'Z' {
				b[i] = c + 'a' - 'A'
			}
			if 'a' <= b[i] && b[i] <= 'z' {
				fold = true
			}
		}
	}
	return lit{b: b, fold: fold}
}

// concatInfo: the literals of consecutive exactly known parts are joined
// (the cross product, while small); each run of them and the required set
// of each other part are candidates, of which the best is required.
func concatInfo(subs []*syntax.Regexp) info {
	cur := []lit{{}}
	exactOK := true
	var cands [][]lit
	for _, sub := range subs {
		s := infoOf(sub)
		if s.exactOK {
			if p := cross(cur, s.exact); p != nil {
				cur = p
				continue
			}
			exactOK = false
			cands = append(cands, cur)
			cur = s.exact
			continue
		}
		exactOK = false
		cands = append(cands, cur, s.req)
		cands = append(cands, s.all...)
		cur = []lit{{}}
	}
	cands = append(cands, cur)
	out := info{req: bestSet(cands...)}
	for _, c := range cands {
		if len(c) > 0 && minLen(c) > 0 {
			out.all = append(out.all, c)
		}
	}
	if exactOK {
		out.exactOK, out.exact = true, cur
	}
	return out
}

// cross returns every a followed by every b, or nil when there would be
// more than maxLits. A literal joined to a case-insensitive one is
// case-insensitive: it finds more lines, never fewer.
func cross(a, b []lit) []lit {
	if len(a)*len(b) > maxLits {
		return nil
	}
	var out []lit
	for _, x := range a {
		for _, y := range b {
			l := lit{b: append(append([]byte{}, x.b...), y.b...), fold: x.fold || y.fold}
			out = addLit(out, mkLit(l.b, l.fold))
		}
	}
	return out
}

// union returns the literals of a and b, or nil when there would be more
// than maxLits or either is nil.
func union(a, b []lit) []lit {
	if a == nil || b == nil {
		return nil
	}
	out := slices.Clone(a)
	for _, l := range b {
		out = addLit(out, l)
	}
	if len(out) > maxLits {
		return nil
	}
	return out
}

func addLit(ls []lit, l lit) []lit {
	for _, x := range ls {
		if x.fold == l.fold && bytes.Equal(x.b, l.b) {
			return ls
		}
	}
	return append(ls, l)
}

// bestSet returns the set whose shortest literal is longest, then the
// smallest; nil when every set is nil or holds the empty literal.
func bestSet(sets ...[]lit) []lit {
	var best []lit
	for _, s := range sets {
		if len(s) == 0 || minLen(s) == 0 {
			continue
		}
		if best == nil || minLen(s) > minLen(best) || minLen(s) == minLen(best) && len(s) < len(best) {
			best = s
		}
	}
	return best
}

func minLen(s []lit) int {
	m := -1
	for _, l := range s {
		if m < 0 || len(l.b) < m {
			m = len(l.b)
		}
	}
	return m
}

// in reports whether b holds one of the literals.
func (s litSet) in(b []byte) bool {
	for _, l := range s {
		if l.fold {
			if foldIndex(b, l.b, 0) >= 0 {
				return true
			}
		} else if bytes.Contains(b, l.b) {
			return true
		}
	}
	return false
}

// foldIndex returns the offset of the first occurrence at or after from of
// lower, an ASCII case-insensitive literal, in b; or -1.
func foldIndex(b, lower []byte, from int) int {
	lo := lower[0]
	up := lo
	if 'a' <= lo && lo <= 'z' {
		up = lo - 'a' + 'A'
	}
	nextLo, nextUp := -1, -1
	if lo == up {
		nextUp = len(b)
	}
	for i := from; i+len(lower) <= len(b); {
		if nextLo < i {
			nextLo = indexByteFrom(b, lo, i)
		}
		if nextUp < i {
			nextUp = indexByteFrom(b, up, i)
		}
		j := min(nextLo, nextUp)
		if j+len(lower) > len(b) {
			return -1
		}
		if asciiEqualFold(b[j:j+len(lower)], lower) {
			return j
		}
		i = j + 1
	}
	return -1
}

// indexByteFrom returns the offset of the first c in b at or after from,
// or len(b).
func indexByteFrom(b []byte, c byte, from int) int {
	if j := bytes.IndexByte(b[from:], c); j >= 0 {
		return from + j
	}
	return len(b)
}

// asciiEqualFold reports whether b equals lower, a lower-case ASCII
// literal, ignoring ASCII case.
func asciiEqualFold(b, lower []byte) bool {
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

// finder searches one chunk for the literals of a set, in order, each
// literal's first occurrence after an offset searched for once: it
// remembers where each literal next occurs, so a literal found on every
// line does not make the search for a rare one rescan the chunk, nor the
// other way round. A literal is searched for as one of its bytes, the
// rarest in the chunks searched when known (tune), then compared; a
// case-insensitive one's letter in either case.
type finder struct {
	set     litSet
	streams []stream
	next    []int // per stream, its next occurrence (len(b): none); -1: unknown
	b       []byte
}

type stream struct {
	c     byte // the byte searched for: the literal's at off (or its upper case)
	off   int
	index bool // search with bytes.Index: no byte of the literal is rare
	lit   lit
}

func newFinder(s litSet) *finder {
	if len(s) == 0 {
		return nil
	}
	f := &finder{set: s}
	f.tune(nil, 0)
	return f
}

// tune picks the byte each literal is searched for: the rarest in freq,
// the byte counts of n bytes like those searched (the first byte when
// freq is nil, searched for with bytes.Index). A case-insensitive letter counts in both cases, and costs
// two searches.
func (f *finder) tune(freq *[256]int, n int) {
	f.streams = f.streams[:0]
	for _, l := range f.set {
		off := 0
		if freq != nil {
			fewest := -1
			for i, c := range l.b {
				k := freq[c]
				if l.fold && 'a' <= c && c <= 'z' {
					k += freq[c-'a'+'A']
				}
				if fewest < 0 || k < fewest {
					fewest, off = k, i
				}
			}
			if !l.fold && len(l.b) > 1 && fewest*16 > n {
				off = 0 // as common as a byte in 16: compare at each offset
			}
		}
		c := l.b[off]
		st := stream{c: c, off: off, lit: l}
		st.index = !l.fold && len(l.b) > 1 && (freq == nil || freq[c]*16 > n)
		f.streams = append(f.streams, st)
		if l.fold && 'a' <= c && c <= 'z' {
			st.c = c - 'a' + 'A'
			f.streams = append(f.streams, st)
		}
	}
	if cap(f.next) < len(f.streams) {
		f.next = make([]int, len(f.streams))
	}
	f.next = f.next[:len(f.streams)]
}

// lines returns how many lines of b hold a literal, counting no further
// than limit.
func (f *finder) lines(b []byte, limit int) int {
	f.reset(b)
	n := 0
	for i := 0; i < len(b) && n < limit; {
		j := f.index(i)
		if j < 0 {
			break
		}
		n++
		nl := bytes.IndexByte(b[j:], '\n')
		if nl < 0 {
			break
		}
		i = j + nl + 1
	}
	return n
}

// reset starts the search of chunk b.
func (f *finder) reset(b []byte) {
	f.b = b
	for k := range f.next {
		f.next[k] = -1
	}
}

// index returns the offset of the first literal at or after from in the
// chunk, or -1. Offsets passed must not decrease between resets.
func (f *finder) index(from int) int {
	best := len(f.b)
	for k := range f.streams {
		if f.next[k] < from {
			f.next[k] = f.find(k, from)
		}
		best = min(best, f.next[k])
	}
	if best == len(f.b) {
		return -1
	}
	return best
}

// find returns the first occurrence of stream k's literal at or after
// from, or len(b).
func (f *finder) find(k, from int) int {
	s := &f.streams[k]
	b := f.b
	n := len(s.lit.b)
	if s.index {
		if j := bytes.Index(b[from:], s.lit.b); j >= 0 {
			return from + j
		}
		return len(b)
	}
	for i := from + s.off; i < len(b); {
		j := bytes.IndexByte(b[i:], s.c)
		if j < 0 {
			break
		}
		j += i
		start := j - s.off
		if start+n > len(b) {
			break
		}
		if s.lit.fold && asciiEqualFold(b[start:start+n], s.lit.b) || !s.lit.fold && bytes.Equal(b[start:start+n], s.lit.b) {
			return start
		}
		i = j + 1
	}
	return len(b)
}
