package jobspec

// Job templates: a spec document with ${var} placeholders in its values and
// a vars: block declaring each variable (docs/templates.md).
//
// Substitution works on the parsed node tree, never on the text: a variable
// fills one scalar value and the result is always a string, so no value can
// add fields, change a list or end a mapping. The expanded document then goes
// through Load like any spec file, with its problems reported at the
// template's lines.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"

	"trainyard/internal/domain"
	"trainyard/internal/lazyre"
)

// Rules of template names, variable names and references.
const (
	// TemplateVarPattern is the rule for variable names.
	TemplateVarPattern = `^[A-Za-z_][A-Za-z0-9_]*$`
	// MaxTemplateNameLen bounds a template's name, so that "name@version"
	// fits in a label value.
	MaxTemplateNameLen = 48
	// maxTemplateVars bounds the variables of one template.
	maxTemplateVars = 100
	// maxVarNameLen bounds a variable's name.
	maxVarNameLen = 64
	// TemplateLabel is the label the platform sets on a job created from a
	// template: "name@version".
	TemplateLabel = "trainyard.template"
)

// The template's own top-level fields, besides the spec's.
const (
	tmplVarsKey = "vars"
	tmplDescKey = "description"
)

var (
	templateVarRE = lazyre.New(TemplateVarPattern)
	varFields     = []string{"default", "description", "allowed"}
)

// TemplateVar is one declared variable.
type TemplateVar struct {
	Name        string
	Default     string // meaningful when HasDefault
	HasDefault  bool   // false: the variable is required
	Description string
	Allowed     []string // when not empty, the only values accepted
}

// Template is a parsed job template. It is immutable; Expand may be called
// any number of times, concurrently.
type Template struct {
	Description string
	Vars        []TemplateVar // in document order
	// Project is the body's literal project field, "" when it has none.
	Project string

	body  *yaml.Node          // the root mapping without vars and description
	lines map[string]int      // body field path → line
	uses  map[string][]string // body field path → variables it uses
}

// TemplateHash returns "sha256:<hex>" of a template document: two creates
// with the same bytes store one version.
func TemplateHash(doc []byte) string {
	sum := sha256.Sum256(doc)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// CheckTemplateName reports what is wrong with a template name, or "".
func CheckTemplateName(name string) string {
	switch {
	case name == "":
		return "is required, e.g. resnet-train"
	case len(name) > MaxTemplateNameLen:
		return fmt.Sprintf("is %d characters long; a template name may have at most %d", len(name), MaxTemplateNameLen)
	case !nameRE.MatchString(name):
		return fmt.Sprintf("%q is not a valid template name: use lowercase letters, digits and '-', starting and ending with a letter or digit, e.g. %s", name, slug(name, "resnet-train"))
	}
	return ""
}

// ParseTemplateRef splits "name" or "name@version" (version 0: the latest).
func ParseTemplateRef(ref string) (name string, version int, err error) {
	name, v, pinned := strings.Cut(ref, "@")
	if msg := CheckTemplateName(name); msg != "" {
		return "", 0, fmt.Errorf("template %s", msg)
	}
	if !pinned {
		return name, 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return "", 0, fmt.Errorf("template version %q is not a positive whole number: write NAME or NAME@VERSION, e.g. %s@2", v, name)
	}
	return name, n, nil
}

// piece is one part of a scalar: literal text, or a variable reference.
type piece struct {
	text string
	name string // set for a reference
}

// splitRefs splits s into literal text and ${name} references; "$${" is a
// literal "${". It returns a message on a malformed reference.
func splitRefs(s string) ([]piece, string) {
	var out []piece
	var lit strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			lit.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return nil, fmt.Sprintf("has a ${ without a closing }; close it (${name}) or write $${ for a literal ${")
			}
			name := s[i+2 : i+2+end]
			if !templateVarRE.MatchString(name) {
				return nil, fmt.Sprintf("${%s} is not a variable reference: names are letters, digits and '_', not starting with a digit; for a literal ${ (e.g. shell syntax) write $${%s}", name, name)
			}
			if lit.Len() > 0 {
				out = append(out, piece{text: lit.String()})
				lit.Reset()
			}
			out = append(out, piece{name: name})
			i += 2 + end + 1
		default:
			lit.WriteByte(s[i])
			i++
		}
	}
	if lit.Len() > 0 {
		out = append(out, piece{text: lit.String()})
	}
	return out, ""
}

