package domain

import (
	"fmt"
	"unicode/utf8"
)

// UnsafeRune reports whether r may not appear in text that people read in
// a terminal: C0 controls (tab and newline included), DEL, C1 controls, and
// the bidirectional formatting characters, which make text display in an
// order other than the one stored. Such characters could move the cursor,
// rewrite the screen or disguise what a name or a reason says.
func UnsafeRune(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, // ALM, LRM, RLM
		r >= 0x202a && r <= 0x202e, // LRE, RLE, PDF, LRO, RLO
		r >= 0x2066 && r <= 0x2069: // LRI, RLI, FSI, PDI
		return true
	}
	return false
}

// TextProblem says why s may not be stored as one line of text shown to
// people (a reason, a note, a token's name, a label value), or returns "".
// multiline allows newlines and tabs (a description).
func TextProblem(s string, multiline bool) string {
	if !utf8.ValidString(s) {
		return "is not valid UTF-8 text"
	}
	for i, r := range s {
		if multiline && (r == '\n' || r == '\t') {
			continue
		}
		if !UnsafeRune(r) {
			continue
		}
		switch {
		case r == '\n':
			return fmt.Sprintf("contains a line break (at byte %d); use one line of text", i)
		case r > 0x9f:
			return fmt.Sprintf("contains the bidirectional formatting character U+%04X (at byte %d), which makes text display other than it reads; remove it", r, i)
		}
		return fmt.Sprintf("contains the control character U+%04X (at byte %d), which could drive a terminal; use plain text", r, i)
	}
	return ""
}
