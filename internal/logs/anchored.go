package logs

import (
	"bytes"
	"regexp"
	"regexp/syntax"
	"unicode/utf8"
)

// anchored runs an expression that every match of begins with one
// case-sensitive literal (`lr (\d+\.)+\d+ tokens`) only where that literal
// is, anchored there: a line holds a match if and only if a match starts at
// one of the literal's places, and an anchored try gives up at the first
// byte that cannot continue, where an unanchored one walks the whole line.
type anchored struct {
	prefix []byte
	re     *regexp.Regexp // ^(?:expr)
}

// newAnchored returns the anchored runner of re, or nil when its matches
// need not start with a literal.
func newAnchored(re *regexp.Regexp) *anchored {
	if re == nil {
		return nil
	}
	tree, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return nil
	}
	tree = tree.Simplify()
	for tree.Op == syntax.OpCapture {
		tree = tree.Sub[0]
	}
	first := tree
	if tree.Op == syntax.OpConcat {
		first = tree.Sub[0]
	}
	if first.Op != syntax.OpLiteral || first.Flags&syntax.FoldCase != 0 || len(first.Rune) == 0 {
		return nil
	}
	var prefix []byte
	for _, r := range first.Rune {
		if r == utf8.RuneError { // also matches invalid UTF-8, which is not its bytes
			return nil
		}
		prefix = utf8.AppendRune(prefix, r)
	}
	a, err := regexp.Compile(`^(?:` + re.String() + `)`)
	if err != nil {
		return nil
	}
	return &anchored{prefix: prefix, re: a}
}

// match reports whether text holds a match of the expression.
func (a *anchored) match(text []byte) bool {
	for off := 0; ; off++ {
		i := bytes.Index(text[off:], a.prefix)
		if i < 0 {
			return false
		}
		off += i
		if a.re.Match(text[off:]) {
			return true
		}
	}
}