// changed reports whether the scalar s, split into ps, reads differently
// once substituted: it holds a reference or an escape.
func changed(s string, ps []piece) bool {
	for _, p := range ps {
		if p.name != "" {
			return true
		}
	}
	return len(ps) != 1 || ps[0].text != s
}

// ParseTemplate parses a template document and checks everything that does
// not depend on the variables' values: the vars block, every ${...}
// reference, the fields of the body, and that it holds no credentials. On
// failure the error is domain.FieldErrors with every problem.
func ParseTemplate(doc []byte) (*Template, error) {
	root, errs := parseDocument(doc)
	if root == nil {
		return nil, errs
	}
	t := &Template{lines: map[string]int{}, uses: map[string][]string{}}
	body := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: root.Line, Column: root.Column}
	var varsNode *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch key := resolve(k); {
		case key != nil && key.Kind == yaml.ScalarNode && key.Value == tmplVarsKey:
			varsNode = v
		case key != nil && key.Kind == yaml.ScalarNode && key.Value == tmplDescKey:
			if rv := resolve(v); rv == nil || rv.Kind != yaml.ScalarNode {
				errs.Add(tmplDescKey, "must be text, got %s", describe(v))
			} else if !isNull(rv) {
				t.Description = rv.Value
				if msg := domain.TextProblem(rv.Value, true); msg != "" {
					errs.Add(tmplDescKey, "%s", msg)
				}
			}
		default:
			body.Content = append(body.Content, k, v)
		}
	}
	t.body = body
	t.parseVars(varsNode, &errs)
	declared := map[string]bool{}
	for _, v := range t.Vars {
		declared[v.Name] = true
	}
	used := map[string]bool{}
	t.walk(body, "", func(path string, n *yaml.Node, key bool) {
		if key {
			if ps, msg := splitRefs(n.Value); strings.Contains(n.Value, "${") && (msg != "" || changed(n.Value, ps)) {
				errs = append(errs, domain.FieldError{Path: join(path, n.Value), Line: n.Line,
					Message: "variables may appear only in values, not in field or entry names"})
			}
			return
		}
		if !strings.Contains(n.Value, "${") {
			return
		}
		ps, msg := splitRefs(n.Value)
		if msg != "" {
			errs = append(errs, domain.FieldError{Path: path, Line: n.Line, Message: msg})
			return
		}
		for _, p := range ps {
			if p.name == "" {
				continue
			}
			used[p.name] = true
			if !slices.Contains(t.uses[path], p.name) {
				t.uses[path] = append(t.uses[path], p.name)
			}
			if !declared[p.name] {
				hint := ""
				if h := suggest(p.name, slices.Collect(maps.Keys(declared))); h != "" {
					hint = fmt.Sprintf(" (did you mean ${%s}?)", h)
				}
				errs = append(errs, domain.FieldError{Path: path, Line: n.Line, Message: fmt.Sprintf(
					"uses ${%s}, which is not declared%s; declare it under vars: (%s: {default: ..., description: ...}), or write $${%s} for a literal ${ such as shell syntax",
					p.name, hint, p.name, p.name)})
			}
		}
	})
	for _, v := range t.Vars {
		if !used[v.Name] {
			errs = append(errs, domain.FieldError{Path: "vars." + v.Name, Line: t.lines["vars."+v.Name],
				Message: fmt.Sprintf("is declared but never used; use it as ${%s} in a value or remove it", v.Name)})
		}
	}
	if p := lookup(body, "project"); p != nil {
		switch rp := resolve(p); {
		case rp != nil && rp.Kind == yaml.ScalarNode && strings.Contains(rp.Value, "${") && len(t.uses["project"]) > 0:
			errs = append(errs, domain.FieldError{Path: "project", Line: rp.Line,
				Message: "may not use a variable: a template belongs to one project and its jobs run there; give the project with: trainyard template create NAME -f FILE --project P"})
		case rp != nil && rp.Kind == yaml.ScalarNode && !isNull(rp):
			t.Project = rp.Value
		}
	}
	checkCredentials(body, &errs)
	if labels := resolve(lookup(body, "labels")); labels != nil && labels.Kind == yaml.MappingNode && lookup(labels, TemplateLabel) != nil {
		errs = append(errs, domain.FieldError{Path: "labels." + TemplateLabel, Line: t.lines["labels."+TemplateLabel],
			Message: "is set by the platform to the template's name@version on every job created from it; remove it"})
	}
	if len(errs) > 0 {
		return nil, sortErrors(errs)
	}
	return t, nil
}

