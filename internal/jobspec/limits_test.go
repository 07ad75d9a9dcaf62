package jobspec

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"trainyard/internal/domain"
)

// aliasList is "[*name, *name, …]" with n aliases.
func aliasList(name string, n int) string {
	return "[" + strings.TrimSuffix(strings.Repeat("*"+name+", ", n), ", ") + "]"
}

// billionLaughs nests ten aliases of the level below, nine levels deep:
// 90 aliases standing for 10^10 strings.
func billionLaughs() string {
	var b strings.Builder
	b.WriteString("name: laughs\nlabels:\n  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "  l%d: &l%d %s\n", i, i, aliasList(fmt.Sprintf("l%d", i-1), 10))
	}
	b.WriteString("entrypoint: *l9\n")
	return b.String()
}

// The documents each limit is for, with the words the refusal must have.
var bombs = map[string]struct {
	doc  string
	want []string
}{
	// 78 KB: one 30 KB argument repeated by 12,000 aliases (360 MB).
	"repeated argument": {"name: rep\nentrypoint: [&a " + strings.Repeat("x", 30_000) + ", " + strings.TrimPrefix(aliasList("a", 12_000), "[") + "\n",
		[]string{"more than 100 aliases", "at most 100"}},
	"billion laughs": {billionLaughs(), []string{"nodes", "at most 100000"}},
	"alias count": {"name: many\nentrypoint: [&a python3, " + strings.TrimPrefix(aliasList("a", 101), "[") + "\n",
		[]string{"more than 100 aliases", "at most 100"}},
	"expanded size": {"name: big\nentrypoint: [&a " + strings.Repeat("x", 200<<10) + ", " + strings.TrimPrefix(aliasList("a", 5), "[") + "\n",
		[]string{"expands to 1228817 bytes", "at most 1048576 (1 MiB)"}},
	"node bomb": {"name: flat\nentrypoint: [" + strings.Repeat("0,", 60_000) + "0]\n",
		[]string{"its 60003 marks", "allow up to 120008 nodes", "at most 100000"}},
	"node bomb in JSON": {`{"name": "flat", "entrypoint": [` + strings.Repeat(`"a",`, 60_000) + `"a"]}`,
		[]string{"at most 100000"}},
	"node bomb through aliases": {"name: wide\nlabels: {l: &l [" + strings.Repeat("~, ", 2000) + "~]}\nentrypoint: " + aliasList("l", 60) + "\n",
		[]string{"has 122131 nodes", "at most 100000"}},
	"endless alias": {"name: loop\nentrypoint: &e [a, *e]\n", []string{"alias *e inside the value it names"}},
}

// Documents that stand for more than a spec may hold are refused as a
// whole, naming the limit, and decoding never starts.
func TestLoadRefusesDocumentsOverTheLimits(t *testing.T) {
	for name, tc := range bombs {
		t.Run(name, func(t *testing.T) {
			fes := loadErrors(t, tc.doc)
			if len(fes) != 1 || fes[0].Path != docPath {
				t.Fatalf("errors = %v; want one about the document", fes)
			}
			for _, w := range tc.want {
				if !strings.Contains(fes[0].Message, w) {
					t.Errorf("message %q lacks %q", fes[0].Message, w)
				}
			}
		})
	}
}

// The limits are inclusive: a spec at each of them loads.
func TestLoadAcceptsDocumentsAtTheLimits(t *testing.T) {
	doc := "name: many\nentrypoint: [&a python3, " + strings.TrimPrefix(aliasList("a", MaxAliases), "[") + "\n"
	if s := mustLoad(t, doc); len(s.Entrypoint) != MaxAliases+1 {
		t.Errorf("entrypoint has %d arguments, want %d", len(s.Entrypoint), MaxAliases+1)
	}
	// Text: 8 bytes of keys and "job", the rest in one argument and its
	// alias.
	arg := strings.Repeat("x", (MaxExpandedBytes-len("name")-len("job")-len("entrypoint"))/2)
	doc = "name: job\nentrypoint: [&a " + arg + ", *a]\n"
	if _, err := Load([]byte(doc), nil); err != nil && strings.Contains(err.Error(), "bytes of text") {
		t.Errorf("a spec of exactly %d bytes of text was refused: %v", MaxExpandedBytes, err)
	}
	if _, err := Load([]byte(doc[:len(doc)-len(", *a]\n")]+"x, *a]\n"), nil); err == nil || !strings.Contains(err.Error(), "bytes of text") {
		t.Errorf("one byte more was not refused: %v", err)
	}
}

