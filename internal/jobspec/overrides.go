package jobspec

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"trainyard/internal/domain"
)

// Overrides ("--set key=value") address one value in the document by a
// dotted path. They are applied to the parsed node tree before decoding, so
// an override goes through exactly the same conversion and validation as the
// same value written in the file.

// scalarTop are the top-level fields an override may set directly.
var scalarTop = []string{"name", "project", "pool", "env", "workdir", "entrypoint"}

// freeMaps are the top-level mappings whose entries are user-named.
var freeMaps = []string{"params", "env_vars", "labels"}

// override is one parsed --set argument.
type override struct {
	index int
	path  []string // one or two elements
	value *yaml.Node
	err   *domain.FieldError
}

// subsections are the mappings inside a section that --set may reach one
// field at a time: policy.warn.signal=USR1.
var subsections = map[string][]string{"policy.warn": {"signal", "before"}}

// settableKeys lists every key an override may name, for suggestions.
var settableKeys = func() []string {
	keys := append([]string{}, scalarTop...)
	keys = append(keys, nestedFields...)
	for _, m := range freeMaps {
		keys = append(keys, m+".<name>")
	}
	return keys
}()

func parseSets(sets []string) []override {
	out := make([]override, len(sets))
	for i, raw := range sets {
		out[i] = parseSet(i, raw)
	}
	return out
}

func parseSet(i int, raw string) override {
	o := override{index: i}
	fail := func(format string, args ...any) override {
		o.err = &domain.FieldError{Path: fmt.Sprintf("set[%d]", i), Message: fmt.Sprintf(format, args...)}
		return o
	}
	rawKey, val, ok := strings.Cut(raw, "=")
	key := strings.TrimSpace(rawKey)
	if !ok {
		return fail("%s has no \"=\"; write key=value, e.g. resources.gpus=2", quoteShort(raw))
	}
	if key == "" {
		return fail("the key before \"=\" is empty; write key=value, e.g. resources.gpus=2")
	}
	first, rest, dotted := strings.Cut(key, ".")
	switch {
	case contains(freeMaps, first):
		if !dotted {
			return fail("%q is a mapping and cannot be set whole; set one entry, e.g. %s.lr=0.1", first, first)
		}
		if rest == "" {
			return fail("the entry name after %q is empty; write e.g. %s.lr=0.1", first+".", first)
		}
		o.path = []string{first, rest}
	case sections[first] != nil:
		fields := sections[first]
		if !dotted {
			return fail("%q is a mapping and cannot be set whole; set one field, e.g. %s.%s=...", first, first, fields[0])
		}
		if sub, leaf, ok := strings.Cut(rest, "."); ok && contains(fields, sub) {
			leaves := subsections[first+"."+sub]
			if !contains(leaves, leaf) {
				if leaves == nil {
					return fail("unknown key %q: %s.%s is a single value and has no fields; write %s.%s=value", key, first, sub, first, sub)
				}
				return fail("unknown key %q; %s.%s has the fields %s", key, first, sub, strings.Join(leaves, ", "))
			}
			o.path = []string{first, sub, leaf}
			break
		}
		if subsections[key] != nil {
			return fail("%q is a mapping and cannot be set whole; set one field, e.g. %s.%s=...", key, key, subsections[key][0])
		}
		if !contains(fields, rest) {
			if h := suggest(rest, fields); h != "" {
				return fail("unknown key %q; did you mean %q?", key, first+"."+h)
			}
			return fail("unknown key %q; %s has the fields %s", key, first, strings.Join(fields, ", "))
		}
		o.path = []string{first, rest}
	case contains(scalarTop, first):
		if dotted {
			return fail("unknown key %q: %s is a single value and has no fields; write %s=value", key, first, first)
		}
		o.path = []string{first}
	case first == "after" && !dotted:
		node, msg := afterValue(val)
		if msg != "" {
			return fail("after=%s: %s", quoteShort(val), msg)
		}
		o.path, o.value = []string{"after"}, node
		return o
	case first == "inputs" || first == "secrets":
		return fail("%q is a list and cannot be set with --set; edit the spec file", first)
	case first == "shell":
		return fail("%q cannot be set; set entrypoint to a string to run it under /bin/sh -c", first)
	default:
		if h := suggestKey(key); h != "" {
			return fail("unknown key %q; did you mean %q?", key, h)
		}
		return fail("unknown key %q; settable keys are %s", key, strings.Join(settableKeys, ", "))
	}
	o.value = scalarValue(val)
	return o
}