// parseVars reads the vars block: a mapping of name to {default,
// description, allowed}, to a bare default value, or to nothing (required).
func (t *Template) parseVars(n *yaml.Node, errs *domain.FieldErrors) {
	n = resolve(n)
	if n == nil || isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		errs.Add(tmplVarsKey, "must be a mapping of variable names to {default, description}, got %s", describe(n))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
		if k == nil || k.Kind != yaml.ScalarNode {
			errs.Add(tmplVarsKey, "variable names must be text, got %s", describe(k))
			continue
		}
		name, path := k.Value, "vars."+k.Value
		t.lines[path] = k.Line
		fail := func(p, format string, args ...any) {
			*errs = append(*errs, domain.FieldError{Path: p, Line: k.Line, Message: fmt.Sprintf(format, args...)})
		}
		switch {
		case seen[name]:
			fail(path, "is declared twice; keep one")
			continue
		case !templateVarRE.MatchString(name) || len(name) > maxVarNameLen:
			fail(path, "%q is not a valid variable name: letters, digits and '_', not starting with a digit, at most %d characters, e.g. lr or profile", name, maxVarNameLen)
			continue
		case slices.Contains(topFields, name):
			fail(path, "%q is also a spec field, so --set %s=... would be ambiguous; name the variable differently, e.g. %s_name", name, name, name)
			continue
		case looksLikeCredential(name):
			fail(path, "looks like a credential; a variable's value is stored in the job's spec for everyone to read. Store it with: trainyard secret set %s (the value is read from stdin) and list the name under secrets:", strings.ToUpper(name))
			continue
		}
		seen[name] = true
		tv := TemplateVar{Name: name}
		switch {
		case v == nil || isNull(v):
			// required, no description
		case v.Kind == yaml.ScalarNode:
			tv.Default, tv.HasDefault = v.Value, true
		case v.Kind == yaml.MappingNode:
			for j := 0; j+1 < len(v.Content); j += 2 {
				fk, fv := resolve(v.Content[j]), resolve(v.Content[j+1])
				if fk == nil || fk.Kind != yaml.ScalarNode {
					fail(path, "field names must be text")
					continue
				}
				fpath := path + "." + fk.Value
				switch fk.Value {
				case "default":
					if fv == nil || fv.Kind != yaml.ScalarNode {
						fail(fpath, "must be one value (text, number or boolean), got %s", describe(fv))
					} else if !isNull(fv) {
						tv.Default, tv.HasDefault = fv.Value, true
					}
				case "description":
					if fv == nil || fv.Kind != yaml.ScalarNode {
						fail(fpath, "must be text, got %s", describe(fv))
					} else if !isNull(fv) {
						tv.Description = fv.Value
						if msg := domain.TextProblem(fv.Value, true); msg != "" {
							fail(fpath, "%s", msg)
						}
					}
				case "allowed":
					if fv == nil || fv.Kind != yaml.SequenceNode || len(fv.Content) == 0 {
						fail(fpath, "must be a list of the accepted values, e.g. [dev, test, prod]")
						continue
					}
					for _, item := range fv.Content {
						if item = resolve(item); item == nil || item.Kind != yaml.ScalarNode {
							fail(fpath, "must list single values, got %s", describe(item))
							continue
						}
						tv.Allowed = append(tv.Allowed, item.Value)
					}
				default:
					hint := ""
					if h := suggest(fk.Value, varFields); h != "" {
						hint = fmt.Sprintf("did you mean %q? ", h)
					}
					fail(fpath, "unknown field %q; %sa variable has %s", fk.Value, hint, strings.Join(varFields, ", "))
				}
			}
		default:
			fail(path, "must be a default value or a mapping {default, description, allowed}, got %s", describe(v))
		}
		if tv.HasDefault && len(tv.Allowed) > 0 && !slices.Contains(tv.Allowed, tv.Default) {
			fail(path+".default", "%q is not one of the allowed values %s", tv.Default, strings.Join(tv.Allowed, ", "))
		}
		t.Vars = append(t.Vars, tv)
	}
	if len(t.Vars) > maxTemplateVars {
		errs.Add(tmplVarsKey, "declares %d variables; the limit is %d", len(t.Vars), maxTemplateVars)
	}
}

