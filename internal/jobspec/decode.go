package jobspec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"trainyard/internal/domain"
	"trainyard/internal/yamlcheck"
)

// MaxDocumentBytes bounds the size of a spec document. Real specs are a few
// hundred bytes; the bound keeps a bad upload from costing much.
const MaxDocumentBytes = 1 << 20

// docPath is the field path used for problems with the document as a whole.
const docPath = "document"

// The fields of each mapping in a spec document, in documentation order.
var (
	topFields        = []string{"name", "project", "pool", "env", "entrypoint", "shell", "workdir", "resources", "inputs", "outputs", "params", "env_vars", "secrets", "policy", "checkpoint", "health", "labels", "after", "sweep", "notify", "resume"}
	resourcesFields  = []string{"gpus", "cpus", "memory", "nodes"}
	inputFields      = []string{"name", "path", "version", "from_job"}
	outputsFields    = []string{"path"}
	policyFields     = []string{"timeout", "retries", "reentrant", "priority", "preemptible", "log_limit", "grace", "warn", "stop_signal_to"}
	warnFields       = []string{"signal", "before"}
	checkpointFields = []string{"keep"}
	healthFields     = []string{"first_progress", "stall"}
)

// sections maps each top-level mapping with fixed fields to those fields.
var sections = map[string][]string{
	"resources":  resourcesFields,
	"outputs":    outputsFields,
	"policy":     policyFields,
	"checkpoint": checkpointFields,
	"health":     healthFields,
	"notify":     notifyFields,
}

// sectionOrder lists sections in documentation order, for deterministic
// suggestions.
var sectionOrder = []string{"resources", "outputs", "policy", "checkpoint", "health", "notify"}

// nestedFields lists "section.field" for every field of every section.
var nestedFields = func() []string {
	var out []string
	for _, s := range sectionOrder {
		for _, f := range sections[s] {
			out = append(out, s+"."+f)
		}
	}
	return out
}()

// result is what decoding learned besides the spec itself.
type result struct {
	errs  domain.FieldErrors
	fatal bool            // the document could not be walked at all
	lines map[string]int  // field path -> 1-based source line; 0 when set by --set
	bad   map[string]bool // field paths that already have a decode error
}