// suggestKey finds the settable key closest to an unknown one.
func suggestKey(key string) string {
	first, rest, dotted := strings.Cut(key, ".")
	if !dotted {
		if h := suggest(first, scalarTop); h != "" {
			return h
		}
		leaves := make([]string, len(nestedFields))
		for i, f := range nestedFields {
			leaves[i] = f[strings.IndexByte(f, '.')+1:]
		}
		if h := suggest(first, leaves); h != "" {
			return nestedFields[indexOf(leaves, h)]
		}
		return ""
	}
	names := append(append([]string{}, sectionOrder...), freeMaps...)
	h := suggest(first, names)
	if h == "" {
		return ""
	}
	if fields := sections[h]; fields != nil {
		if f := suggest(rest, fields); f != "" {
			return h + "." + f
		}
		return ""
	}
	return h + "." + rest
}

// scalarValue reads an override's value as one YAML scalar, so "2" is a
// number, "true" a boolean and "'2'" the string 2. Text that YAML would read
// as a list, a mapping or several lines stays a plain string.
func scalarValue(val string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: val}
	if strings.ContainsAny(val, "\n\r") {
		return n
	}
	if bound, _ := nodeBound([]byte(val)); bound > MaxNodes {
		return n // more marks than a spec may have nodes: not worth parsing as one value (limits.go)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(val), &doc); err != nil || len(doc.Content) != 1 {
		return n
	}
	if c := doc.Content[0]; c.Kind == yaml.ScalarNode {
		n.Value, n.Tag, n.Style = c.Value, c.ShortTag(), c.Style
	}
	return n
}

func quoteShort(s string) string {
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return fmt.Sprintf("%q", s)
}

// apply writes o into the root mapping, creating a section mapping when the
// document has none.
func (d *decoder) apply(root *yaml.Node, o override) *domain.FieldError {
	d.origin[o.value] = o.index
	m := root
	for depth := range len(o.path) - 1 {
		name := o.path[depth]
		sec := lookup(m, name)
		switch {
		case sec == nil:
			sec = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			d.put(m, name, sec, o.index)
		case isNull(resolve(sec)):
			sec = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			d.put(m, name, sec, o.index)
		case sec.Kind == yaml.AliasNode && resolve(sec) != nil && resolve(sec).Kind == yaml.MappingNode:
			// Copy an aliased mapping so the override does not change the
			// anchor's other uses.
			target := resolve(sec)
			cp := *target
			cp.Content = append([]*yaml.Node{}, target.Content...)
			cp.Anchor = ""
			sec = &cp
			d.put(m, name, sec, -1)
		}
		if sec.Kind != yaml.MappingNode {
			return &domain.FieldError{Path: fmt.Sprintf("set[%d]", o.index),
				Message: fmt.Sprintf("cannot set %s: %s in the spec is %s, not a mapping", strings.Join(o.path, "."), strings.Join(o.path[:depth+1], "."), describe(sec))}
		}
		m = sec
	}
	d.put(m, o.path[len(o.path)-1], o.value, o.index)
	return nil
}

// lookup returns the value of the first key named key in mapping m.
func lookup(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := resolve(m.Content[i]); k != nil && k.Kind == yaml.ScalarNode && k.Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// put sets key in mapping m to v, replacing the first existing value. A new
// key node is attributed to override index (none when index < 0).
func (d *decoder) put(m *yaml.Node, key string, v *yaml.Node, index int) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := resolve(m.Content[i]); k != nil && k.Kind == yaml.ScalarNode && k.Value == key {
			m.Content[i+1] = v
			return
		}
	}
	k := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}
	if index >= 0 {
		d.origin[k] = index
		d.origin[v] = index
	}
	m.Content = append(m.Content, k, v)
}