// walk calls fn for every scalar of the tree under n, keys included, with
// its field path, and records each path's line. Aliases are not followed:
// the anchored node is visited where it is defined.
func (t *Template) walk(n *yaml.Node, path string, fn func(path string, n *yaml.Node, key bool)) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode {
				continue
			}
			fn(path, k, true)
			kp := join(path, k.Value)
			if _, ok := t.lines[kp]; !ok {
				t.lines[kp] = k.Line
			}
			t.walk(v, kp, fn)
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			ip := fmt.Sprintf("%s[%d]", path, i)
			t.lines[ip] = item.Line
			t.walk(item, ip, fn)
		}
	case yaml.ScalarNode:
		fn(path, n, false)
	}
}

// credentialWords are the name parts that mark a credential.
var credentialWords = []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "CREDENTIALS", "APIKEY", "PRIVATEKEY"}

// looksLikeCredential reports whether a variable, parameter or environment
// name looks like it holds a credential: one of its words (split at '_',
// '-', '.' and lower-to-upper case changes) is or ends with TOKEN, SECRET,
// PASSWORD, PASSWD, CREDENTIAL(S), or two neighbouring words are API KEY or
// PRIVATE KEY. Words are matched whole so that max_tokens and tokenizer
// pass while HF_TOKEN, hfToken and WANDB_API_KEY do not.
func looksLikeCredential(name string) bool {
	var words []string
	var cur []rune
	prevLower := false
	for _, r := range name {
		switch {
		case r == '_' || r == '-' || r == '.':
			words, cur, prevLower = append(words, string(cur)), nil, false
			continue
		case unicode.IsUpper(r) && prevLower:
			words, cur = append(words, string(cur)), nil
		}
		cur = append(cur, unicode.ToUpper(r))
		prevLower = unicode.IsLower(r) || unicode.IsDigit(r)
	}
	words = append(words, string(cur))
	for i, w := range words {
		for _, c := range credentialWords {
			if strings.HasSuffix(w, c) {
				return true
			}
		}
		if i+1 < len(words) && words[i+1] == "KEY" && (strings.HasSuffix(w, "API") || strings.HasSuffix(w, "PRIVATE")) {
			return true
		}
	}
	return false
}

// checkCredentials refuses env_vars and params entries whose names look
// like credentials: a template is read by everyone with a role.
func checkCredentials(body *yaml.Node, errs *domain.FieldErrors) {
	for _, section := range []string{"env_vars", "params"} {
		m := resolve(lookup(body, section))
		if m == nil || m.Kind != yaml.MappingNode {
			continue
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			k := resolve(m.Content[i])
			if k == nil || k.Kind != yaml.ScalarNode || !looksLikeCredential(k.Value) {
				continue
			}
			secret := strings.ToUpper(k.Value)
			*errs = append(*errs, domain.FieldError{Path: section + "." + k.Value, Line: k.Line, Message: fmt.Sprintf(
				"looks like a credential, and a template may not hold secrets: everyone with a role can read it. Store the value with: trainyard secret set %s --project P (it is read from stdin), remove %s from %s and list the name under secrets: [%s]; the job gets it as the environment variable %s",
				secret, k.Value, section, secret, secret)})
		}
	}
}

// TemplateExpansion is the input of Expand.
type TemplateExpansion struct {
	// Vars are the variables' values; the others take their defaults.
	Vars map[string]string
	// Sets are "key=value" spec overrides, applied after substitution as
	// with a spec file.
	Sets []string
	// Project is written as the spec's project when the template has none.
	Project string
}

