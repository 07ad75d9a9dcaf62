// Package yamlcheck reports what is wrong with a YAML document, field by
// field, with each problem's path (pools[1].nodes[0].gpus), line and, for a
// misspelt key, the field most likely meant. The job-spec decoder and the
// server config share it: one spelling of "did you mean", one way of reading
// the YAML library's errors.
//
// Check walks a yaml.Node tree against the Go type the document is meant
// for, following its yaml (or json) field tags, and collects every problem
// instead of stopping at the first; decoding the same document afterwards
// with the YAML library then cannot fail.
package yamlcheck

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"trainyard/internal/domain"
	"trainyard/internal/lazyre"
)

// Tags a document's field names can come from.
const (
	YAML = "yaml" // the YAML library's own decoding
	JSON = "json" // types decoded through JSON (API shapes kept as yaml.Node)
)

// Result is what Check learned: every problem, and the line each field
// path was written on (for problems found later, by validation).
type Result struct {
	Errs  domain.FieldErrors
	Lines map[string]int
}

// LineOf returns the line of path or of its nearest recorded ancestor; 0
// when unknown.
func (r *Result) LineOf(path string) int {
	for path != "" {
		if l, ok := r.Lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			return 0
		}
		path = path[:i]
	}
	return 0
}

func (r *Result) fail(path string, n *yaml.Node, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	r.Errs = append(r.Errs, domain.FieldError{Path: path, Line: line, Message: fmt.Sprintf(format, args...)})
}

var (
	yamlNodeType = reflect.TypeFor[yaml.Node]()
	yamlUnmarsh  = reflect.TypeFor[yaml.Unmarshaler]()
	jsonUnmarsh  = reflect.TypeFor[json.Unmarshaler]()
	textUnmarsh  = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// Check walks n, the value at path, against type t whose fields are named
// by tag (YAML or JSON), adding what is wrong to res. Fields of type
// yaml.Node are not looked into: their owner checks them, with the type
// they stand for.
func Check(n *yaml.Node, t reflect.Type, tag, path string, res *Result) {
	if res.Lines == nil {
		res.Lines = map[string]int{}
	}
	n = resolve(n)
	if n == nil || isNull(n) || t == yamlNodeType {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if custom(t, tag) {
		leaf(n, t, tag, path, res)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			res.fail(path, n, "must be a mapping (key: value), got %s", Describe(n))
			return
		}
		fields := map[string]reflect.Type{}
		var names []string
		collectFields(t, tag, fields, &names)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := resolve(n.Content[i]), n.Content[i+1]
			key := k.Value
			kpath := join(path, key)
			res.Lines[kpath] = k.Line
			ft, ok := fields[key]
			if !ok {
				unknown(res, kpath, k, key, path, names)
				continue
			}
			Check(v, ft, tag, kpath, res)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			res.fail(path, n, "must be a mapping (key: value), got %s", Describe(n))
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := resolve(n.Content[i]), n.Content[i+1]
			kpath := join(path, k.Value)
			res.Lines[kpath] = k.Line
			leaf(k, t.Key(), tag, kpath, res)
			Check(v, t.Elem(), tag, kpath, res)
		}
	case reflect.Slice, reflect.Array:
		if n.Kind != yaml.SequenceNode {
			res.fail(path, n, "must be a list, got %s", Describe(n))
			return
		}
		for i, e := range n.Content {
			epath := fmt.Sprintf("%s[%d]", path, i)
			res.Lines[epath] = e.Line
			Check(e, t.Elem(), tag, epath, res)
		}
	case reflect.Interface:
		// Anything goes.
	default:
		leaf(n, t, tag, path, res)
	}
}

// custom reports whether t decodes itself from a scalar.
func custom(t reflect.Type, tag string) bool {
	p := reflect.PointerTo(t)
	if tag == JSON {
		return p.Implements(jsonUnmarsh) || p.Implements(textUnmarsh)
	}
	return p.Implements(yamlUnmarsh) || p.Implements(textUnmarsh)
}

