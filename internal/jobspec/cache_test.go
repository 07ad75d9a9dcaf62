package jobspec

import (
	"os"
	"reflect"
	"testing"

	"trainyard/internal/domain"
)

// A document loaded again comes from the cache: the same spec, and one a
// caller may change without changing what the next Load returns.
func TestLoadCachedIsACopy(t *testing.T) {
	doc, err := os.ReadFile("testdata/valid/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sets := []string{"policy.warn.signal=USR1", "policy.warn.before=5m"}
	want, err := load(doc, sets)
	if err != nil {
		t.Fatal(err)
	}
	first := mustLoadBytes(t, doc, sets)
	if !reflect.DeepEqual(first, want) {
		t.Fatalf("first Load = %+v, want %+v", first, want)
	}
	// Change everything a caller could share with the cache.
	first.Entrypoint[0] = "changed"
	first.Inputs[0].Name = "changed"
	first.Params["lr"] = "changed"
	first.EnvVars["NCCL_DEBUG"] = "changed"
	first.Secrets[0] = "changed"
	first.Labels["team"] = "changed"
	first.Policy.Warn.Signal = "changed"
	second := mustLoadBytes(t, doc, sets)
	if !reflect.DeepEqual(second, want) {
		t.Fatalf("Load after a caller changed its copy = %+v, want %+v", second, want)
	}
	// Other overrides are another key.
	other := mustLoadBytes(t, doc, []string{"policy.warn.signal=USR2", "policy.warn.before=5m"})
	if other.Policy.Warn.Signal != "USR2" {
		t.Fatalf("Load with other overrides: warn signal %q, want USR2", other.Policy.Warn.Signal)
	}
}

// A document with problems reports them every time.
func TestLoadCacheKeepsNoProblems(t *testing.T) {
	doc := []byte("name: Bad_Name\nentrypoint: [x]\n")
	for range 2 {
		if _, err := Load(doc, nil); err == nil {
			t.Fatal("Load of an invalid spec succeeded")
		}
	}
}

// Keys frame the document and each override, so moving text between them
// gives another key.
func TestLoadCacheKeyFrames(t *testing.T) {
	a := loadCacheKey([]byte("ab"), []string{"c"})
	b := loadCacheKey([]byte("a"), []string{"bc"})
	c := loadCacheKey([]byte("abc"), nil)
	d := loadCacheKey([]byte("ab"), []string{"", "c"})
	if a == b || a == c || b == c || a == d {
		t.Fatal("distinct Load calls share a cache key")
	}
}

// cloneSpec must copy every field that refers to memory: this fails when
// domain.Spec gains one that cloneSpec does not know.
func TestCloneSpecCoversReferenceFields(t *testing.T) {
	known := map[string]bool{"Entrypoint": true, "Inputs": true, "Params": true, "EnvVars": true,
		"Secrets": true, "Labels": true, "Policy.Warn": true, "After": true, "Sweep": true, "Notify": true, "Resume": true}
	var walk func(prefix string, t reflect.Type, found map[string]bool)
	walk = func(prefix string, typ reflect.Type, found map[string]bool) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			name := prefix + f.Name
			switch f.Type.Kind() {
			case reflect.Struct:
				walk(name+".", f.Type, found)
			case reflect.Slice, reflect.Map, reflect.Pointer, reflect.Interface, reflect.Array, reflect.Chan, reflect.Func:
				found[name] = true
			}
		}
	}
	found := map[string]bool{}
	walk("", reflect.TypeFor[domain.Spec](), found)
	if !reflect.DeepEqual(found, known) {
		t.Fatalf("reference fields of domain.Spec = %v; cloneSpec copies %v: update cloneSpec and this list", found, known)
	}
}

func mustLoadBytes(t *testing.T, doc []byte, sets []string) domain.Spec {
	t.Helper()
	s, err := Load(doc, sets)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return s
}
