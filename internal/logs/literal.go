package logs

import (
	"bytes"
	"regexp"
	"regexp/syntax"
	"strings"
)

// needle is a literal every match of an expression holds, found anywhere
// in the expression, not only at its start: `(?i)loss=\d+` holds "loss=",
// `step \d+ .*error` holds "error". Lines without it cannot match, so
// readers search chunks for it at about memory speed and run the
// expression only on the lines that hold it.
type needle struct {
	lit  []byte
	fold bool // ASCII case-insensitive: lit is lower case
}

// requiredLiteral returns the longest literal every match of re holds, or
// nil. A case-insensitive literal is used only when it is ASCII, and only
// its longest piece without 'k' or 's', whose Unicode case folds (the
// Kelvin sign, the long s) are not ASCII: an ASCII search is then exact.
func requiredLiteral(re *regexp.Regexp) *needle {
	if re == nil {
		return nil
	}
	if lit, _ := re.LiteralPrefix(); lit != "" {
		return &needle{lit: []byte(lit)}
	}
	t, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return nil
	}
	var best *needle
	consider := func(n *syntax.Regexp) {
		for n.Op == syntax.OpCapture || n.Op == syntax.OpPlus { // x+ holds x
			n = n.Sub[0]
		}
		if n.Op != syntax.OpLiteral {
			return
		}
		s := string(n.Rune)
		c := &needle{lit: []byte(s)}
		if n.Flags&syntax.FoldCase != 0 {
			l := strings.ToLower(s)
			if !isASCII(l) {
				return
			}
			// Any piece of a required literal is required too: take the
			// longest without 'k' or 's'.
			piece := ""
			for _, p := range strings.FieldsFunc(l, func(r rune) bool { return r == 'k' || r == 's' }) {
				if len(p) > len(piece) {
					piece = p
				}
			}
			c = &needle{lit: []byte(piece), fold: true}
		}
		if best == nil || len(c.lit) > len(best.lit) {
			best = c
		}
	}
	t = t.Simplify()
	for t.Op == syntax.OpCapture {
		t = t.Sub[0]
	}
	if t.Op == syntax.OpConcat {
		for _, s := range t.Sub {
			consider(s)
		}
	} else {
		consider(t)
	}
	if best == nil || len(best.lit) < 2 { // one byte finds too much to pay off
		return nil
	}
	return best
}

func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// index returns the offset of the first occurrence of the needle in b, or -1.
func (n *needle) index(b []byte) int {
	if !n.fold {
		return bytes.Index(b, n.lit)
	}
	// Case-insensitive: find the first byte in either case (each position
	// searched for once), then compare the rest.
	lo := n.lit[0]
	up := lo
	if 'a' <= lo && lo <= 'z' {
		up = lo - 'a' + 'A'
	}
	nextLo, nextUp := -1, -1
	for i := 0; i+len(n.lit) <= len(b); {
		if nextLo < i {
			if nextLo = bytes.IndexByte(b[i:], lo); nextLo >= 0 {
				nextLo += i
			} else {
				nextLo = len(b)
			}
		}
		if nextUp < i {
			if nextUp = bytes.IndexByte(b[i:], up); nextUp >= 0 {
				nextUp += i
			} else {
				nextUp = len(b)
			}
		}
		j := min(nextLo, nextUp)
		if j+len(n.lit) > len(b) {
			return -1
		}
		if asciiEqualFold(b[j:j+len(n.lit)], n.lit) {
			return j
		}
		i = j + 1
	}
	return -1
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
