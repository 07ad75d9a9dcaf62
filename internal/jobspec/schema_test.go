package jobspec

import (
	"encoding/json"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"trainyard/internal/domain"
)

// jsonFields lists the json names of the fields of struct type t.
func jsonFields(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

func TestSchemaDescribesEveryField(t *testing.T) {
	raw := Schema()
	var s map[string]any
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("Schema is not valid JSON: %v", err)
	}
	if !strings.Contains(string(raw), "\n  \"") {
		t.Error("Schema is not indented")
	}
	if s["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("$schema = %v", s["$schema"])
	}
	props := s["properties"].(map[string]any)
	for _, name := range jsonFields(reflect.TypeFor[domain.Spec]()) {
		if _, ok := props[name]; !ok {
			t.Errorf("schema lacks top-level field %q", name)
		}
	}
	nested := map[string]reflect.Type{
		"resources":  reflect.TypeFor[domain.Resources](),
		"outputs":    reflect.TypeFor[domain.Outputs](),
		"policy":     reflect.TypeFor[domain.Policy](),
		"checkpoint": reflect.TypeFor[domain.Checkpoint](),
		"health":     reflect.TypeFor[domain.Health](),
		"notify":     reflect.TypeFor[domain.Notify](),
	}
	for sec, typ := range nested {
		sp := props[sec].(map[string]any)["properties"].(map[string]any)
		for _, name := range jsonFields(typ) {
			if _, ok := sp[name]; !ok {
				t.Errorf("schema lacks %s.%s", sec, name)
			}
		}
	}
	ip := props["inputs"].(map[string]any)["items"].(map[string]any)["properties"].(map[string]any)
	for _, name := range jsonFields(reflect.TypeFor[domain.Input]()) {
		if _, ok := ip[name]; !ok {
			t.Errorf("schema lacks inputs[].%s", name)
		}
	}
	// The decoder's field tables and the schema must agree, both ways.
	for sec, fields := range sections {
		if got := jsonFields(nested[sec]); !slices.Equal(got, fields) {
			t.Errorf("decoder fields of %s = %v; domain has %v", sec, fields, got)
		}
	}
	if got := jsonFields(reflect.TypeFor[domain.Spec]()); !slices.Equal(got, topFields) {
		t.Errorf("decoder top fields = %v; domain has %v", topFields, got)
	}
	prio := props["policy"].(map[string]any)["properties"].(map[string]any)["priority"].(map[string]any)["enum"]
	if len(prio.([]any)) != len(domain.Priorities()) {
		t.Errorf("priority enum = %v", prio)
	}
}

func TestSchemaPatternsCompileAndMatchTheParser(t *testing.T) {
	// Every pattern in the schema must be a valid regular expression.
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if p, ok := v["pattern"].(string); ok {
				if _, err := regexp.Compile(p); err != nil {
					t.Errorf("pattern %q: %v", p, err)
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	var s any
	if err := json.Unmarshal(Schema(), &s); err != nil {
		t.Fatal(err)
	}
	walk(s)

	dur := regexp.MustCompile(DurationPattern)
	for _, v := range []string{"90s", "30m", "24h", "2d", "1d12h", "1h30m", "1.5s", "0", "500ms", "-5m", " 3h "} {
		if _, err := parseDuration(v); err != nil {
			t.Errorf("parser rejects %q: %v", v, err)
		}
		if !dur.MatchString(v) {
			t.Errorf("DurationPattern rejects %q, which the parser accepts", v)
		}
	}
	for _, v := range []string{"forever", "", "5", "1.5d", "d", "1h2d"} {
		if _, err := parseDuration(v); err == nil {
			t.Errorf("parser accepts %q", v)
		}
		if dur.MatchString(v) {
			t.Errorf("DurationPattern accepts %q, which the parser rejects", v)
		}
	}
	size := regexp.MustCompile(SizePattern)
	for _, v := range []string{"32GiB", "512MiB", "1.5Gi", "500M", "1024", "1024B", "1TiB", "0.5 GiB"} {
		if _, err := domain.ParseByteSize(v); err != nil {
			t.Errorf("parser rejects %q: %v", v, err)
		}
		if !size.MatchString(v) {
			t.Errorf("SizePattern rejects %q, which the parser accepts", v)
		}
	}
	for _, v := range []string{"lots", "", "1e9", "GiB", "-1GiB", "1XB"} {
		if _, err := domain.ParseByteSize(v); err == nil {
			t.Errorf("parser accepts %q", v)
		}
		if size.MatchString(v) {
			t.Errorf("SizePattern accepts %q, which the parser rejects", v)
		}
	}
	env := regexp.MustCompile(EnvPattern)
	for v, ok := range map[string]bool{"host": true, "pytorch-2.4@3": true, "pytorch": false, "pytorch@": false, "Py@1": false} {
		if env.MatchString(v) != ok {
			t.Errorf("EnvPattern.Match(%q) = %v", v, !ok)
		}
	}
}