// collectFields lists the fields of struct t by their tag names, inlined
// and embedded structs included, in declaration order.
func collectFields(t reflect.Type, tag string, out map[string]reflect.Type, names *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get(tag), ",")
		if name == "-" {
			continue
		}
		// yaml inlines only with ",inline"; encoding/json inlines untagged embedded structs.
		inline := tag == YAML && slices.Contains(strings.Split(opts, ","), "inline")
		if (inline || (tag == JSON && f.Anonymous && name == "")) && f.Type.Kind() == reflect.Struct {
			collectFields(f.Type, tag, out, names)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
			if tag == YAML {
				name = strings.ToLower(name)
			}
		}
		if _, dup := out[name]; !dup {
			out[name] = f.Type
			*names = append(*names, name)
		}
	}
}

// maxListed bounds how many fields an "unknown field" message lists.
const maxListed = 12

func unknown(res *Result, kpath string, k *yaml.Node, key, parent string, names []string) {
	if h := Suggest(key, names, nil); h != "" {
		res.fail(kpath, k, "unknown field; did you mean %s?", h)
		return
	}
	where := "here"
	if parent != "" {
		where = "in " + parent
	}
	if len(names) > maxListed {
		res.fail(kpath, k, "unknown field; there is no such field %s", where)
		return
	}
	res.fail(kpath, k, "unknown field; the fields %s are: %s", where, strings.Join(names, ", "))
}

// leaf decodes the value n into a fresh t the way the real decoding will,
// reporting a failure in the user's terms.
func leaf(n *yaml.Node, t reflect.Type, tag, path string, res *Result) {
	v := reflect.New(t).Interface()
	var err error
	if tag == JSON {
		var generic any
		if err = n.Decode(&generic); err == nil {
			var b []byte
			if b, err = json.Marshal(generic); err == nil {
				err = json.Unmarshal(b, v)
			}
		}
	} else {
		err = n.Decode(v)
	}
	if err == nil {
		return
	}
	if want := wanted(t); want != "" && !custom(t, tag) {
		res.fail(path, n, "must be %s, got %s", want, Describe(n))
		return
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n  ")
	if m := lineRE.FindStringSubmatch(msg); m != nil {
		msg = m[2]
	}
	res.fail(path, n, "%s", msg)
}

// wanted names what a value of basic type t looks like.
func wanted(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping (key: value)"
	}
	return ""
}

var lineRE = lazyre.New(`^line (\d+): (.*)$`)

// parserProblems are the YAML parser's (not scanner's) messages. The
// library reports their line 0-based, so it is shifted by one.
var parserProblems = []string{
	"did not find expected <stream-start>",
	"did not find expected <document start>",
	"found undefined tag handle",
	"did not find expected node content",
	"did not find expected '-' indicator",
	"did not find expected key",
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
	"found duplicate %YAML directive",
	"found incompatible YAML document",
	"found duplicate %TAG directive",
}

// SyntaxError reads the YAML library's parse error for doc: the 1-based
// line it names (0 when none), kept within the document, and its message.
func SyntaxError(err error, doc []byte) (line int, msg string) {
	msg = strings.TrimPrefix(err.Error(), "yaml: ")
	if m := lineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
		if slices.Contains(parserProblems, msg) {
			line++
		}
		if last := strings.Count(strings.TrimRight(string(doc), " \t\r\n"), "\n") + 1; line > last {
			line = last
		}
	}
	return line, msg
}

func join(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// resolve follows aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 16; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// Describe names what n is, for "got ..." in messages.
func Describe(n *yaml.Node) string {
	switch {
	case n == nil:
		return "nothing"
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Kind == yaml.DocumentNode:
		return "a document"
	case isNull(n):
		return "nothing"
	}
	v := n.Value
	if utf8.RuneCountInString(v) > 40 {
		v = string([]rune(v)[:40]) + "…"
	}
	return strconv.Quote(v)
}