// lineOf returns the source line of path or, failing that, of its nearest
// recorded ancestor. It returns 0 when unknown or when the value came from
// an override.
func (r *result) lineOf(path string) int {
	for path != "" {
		if l, ok := r.lines[path]; ok {
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

// covered reports whether path or an ancestor of it already has a decode
// error, so that validation does not report the same field twice.
func (r *result) covered(path string) bool {
	for p := range r.bad {
		if path == p || strings.HasPrefix(path, p+".") || strings.HasPrefix(path, p+"[") || strings.HasPrefix(p, path+"[") {
			return true
		}
	}
	return false
}

// decoder walks a yaml.Node tree into a domain.Spec, collecting every
// problem instead of stopping at the first.
type decoder struct {
	res    *result
	origin map[*yaml.Node]int // nodes created by override i
}

// decode parses doc, applies the overrides in sets and decodes the result
// over base. Fields absent from the document keep their value from base.
func decode(doc []byte, sets []string, base domain.Spec) (spec domain.Spec, res *result) {
	res = &result{lines: map[string]int{}, bad: map[string]bool{}}
	d := &decoder{res: res, origin: map[*yaml.Node]int{}}
	defer func() {
		// The YAML library is not ours; a panic inside it must still come
		// back as an error the user can act on.
		if r := recover(); r != nil {
			spec = domain.Spec{}
			res.fatal = true
			res.errs = append(res.errs, domain.FieldError{Path: docPath, Message: "could not be read; check that it is well-formed YAML or JSON"})
		}
	}()

	root, docErrs := parseDocument(doc)
	res.errs = append(res.errs, docErrs...)
	if root == nil {
		res.fatal = true
	}
	overrides := parseSets(sets)
	for _, o := range overrides {
		if o.err != nil {
			res.errs = append(res.errs, *o.err)
		}
	}
	if res.fatal {
		return domain.Spec{}, res
	}
	for _, o := range overrides {
		if o.err == nil {
			if err := d.apply(root, o); err != nil {
				res.errs = append(res.errs, *err)
			}
		}
	}
	spec = base
	d.spec(root, &spec)
	return spec, res
}

// parseDocument parses doc into the root mapping node. It returns nil and
// the reasons when the document is empty, not YAML, holds several documents
// or is not a mapping.
func parseDocument(doc []byte) (*yaml.Node, domain.FieldErrors) {
	var errs domain.FieldErrors
	if len(doc) > MaxDocumentBytes {
		errs = append(errs, domain.FieldError{Path: docPath, Message: fmt.Sprintf("is %d bytes; a spec may be at most %d bytes", len(doc), MaxDocumentBytes)})
		return nil, errs
	}
	if e := checkBound(doc); e != nil { // limits.go
		return nil, append(errs, *e)
	}
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	var first yaml.Node
	if err := dec.Decode(&first); err != nil {
		if errors.Is(err, io.EOF) {
			errs = append(errs, emptyDocError())
		} else {
			errs = append(errs, yamlError(err, doc))
		}
		return nil, errs
	}
	if len(first.Content) == 0 || isEmpty(first.Content[0]) {
		errs = append(errs, emptyDocError())
		return nil, errs
	}
	if e := measure(&first); e != nil { // limits.go
		return nil, append(errs, *e)
	}
	root := resolve(first.Content[0])
	// A trailing "---" yields an empty document; anything more is a second spec.
	for {
		var next yaml.Node
		err := dec.Decode(&next)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			errs = append(errs, yamlError(err, doc))
			return nil, errs
		}
		if len(next.Content) == 0 || isEmpty(next.Content[0]) {
			continue
		}
		errs = append(errs, domain.FieldError{Path: docPath, Line: next.Line,
			Message: `holds a second YAML document (after "---"); put one job spec per file`})
		return nil, errs
	}
	if root.Kind != yaml.MappingNode {
		errs = append(errs, domain.FieldError{Path: docPath, Line: root.Line,
			Message: "must be a mapping of fields (name: ..., entrypoint: ...), got " + describe(root)})
		return nil, errs
	}
	return root, errs
}

func emptyDocError() domain.FieldError {
	return domain.FieldError{Path: docPath, Message: "is empty; a job spec needs at least name and entrypoint"}
}

// yamlError turns a parser error into a field error with the 1-based line
// it names, kept within the document.
func yamlError(err error, doc []byte) domain.FieldError {
	line, msg := yamlcheck.SyntaxError(err, doc)
	return domain.FieldError{Path: docPath, Line: line, Message: "is not valid YAML or JSON: " + msg}
}

// isEmpty reports whether n is an empty document body (nothing, or a bare "~").
func isEmpty(n *yaml.Node) bool {
	n = resolve(n)
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" && n.Value == "")
}

// resolve follows aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 16; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == yaml.AliasNode || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// describe names what n is, for "got ..." in messages.
func describe(n *yaml.Node) string { return yamlcheck.Describe(resolve(n)) }

func join(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

// fail records a problem with the value n at path. Values that came from an
// override are reported against that override ("set[2]").
func (d *decoder) fail(path string, n *yaml.Node, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	d.res.bad[path] = true
	if i, ok := d.origin[n]; ok {
		d.res.errs = append(d.res.errs, domain.FieldError{Path: fmt.Sprintf("set[%d]", i), Message: path + ": " + msg})
		return
	}
	line := 0
	if n != nil {
		line = n.Line
	}
	d.res.errs = append(d.res.errs, domain.FieldError{Path: path, Message: msg, Line: line})
}

// seen records where the field at path was written.
func (d *decoder) seen(path string, key, val *yaml.Node) {
	_, k := d.origin[key]
	_, v := d.origin[val]
	if k || v {
		d.res.lines[path] = 0
		return
	}
	d.res.lines[path] = key.Line
}

// entries walks the key/value pairs of mapping n at path. It reports
// non-mapping values, non-scalar keys, merge keys and duplicate keys, and
// calls fn for every other pair with a non-null value.
func (d *decoder) entries(path string, n *yaml.Node, fn func(key, kpath string, k, v *yaml.Node)) {
	n = resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		d.fail(path, n, "must be a mapping (key: value), got %s", describe(n))
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k == nil || k.Kind != yaml.ScalarNode {
			d.fail(path, n.Content[i], "keys must be plain names, got %s", describe(k))
			continue
		}
		key := k.Value
		kpath := join(path, key)
		if k.ShortTag() == "!!merge" {
			d.fail(kpath, k, `merge keys ("<<") are not supported; write the fields out`)
			continue
		}
		if first, dup := seen[key]; dup {
			d.fail(kpath, k, "is given twice (first on line %d); keep one", first)
			continue
		}
		seen[key] = k.Line
		d.seen(kpath, k, v)
		fn(key, kpath, k, v)
	}
}

// fields is entries for a mapping with a fixed set of fields: unknown keys
// are reported with a suggestion and null values are skipped (the field
// keeps its current value).
func (d *decoder) fields(path string, n *yaml.Node, known []string, fn func(key, kpath string, v *yaml.Node)) {
	d.entries(path, n, func(key, kpath string, k, v *yaml.Node) {
		if !contains(known, key) {
			d.unknown(path, kpath, key, k, known)
			return
		}
		if isNull(resolve(v)) {
			return
		}
		fn(key, kpath, resolve(v))
	})
}

func (d *decoder) unknown(parent, kpath, key string, k *yaml.Node, known []string) {
	hint := suggest(key, known)
	if hint == "" && parent == "" {
		// A section field written at the top level: "gpus: 1".
		leaves := make([]string, len(nestedFields))
		for i, f := range nestedFields {
			leaves[i] = f[strings.IndexByte(f, '.')+1:]
		}
		if h := suggest(key, leaves); h != "" {
			hint = nestedFields[indexOf(leaves, h)]
		}
	}
	if hint != "" {
		d.fail(kpath, k, "unknown field %q; did you mean %q?", key, hint)
		return
	}
	where := "here"
	if parent != "" {
		where = "in " + parent
	}
	d.fail(kpath, k, "unknown field %q; the fields %s are: %s", key, where, strings.Join(known, ", "))
}

func contains(list []string, s string) bool { return indexOf(list, s) >= 0 }

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// spec decodes the root mapping into s.
func (d *decoder) spec(root *yaml.Node, s *domain.Spec) {
	var shell *yaml.Node
	shellValue := false
	entrypointIsString := false
	d.fields("", root, topFields, func(key, p string, v *yaml.Node) {
		switch key {
		case "name":
			d.str(p, v, &s.Name)
		case "project":
			d.str(p, v, &s.Project)
		case "pool":
			d.str(p, v, &s.Pool)
		case "env":
			d.str(p, v, &s.Env)
		case "workdir":
			d.str(p, v, &s.Workdir)
		case "entrypoint":
			entrypointIsString = d.entrypoint(p, v, s)
		case "shell":
			if d.boolean(p, v, &shellValue) {
				shell = v
			}
		case "resources":
			d.resources(p, v, &s.Resources)
		case "inputs":
			d.inputs(p, v, s)
		case "outputs":
			d.fields(p, v, outputsFields, func(_, p string, v *yaml.Node) { d.str(p, v, &s.Outputs.Path) })
		case "params":
			s.Params = d.stringMap(p, v, "a string, number or boolean")
		case "env_vars":
			s.EnvVars = d.stringMap(p, v, "a string")
		case "labels":
			s.Labels = d.stringMap(p, v, "a string")
		case "secrets":
			s.Secrets = d.strings(p, v, "a list of secret names, e.g. [WANDB_API_KEY]")
		case "policy":
			d.policy(p, v, &s.Policy)
		case "checkpoint":
			d.fields(p, v, checkpointFields, func(_, p string, v *yaml.Node) { d.integer(p, v, &s.Checkpoint.Keep) })
		case "after":
			d.after(p, v, s)
		case "sweep":
			d.sweep(p, v, s)
		case "resume":
			d.resume(p, v, s) // resume.go
		case "health":
			d.fields(p, v, healthFields, func(key, p string, v *yaml.Node) {
				switch key {
				case "first_progress":
					d.duration(p, v, &s.Health.FirstProgress)
				case "stall":
					d.duration(p, v, &s.Health.Stall)
				}
			})
		case "notify":
			d.notify(p, v, s) // notify.go
		}
	})
	switch {
	case shell == nil:
		if s.Entrypoint != nil {
			s.Shell = entrypointIsString
		}
	case entrypointIsString && !shellValue:
		d.fail("shell", shell, "is false but entrypoint is a string, which always runs under /bin/sh -c; write entrypoint as a list or remove shell")
	default:
		s.Shell = shellValue || entrypointIsString
	}
}

// entrypoint decodes a list of arguments or a shell string; it reports
// whether the value was a string.
func (d *decoder) entrypoint(p string, v *yaml.Node, s *domain.Spec) bool {
	if v.Kind == yaml.ScalarNode {
		var cmd string
		if d.str(p, v, &cmd) {
			s.Entrypoint = []string{"/bin/sh", "-c", cmd}
			return true
		}
		return false
	}
	s.Entrypoint = d.strings(p, v, "a list of arguments such as [python3, train.py] or a shell command string")
	if s.Entrypoint == nil {
		s.Entrypoint = []string{}
	}
	return false
}

func (d *decoder) resources(p string, v *yaml.Node, r *domain.Resources) {
	d.fields(p, v, resourcesFields, func(key, p string, v *yaml.Node) {
		switch key {
		case "gpus":
			d.integer(p, v, &r.GPUs)
		case "cpus":
			d.number(p, v, &r.CPUs)
		case "memory":
			d.size(p, v, &r.Memory)
		case "nodes":
			d.integer(p, v, &r.Nodes)
		}
	})
}

func (d *decoder) policy(p string, v *yaml.Node, pol *domain.Policy) {
	d.fields(p, v, policyFields, func(key, p string, v *yaml.Node) {
		switch key {
		case "timeout":
			d.duration(p, v, &pol.Timeout)
		case "retries":
			d.integer(p, v, &pol.Retries)
		case "reentrant":
			d.boolean(p, v, &pol.Reentrant)
		case "priority":
			var s string
			if d.str(p, v, &s) {
				pol.Priority = domain.Priority(s)
			}
		case "preemptible":
			d.boolean(p, v, &pol.Preemptible)
		case "log_limit":
			d.size(p, v, &pol.LogLimit)
		case "grace":
			d.duration(p, v, &pol.Grace)
		case "warn":
			if v.Kind != yaml.MappingNode {
				d.fail(p, v, "must be a mapping such as {signal: USR1, before: 5m}, got %s", describe(v))
				return
			}
			w := &domain.Warn{}
			d.fields(p, v, warnFields, func(key, p string, v *yaml.Node) {
				switch key {
				case "signal":
					d.str(p, v, &w.Signal)
				case "before":
					d.duration(p, v, &w.Before)
				}
			})
			pol.Warn = w
		case "stop_signal_to":
			var s string
			if d.str(p, v, &s) {
				pol.StopSignalTo = domain.StopTarget(s)
			}
		}
	})
}

func (d *decoder) inputs(p string, v *yaml.Node, s *domain.Spec) {
	if ins, ok := mappingList(d, p, v, "{name, path, version}", inputFields, func(in *domain.Input, key, p string, v *yaml.Node) {
		switch key {
		case "name":
			d.str(p, v, &in.Name)
		case "path":
			d.str(p, v, &in.Path)
		case "version":
			d.str(p, v, &in.Version)
		case "from_job":
			d.id(p, v, &in.FromJob)
		}
	}); ok {
		s.Inputs = ins
	}
}

// mappingList decodes a list of mappings with the fields known, each
// into a T by field; shape shows an item in the errors. ok is false after
// reporting a value that is not a list.
func mappingList[T any](d *decoder, p string, v *yaml.Node, shape string, known []string, field func(t *T, key, p string, v *yaml.Node)) (out []T, ok bool) {
	if v.Kind != yaml.SequenceNode {
		d.fail(p, v, "must be a list of %s, got %s", shape, describe(v))
		return nil, false
	}
	out = make([]T, 0, len(v.Content))
	for i, item := range v.Content {
		ip := fmt.Sprintf("%s[%d]", p, i)
		d.res.lines[ip] = item.Line
		item = resolve(item)
		if isNull(item) {
			d.fail(ip, item, "is empty; give %s", shape)
			continue
		}
		var t T
		d.fields(ip, item, known, func(key, p string, v *yaml.Node) { field(&t, key, p, v) })
		out = append(out, t)
	}
	return out, true
}

// strings decodes a list of scalars. It returns nil after reporting a value
// that is not a list.
func (d *decoder) strings(p string, v *yaml.Node, want string) []string {
	if v.Kind != yaml.SequenceNode {
		d.fail(p, v, "must be %s, got %s", want, describe(v))
		return nil
	}
	out := make([]string, 0, len(v.Content))
	for i, item := range v.Content {
		ip := fmt.Sprintf("%s[%d]", p, i)
		d.res.lines[ip] = item.Line
		var s string
		if d.str(ip, resolve(item), &s) {
			out = append(out, s)
		}
	}
	return out
}

// stringMap decodes a mapping of names to scalar values, kept as text.
func (d *decoder) stringMap(p string, v *yaml.Node, want string) map[string]string {
	out := map[string]string{}
	d.entries(p, v, func(key, kp string, _, v *yaml.Node) {
		v = resolve(v)
		if v == nil || v.Kind != yaml.ScalarNode || isNull(v) {
			d.fail(kp, v, "must be %s, got %s", want, describe(v))
			return
		}
		if !utf8.ValidString(v.Value) || !utf8.ValidString(key) {
			d.fail(kp, v, "is not valid UTF-8 text")
			return
		}
		out[key] = v.Value
	})
	return out
}

// str decodes any scalar as its text: "3" and "true" are strings too, so
// that `version: 2` works. Lists, mappings and null are reported.
func (d *decoder) str(p string, v *yaml.Node, dst *string) bool {
	if v == nil || v.Kind != yaml.ScalarNode || isNull(v) {
		d.fail(p, v, "must be a string, got %s", describe(v))
		return false
	}
	if !utf8.ValidString(v.Value) {
		d.fail(p, v, "is not valid UTF-8 text")
		return false
	}
	*dst = v.Value
	return true
}

// integer decodes a whole number. Integral floats (2.0) and quoted
// decimal integers ("2") are accepted, as JSON clients send both.
func (d *decoder) integer(p string, v *yaml.Node, dst *int) bool {
	if v.Kind == yaml.ScalarNode {
		switch v.ShortTag() {
		case "!!int":
			var n int64
			if v.Decode(&n) == nil && n >= math.MinInt && n <= math.MaxInt {
				*dst = int(n)
				return true
			}
		case "!!float":
			var f float64
			if v.Decode(&f) == nil && f == math.Trunc(f) && math.Abs(f) <= 1<<53 {
				*dst = int(f)
				return true
			}
		case "!!str":
			if n, err := strconv.Atoi(strings.TrimSpace(v.Value)); err == nil {
				*dst = n
				return true
			}
		}
	}
	d.fail(p, v, "must be a whole number, got %s", describe(v))
	return false
}

// number decodes a finite number; fractions are allowed.
func (d *decoder) number(p string, v *yaml.Node, dst *float64) bool {
	if v.Kind == yaml.ScalarNode {
		var f float64
		ok := false
		switch v.ShortTag() {
		case "!!int", "!!float":
			ok = v.Decode(&f) == nil
		case "!!str":
			t := strings.TrimSpace(v.Value)
			var err error
			f, err = strconv.ParseFloat(t, 64)
			ok = err == nil && !strings.ContainsAny(t, "xXpP_")
		}
		if ok && !math.IsNaN(f) && !math.IsInf(f, 0) {
			*dst = f
			return true
		}
		if ok {
			d.fail(p, v, "must be a finite number, got %s", describe(v))
			return false
		}
	}
	d.fail(p, v, "must be a number such as 0.5 or 8, got %s", describe(v))
	return false
}

func (d *decoder) boolean(p string, v *yaml.Node, dst *bool) bool {
	if v.Kind == yaml.ScalarNode {
		switch v.ShortTag() {
		case "!!bool":
			if v.Decode(dst) == nil {
				return true
			}
		case "!!str":
			if b, err := strconv.ParseBool(v.Value); err == nil && (v.Value == "true" || v.Value == "false") {
				*dst = b
				return true
			}
		}
	}
	d.fail(p, v, "must be true or false, got %s", describe(v))
	return false
}

// size decodes a byte size: "32GiB", "512MiB", or a plain number of bytes.
func (d *decoder) size(p string, v *yaml.Node, dst *domain.ByteSize) bool {
	if v.Kind != yaml.ScalarNode || v.ShortTag() == "!!bool" {
		d.fail(p, v, "must be a size such as 512MiB or 32GiB, got %s", describe(v))
		return false
	}
	low := strings.ToLower(v.Value)
	if strings.Contains(low, "nan") || strings.Contains(low, "inf") {
		d.fail(p, v, "%q is not a size; use a number with a unit such as 512MiB, 32GiB or 1TiB", v.Value)
		return false
	}
	b, err := domain.ParseByteSize(v.Value)
	if err != nil {
		d.fail(p, v, "%s", err.Error())
		return false
	}
	*dst = b
	return true
}

// maxDays bounds the day unit so that days*24h cannot overflow.
const maxDays = int64(math.MaxInt64 / int64(24*time.Hour))

// duration decodes "90s", "30m", "24h", "2d" or "1d12h".
func (d *decoder) duration(p string, v *yaml.Node, dst *domain.Duration) bool {
	if v.Kind != yaml.ScalarNode || v.ShortTag() == "!!bool" {
		d.fail(p, v, "must be a duration such as 90s, 30m, 24h or 2d, got %s", describe(v))
		return false
	}
	dur, err := parseDuration(v.Value)
	if err != nil {
		d.fail(p, v, "%s", err.Error())
		return false
	}
	*dst = domain.Duration(dur)
	return true
}

// parseDuration is domain.ParseDuration with an overflow check on the day
// unit, which domain.ParseDuration does not guard.
func parseDuration(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if i := strings.Index(t, "d"); i > 0 {
		days, err := strconv.ParseInt(t[:i], 10, 64)
		if err == nil {
			var rest time.Duration
			if t[i+1:] != "" {
				rest, err = time.ParseDuration(t[i+1:])
			}
			if err == nil {
				if days > maxDays || days < -maxDays {
					return 0, fmt.Errorf("%q is too long; durations are limited to about 290 years", s)
				}
				dd := time.Duration(days) * 24 * time.Hour
				if (rest > 0 && dd > math.MaxInt64-rest) || (rest < 0 && dd < math.MinInt64-rest) {
					return 0, fmt.Errorf("%q is too long; durations are limited to about 290 years", s)
				}
			}
		}
	}
	return domain.ParseDuration(s)
}
