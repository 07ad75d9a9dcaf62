package jobspec

// Limits on what a spec document stands for. A YAML alias (*name) repeats
// the value its anchor (&name) names, so a document of a few kilobytes can
// describe gigabytes ("billion laughs"), and a megabyte of "[0,0,0,…" is
// half a million values for the parser to build. Documents are measured
// before anything large is built: the text is scanned for an upper bound of
// its nodes before it is parsed, and the parsed tree is weighed with every
// alias counted as a copy of its anchor (each anchor weighed once) before
// it is decoded.

import (
	"fmt"

	"go.yaml.in/yaml/v3"

	"trainyard/internal/domain"
)

const (
	// MaxExpandedBytes bounds the text of a spec (keys and values) once
	// every alias is replaced by the value it names.
	MaxExpandedBytes = 1 << 20
	// MaxAliases bounds the aliases (*name) in a spec document.
	MaxAliases = 100
	// MaxNodes bounds the nodes of a spec (mappings, lists, keys and
	// values) once every alias is replaced by the value it names.
	MaxNodes = 100_000
)

// limitsHint is the way out offered with every limit.
const limitsHint = "keep bulk data out of the spec: put it in a file the job reads (inputs:), and write repeated values out instead of using aliases"

// nodeBound returns an upper bound of the nodes a YAML parser builds from
// doc, without parsing it. Besides a document and its root, every node is
// introduced by one of the marks , [ { : ? (counted wherever they appear),
// by '-' followed by a blank or at a line's start (a list item or a "---"
// document start), or by '.' at a line's start ("..."), and no mark
// introduces more than two (a key and its value). It also returns the
// number of marks.
func nodeBound(doc []byte) (bound, marks int) {
	for i, c := range doc {
		switch c {
		case ',', '[', '{', ':', '?':
			marks++
		case '-':
			if i == 0 || doc[i-1] == '\n' || doc[i-1] == '\r' || i+1 == len(doc) || isBlank(doc[i+1]) {
				marks++
			}
		case '.':
			if i == 0 || doc[i-1] == '\n' || doc[i-1] == '\r' {
				marks++
			}
		}
	}
	return 2 + 2*marks, marks
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// checkBound refuses, before parsing, a document that may hold more than
// MaxNodes nodes.
func checkBound(doc []byte) *domain.FieldError {
	bound, marks := nodeBound(doc)
	if bound <= MaxNodes {
		return nil
	}
	return &domain.FieldError{Path: docPath, Message: fmt.Sprintf(
		"has too many entries: its %d marks that start an entry (, : - [ { ?) allow up to %d nodes (keys, values and list items), and a spec may have at most %d; %s",
		marks, bound, MaxNodes, limitsHint)}
}

// weight is the size of a node's tree with every alias expanded.
type weight struct {
	bytes int64 // text of its scalars
	nodes int64
}

// saturate keeps weights from overflowing: anything above it is over every
// limit anyway.
const saturate = 1 << 40

func (w weight) add(o weight) weight {
	return weight{min(w.bytes+o.bytes, saturate), min(w.nodes+o.nodes, saturate)}
}

// measurer weighs a parsed document. Only anchored nodes can be reached
// twice (through aliases), so only they are remembered: the walk visits
// every node of the text once, whatever the aliases multiply.
type measurer struct {
	memo    map[*yaml.Node]weight
	busy    map[*yaml.Node]bool // anchors being weighed: an alias to one is a loop
	aliases int
	err     *domain.FieldError
}

// measure checks the tree under n against MaxAliases, MaxNodes and
// MaxExpandedBytes without expanding any alias.
func measure(n *yaml.Node) *domain.FieldError {
	m := &measurer{memo: map[*yaml.Node]weight{}, busy: map[*yaml.Node]bool{}}
	w := m.weigh(n)
	switch {
	case m.err != nil:
		return m.err
	case w.nodes > MaxNodes:
		return &domain.FieldError{Path: docPath, Message: fmt.Sprintf(
			"has %s nodes (keys, values and list items, counting each alias (*name) as a copy of what it names), and a spec may have at most %d; %s",
			atLeast(w.nodes), MaxNodes, limitsHint)}
	case w.bytes > MaxExpandedBytes:
		return &domain.FieldError{Path: docPath, Message: fmt.Sprintf(
			"expands to %s bytes of text (counting each alias (*name) as a copy of what it names), and a spec may hold at most %d (1 MiB); %s",
			atLeast(w.bytes), MaxExpandedBytes, limitsHint)}
	}
	return nil
}

// atLeast prints a weight, which may have saturated.
func atLeast(v int64) string {
	if v >= saturate {
		return fmt.Sprintf("more than %d", int64(saturate))
	}
	return fmt.Sprint(v)
}

func (m *measurer) weigh(n *yaml.Node) weight {
	if n == nil || m.err != nil {
		return weight{}
	}
	if n.Kind == yaml.AliasNode {
		m.aliases++
		if m.aliases > MaxAliases {
			m.err = &domain.FieldError{Path: docPath, Line: n.Line, Message: fmt.Sprintf(
				"uses more than %d aliases (*name); a spec may use at most %d: write the values out instead", MaxAliases, MaxAliases)}
			return weight{}
		}
		if m.busy[n.Alias] {
			m.err = &domain.FieldError{Path: docPath, Line: n.Line, Message: fmt.Sprintf(
				"uses the alias *%s inside the value it names, which makes that value endless; write the value out", n.Value)}
			return weight{}
		}
		return m.weigh(n.Alias)
	}
	if n.Anchor != "" {
		if w, ok := m.memo[n]; ok {
			return w
		}
		m.busy[n] = true
		defer delete(m.busy, n)
	}
	w := weight{nodes: 1}
	if n.Kind == yaml.ScalarNode {
		w.bytes = int64(len(n.Value))
	}
	for _, c := range n.Content {
		w = w.add(m.weigh(c))
	}
	if n.Anchor != "" {
		m.memo[n] = w
	}
	return w
}
