package local

import (
	"bytes"
	"slices"
	"strings"
)

// minRedact is the shortest value the supervisor redacts: hiding every
// occurrence of a two-letter string would garble the log and protect
// nothing. The server refuses to store shorter secrets.
const minRedact = 4

// redactedMark replaces each secret value in the log.
var redactedMark = []byte("[redacted]")

// redactor hides secret values in log lines. A nil redactor changes nothing.
// It is immutable after construction, so both output pumps share it.
type redactor struct {
	values [][]byte // each at least minRedact bytes, no duplicates
}

// newRedactor returns a redactor for values, or nil when none is long
// enough. A value spanning several lines is also redacted line by line,
// because the log holds lines.
func newRedactor(values []string) *redactor {
	var vs []string
	add := func(v string) {
		if len(v) >= minRedact && !slices.Contains(vs, v) {
			vs = append(vs, v)
		}
	}
	for _, v := range values {
		add(v)
		if strings.ContainsAny(v, "\r\n") {
			for _, l := range strings.FieldsFunc(v, func(r rune) bool { return r == '\n' || r == '\r' }) {
				add(l)
			}
		}
	}
	if len(vs) == 0 {
		return nil
	}
	r := &redactor{}
	for _, v := range vs {
		r.values = append(r.values, []byte(v))
	}
	return r
}

// line returns line with every byte covered by an occurrence of any value
// replaced: overlapping or adjacent occurrences become one [redacted]. It
// returns line itself when nothing matched.
func (r *redactor) line(line []byte) []byte {
	if r == nil {
		return line
	}
	var spans [][2]int
	for _, v := range r.values {
		for i := 0; i+len(v) <= len(line); {
			j := bytes.Index(line[i:], v)
			if j < 0 {
				break
			}
			spans = append(spans, [2]int{i + j, i + j + len(v)})
			i += j + 1
		}
	}
	if len(spans) == 0 {
		return line
	}
	slices.SortFunc(spans, func(a, b [2]int) int { return a[0] - b[0] })
	out := make([]byte, 0, len(line))
	pos := 0
	for k := 0; k < len(spans); {
		start, end := spans[k][0], spans[k][1]
		for k++; k < len(spans) && spans[k][0] <= end; k++ {
			end = max(end, spans[k][1])
		}
		out = append(append(out, line[pos:start]...), redactedMark...)
		pos = end
	}
	return append(out, line[pos:]...)
}

// holdBack returns how many bytes at the end of piece could be the start of
// a value: the length of its longest suffix that is a proper prefix of some
// value. A line split there keeps those bytes for the next piece, so no
// value is cut in two and escapes redaction. It never returns len(piece).
func (r *redactor) holdBack(piece []byte) int {
	if r == nil {
		return 0
	}
	best := 0
	for _, v := range r.values {
		for k := min(len(v)-1, len(piece)-1); k > best; k-- {
			if bytes.HasSuffix(piece, v[:k]) {
				best = k
				break
			}
		}
	}
	return best
}