// Values returns the value of every variable for vars (declared names
// only), with defaults filled in. Problems name the variable and the fix.
func (t *Template) Values(vars map[string]string) (map[string]string, error) {
	var errs domain.FieldErrors
	names := make([]string, len(t.Vars))
	for i, v := range t.Vars {
		names[i] = v.Name
	}
	for _, name := range slices.Sorted(maps.Keys(vars)) {
		if slices.Contains(names, name) {
			continue
		}
		switch h := suggest(name, names); {
		case len(names) == 0:
			errs.Add("vars."+name, "the template declares no variables; remove it")
		case h != "":
			errs.Add("vars."+name, "is not a variable of the template; did you mean %q? Its variables are %s", h, strings.Join(names, ", "))
		default:
			errs.Add("vars."+name, "is not a variable of the template; its variables are %s", strings.Join(names, ", "))
		}
	}
	out := make(map[string]string, len(t.Vars))
	for _, v := range t.Vars {
		val, ok := vars[v.Name]
		switch {
		case ok:
		case v.HasDefault:
			val = v.Default
		default:
			desc := ""
			if v.Description != "" {
				desc = " (" + v.Description + ")"
			}
			errs.Add("vars."+v.Name, "is required%s and has no default; set it, e.g. --set %s=VALUE", desc, v.Name)
			continue
		}
		if len(v.Allowed) > 0 && !slices.Contains(v.Allowed, val) {
			errs.Add("vars."+v.Name, "%s is not one of the allowed values %s", quoteShort(val), strings.Join(v.Allowed, ", "))
			continue
		}
		if strings.IndexByte(val, 0) >= 0 {
			errs.Add("vars."+v.Name, "contains a NUL character")
			continue
		}
		out[v.Name] = val
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}

// Expand substitutes the variables into the template and loads the result
// like a spec file (Load): overrides, defaults and every validation rule.
// Problems in the body are reported at the template's lines; a problem with
// a value that came from a variable says which.
func (t *Template) Expand(in TemplateExpansion) (domain.Spec, error) {
	values, err := t.Values(in.Vars)
	if err != nil {
		return domain.Spec{}, err
	}
	doc, err := t.render(values, in.Project)
	if err != nil {
		return domain.Spec{}, err
	}
	spec, err := Load(doc, in.Sets)
	if fe, ok := err.(domain.FieldErrors); ok {
		return domain.Spec{}, t.relocate(fe)
	}
	return spec, err
}

// render returns the body with values substituted, as a YAML document.
func (t *Template) render(values map[string]string, project string) ([]byte, error) {
	if size := renderedSize(t.body, values, map[*yaml.Node]bool{}); size > MaxExpandedBytes {
		return nil, domain.FieldErrors{{Path: tmplVarsKey, Message: fmt.Sprintf(
			"with these values the template's text comes to %d bytes, and a spec may hold at most %d (1 MiB); use shorter values (each ${name} is replaced by its whole value)",
			size, MaxExpandedBytes)}}
	}
	body := copyNode(t.body, map[*yaml.Node]*yaml.Node{})
	substitute(body, values, map[*yaml.Node]bool{})
	if project != "" && lookup(body, "project") == nil {
		body.Content = append([]*yaml.Node{
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: "project"},
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: project, Style: yaml.DoubleQuotedStyle},
		}, body.Content...)
	}
	doc, err := yaml.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("render template: %w", err)
	}
	return doc, nil
}

// renderedSize returns the text of the scalars under n once values are
// substituted, each node counted once (an alias stays an alias), without
// building it: a long value used in many places must be refused before it
// is copied into each. Load weighs the aliases.
func renderedSize(n *yaml.Node, values map[string]string, done map[*yaml.Node]bool) int64 {
	if n == nil || done[n] {
		return 0
	}
	done[n] = true
	var size int64
	for _, c := range n.Content {
		size = min(size+renderedSize(c, values, done), saturate)
	}
	if n.Kind != yaml.ScalarNode {
		return size
	}
	if !strings.Contains(n.Value, "${") {
		return int64(len(n.Value))
	}
	ps, msg := splitRefs(n.Value)
	if msg != "" {
		return int64(len(n.Value))
	}
	for _, p := range ps {
		if p.name != "" {
			size += int64(len(values[p.name]))
		} else {
			size += int64(len(p.text))
		}
	}
	return min(size, saturate)
}

// substitute replaces the references in every scalar value under n. A
// changed scalar becomes a double-quoted string whatever its text, so a
// value is only ever text in its place.
func substitute(n *yaml.Node, values map[string]string, done map[*yaml.Node]bool) {
	if n == nil || done[n] {
		return
	}
	done[n] = true
	switch n.Kind {
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			substitute(n.Content[i], values, done)
		}
	case yaml.SequenceNode, yaml.DocumentNode:
		for _, c := range n.Content {
			substitute(c, values, done)
		}
	case yaml.ScalarNode:
		if !strings.Contains(n.Value, "${") {
			return
		}
		ps, msg := splitRefs(n.Value)
		if msg != "" || !changed(n.Value, ps) {
			return // ParseTemplate refused it already
		}
		var b strings.Builder
		for _, p := range ps {
			if p.name != "" {
				b.WriteString(values[p.name])
			} else {
				b.WriteString(p.text)
			}
		}
		n.Value, n.Tag, n.Style = b.String(), "!!str", yaml.DoubleQuotedStyle
	}
}