// The weighing visits each node of the text once: an anchor reached through
// many aliases is weighed once, and only the aliases of the text count.
func TestMeasureWeighsEachAnchorOnce(t *testing.T) {
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(billionLaughs()), &root); err != nil {
		t.Fatal(err)
	}
	m := &measurer{memo: map[*yaml.Node]weight{}, busy: map[*yaml.Node]bool{}}
	w := m.weigh(&root)
	if m.aliases != 91 || m.err != nil {
		t.Errorf("counted %d aliases (err %v), want the 91 of the text", m.aliases, m.err)
	}
	if w.nodes < 10_000_000_000 || w.bytes < 30_000_000_000 {
		t.Errorf("weight %+v, want at least the 10^10 strings of 3 bytes the aliases stand for", w)
	}
}

// Refusing a bomb costs little memory: the text is not parsed when it has
// too many marks, and aliases are never expanded.
func TestRefusingBombsAllocatesLittle(t *testing.T) {
	for name, tc := range bombs {
		doc := []byte(tc.doc)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if _, err := Load(doc, nil); err == nil {
			t.Fatalf("%s: loaded", name)
		}
		runtime.ReadMemStats(&after)
		if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
			t.Errorf("%s: refusing a %d-byte document allocated %d MiB, want under 8", name, len(doc), got>>20)
		}
	}
}

// Overrides are bounded too: a --set value with more marks than a spec may
// have nodes stays text rather than being parsed.
func TestHugeOverrideStaysText(t *testing.T) {
	val := "[" + strings.Repeat("0,", 60_000) + "0]"
	n := scalarValue(val)
	if n.Kind != yaml.ScalarNode || n.Value != val || n.ShortTag() != "!!str" {
		t.Errorf("scalarValue = kind %v tag %s, want the text as a string", n.Kind, n.ShortTag())
	}
}

// A template and its expansion are held to the same limits: a bomb in the
// body is refused when it is created, and values that would make the
// expanded spec too large are refused before they are copied into it.
func TestTemplateLimits(t *testing.T) {
	_, err := ParseTemplate([]byte(bombs["billion laughs"].doc))
	if fes, ok := err.(domain.FieldErrors); !ok || len(fes) != 1 || !strings.Contains(fes[0].Message, "at most 100000") {
		t.Fatalf("ParseTemplate(billion laughs) = %v; want the node limit", err)
	}

	tm, err := ParseTemplate([]byte("vars: {arg: {default: x}}\nname: t\nentrypoint: [\"${arg}\", \"${arg}\", \"${arg}\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tm.Expand(TemplateExpansion{Vars: map[string]string{"arg": strings.Repeat("y", 1000)}}); err != nil {
		t.Fatalf("a small expansion failed: %v", err)
	}
	_, err = tm.Expand(TemplateExpansion{Vars: map[string]string{"arg": strings.Repeat("y", 400<<10)}})
	fes, ok := err.(domain.FieldErrors)
	if !ok || len(fes) != 1 || fes[0].Path != "vars" || !strings.Contains(fes[0].Message, "at most 1048576") {
		t.Fatalf("Expand with a 400 KiB value used 3 times = %v; want a vars error naming the limit", err)
	}

	// A default is checked when the template is created.
	tm, err = ParseTemplate([]byte("vars: {arg: {default: " + strings.Repeat("z", 300<<10) + "}}\nname: t\nentrypoint: [\"${arg}\", \"${arg}\", \"${arg}\", \"${arg}\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tm.Check("default"); err == nil || !strings.Contains(err.Error(), "at most 1048576") {
		t.Errorf("Check with a 300 KiB default used 4 times = %v; want the size limit", err)
	}
}

// BenchmarkRefuseBomb measures how fast each kind of oversized document is
// refused, and what refusing it allocates.
func BenchmarkRefuseBomb(b *testing.B) {
	for _, name := range []string{"repeated argument", "billion laughs", "alias count", "expanded size", "node bomb", "node bomb in JSON", "node bomb through aliases"} {
		doc := []byte(bombs[name].doc)
		b.Run(strings.ReplaceAll(name, " ", "_"), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(doc)))
			for b.Loop() {
				if _, err := Load(doc, nil); err == nil {
					b.Fatal("loaded")
				}
			}
		})
	}
}