// copyNode deep-copies a node tree, keeping aliases pointing at the copies
// of their anchors.
func copyNode(n *yaml.Node, seen map[*yaml.Node]*yaml.Node) *yaml.Node {
	if n == nil {
		return nil
	}
	if c, ok := seen[n]; ok {
		return c
	}
	c := *n
	seen[n] = &c
	if n.Content != nil {
		c.Content = make([]*yaml.Node, len(n.Content))
		for i, ch := range n.Content {
			c.Content[i] = copyNode(ch, seen)
		}
	}
	if n.Alias != nil {
		c.Alias = copyNode(n.Alias, seen)
	}
	return &c
}

// relocate moves the expanded document's problems to the template's lines
// and names the variables a bad value came from.
func (t *Template) relocate(fe domain.FieldErrors) domain.FieldErrors {
	out := make(domain.FieldErrors, len(fe))
	for i, e := range fe {
		switch {
		case e.Path == docPath:
			e.Line = 0
		case strings.HasPrefix(e.Path, "set["):
		default:
			e.Line = t.lineOf(e.Path)
			if names := t.uses[e.Path]; len(names) > 0 {
				refs := make([]string, len(names))
				for j, n := range names {
					refs[j] = "${" + n + "}"
				}
				e.Message += " (the value comes from " + strings.Join(refs, ", ") + ")"
			}
		}
		out[i] = e
	}
	return sortErrors(out)
}

// lineOf returns the template line of path or of its nearest ancestor.
func (t *Template) lineOf(path string) int {
	for path != "" {
		if l, ok := t.lines[path]; ok {
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

// Check reports the problems a template has whatever values its variables
// get: with every variable at its default, the expansion must be a valid
// spec. Problems at a value that uses a required variable (one without a
// default) are left for submit, as are rules spanning several fields when
// the template has required variables.
func (t *Template) Check(project string) error {
	values := map[string]string{}
	required := map[string]bool{}
	for _, v := range t.Vars {
		if v.HasDefault {
			values[v.Name] = v.Default
		} else {
			required[v.Name] = true
			values[v.Name] = "${" + v.Name + "}"
		}
	}
	doc, err := t.render(values, project)
	if err != nil {
		return err
	}
	if len(required) == 0 {
		if _, err := Load(doc, nil); err != nil {
			if fe, ok := err.(domain.FieldErrors); ok {
				return t.withDefaults(t.relocate(fe))
			}
			return err
		}
		return nil
	}
	_, err = Parse(doc)
	fe, ok := err.(domain.FieldErrors)
	if !ok {
		return err
	}
	var keep domain.FieldErrors
	for _, e := range t.relocate(fe) {
		if !slices.ContainsFunc(t.uses[e.Path], func(n string) bool { return required[n] }) {
			keep = append(keep, e)
		}
	}
	if len(keep) > 0 {
		return t.withDefaults(keep)
	}
	return nil
}

// withDefaults notes, on problems with values from variables, that the
// check used the defaults.
func (t *Template) withDefaults(fe domain.FieldErrors) domain.FieldErrors {
	for i := range fe {
		if len(t.uses[fe[i].Path]) > 0 {
			fe[i].Message += "; checked with the variables' defaults"
		}
	}
	return fe
}

// SplitTemplateSets separates "key=value" arguments given with a template:
// a key that is one of vars sets that variable, any other key is a spec
// override (params.lr=0.2). A plain key that is neither a variable nor a
// settable spec field is an error that names the template's variables.
func SplitTemplateSets(vars []string, sets []string) (values map[string]string, overrides []string, err error) {
	values = map[string]string{}
	for _, s := range sets {
		k, v, ok := strings.Cut(s, "=")
		k = strings.TrimSpace(k)
		switch {
		case ok && slices.Contains(vars, k):
			values[k] = v
		case ok && !strings.Contains(k, ".") && !slices.Contains(topFields, k):
			msg := fmt.Sprintf("--set %s: the template has no variable %q and it is not a spec field", s, k)
			if h := suggest(k, vars); h != "" {
				msg += fmt.Sprintf("; did you mean %q?", h)
			}
			if len(vars) > 0 {
				msg += "; its variables are " + strings.Join(vars, ", ")
			} else {
				msg += "; it declares no variables"
			}
			return nil, nil, domain.Errorf(domain.ErrInvalid, "%s", msg)
		default:
			overrides = append(overrides, s)
		}
	}
	return values, overrides, nil
}
