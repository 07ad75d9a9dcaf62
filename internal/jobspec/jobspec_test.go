package jobspec

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
)

// mustLoad loads doc with sets and fails the test on error.
func mustLoad(t *testing.T, doc string, sets ...string) domain.Spec {
	t.Helper()
	s, err := Load([]byte(doc), sets)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return s
}

// loadErrors loads doc and returns its problems; it fails the test when
// Load succeeds or returns another error type.
func loadErrors(t *testing.T, doc string, sets ...string) domain.FieldErrors {
	t.Helper()
	_, err := Load([]byte(doc), sets)
	var fes domain.FieldErrors
	if !errors.As(err, &fes) || len(fes) == 0 {
		t.Fatalf("Load error = %v; want domain.FieldErrors", err)
	}
	return fes
}

func paths(es domain.FieldErrors) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Path
	}
	return out
}

const minimal = "name: job\nentrypoint: [python3, train.py]\n"

func TestLoadReportsEveryProblem(t *testing.T) {
	doc := `name: Bad Name
env: pytorch@latest
entrypoint: []
resources: {gpus: -1, cpus: 0, memory: lots, nodes: 0, gpu: 1}
inputs:
  - {name: d, path: rel/path}
outputs: {path: /out}
params: {bad-name: 1}
env_vars: {TRAINYARD_X: "1"}
secrets: [lower]
policy: {timeout: -1h, retries: 1, priority: asap}
checkpoint: {keep: -1}
health: {stall: -1m}
labels: {Bad: x}
extra: 1
`
	es := loadErrors(t, doc)
	want := []string{
		"name", "env", "entrypoint", "resources.gpus", "resources.cpus",
		"resources.memory", "resources.nodes", "resources.gpu",
		"inputs[0].path", "inputs[0].version", "outputs.path", "params.bad-name",
		"env_vars.TRAINYARD_X", "secrets[0]", "policy.timeout", "policy.retries",
		"policy.priority", "checkpoint.keep", "health.stall", "labels.Bad", "extra",
	}
	got := paths(es)
	for _, p := range want {
		if !slices.Contains(got, p) {
			t.Errorf("no error for %s; got %v", p, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("got %d errors, want %d:\n%v", len(got), len(want), es)
	}
	for _, e := range es {
		if e.Line == 0 {
			t.Errorf("%s: no source line", e.Path)
		}
	}
}

func TestTypeErrorMessageNamesValueAndLine(t *testing.T) {
	doc := "name: x\nentrypoint: [a]\nresources:\n  cpus: 1\n  memory: 1GiB\n  nodes: 1\n  gpus: two\n"
	es := loadErrors(t, doc)
	if got, want := es.Error(), `resources.gpus (line 7): must be a whole number, got "two"`; !strings.Contains(got, want) {
		t.Errorf("error %q does not contain %q", got, want)
	}
}

func TestDecodeErrorSuppressesDuplicateValidation(t *testing.T) {
	// name has a type error; "name is required" would only repeat it.
	es := loadErrors(t, "name: [a]\nentrypoint: {x: 1}\n")
	if got := paths(es); !slices.Equal(got, []string{"name", "entrypoint"}) {
		t.Errorf("paths = %v; want [name entrypoint]", got)
	}
}

func TestDefaults(t *testing.T) {
	s := mustLoad(t, minimal)
	want := Defaults()
	want.Name = "job"
	want.Entrypoint = []string{"python3", "train.py"}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("Load(minimal) =\n%+v\nwant\n%+v", s, want)
	}
	if s.Policy.Timeout.D() != 72*time.Hour || s.Resources.Memory != 1<<30 || s.Checkpoint.Keep != 3 {
		t.Errorf("defaults not as documented: %+v", s)
	}
}

func TestExplicitValuesAreNotReplacedByDefaults(t *testing.T) {
	s := mustLoad(t, minimal+"policy: {timeout: 0}\ncheckpoint: {keep: 0}\n")
	if s.Policy.Timeout != 0 || s.Checkpoint.Keep != 0 {
		t.Errorf("timeout=%v keep=%d; want explicit zeros kept", s.Policy.Timeout, s.Checkpoint.Keep)
	}
	es := loadErrors(t, minimal+"resources: {cpus: 0, nodes: 0}\n")
	if got := paths(es); !slices.Equal(got, []string{"resources.cpus", "resources.nodes"}) {
		t.Errorf("paths = %v", got)
	}
}

func TestEntrypointForms(t *testing.T) {
	tests := map[string]struct {
		doc   string
		argv  []string
		shell bool
	}{
		"list":                  {"entrypoint: [python3, train.py, --epochs, 3]", []string{"python3", "train.py", "--epochs", "3"}, false},
		"block list":            {"entrypoint:\n  - python3\n  - -c\n  - 'print(1)'", []string{"python3", "-c", "print(1)"}, false},
		"string":                {"entrypoint: python3 train.py && echo ok", []string{"/bin/sh", "-c", "python3 train.py && echo ok"}, true},
		"canonical shell":       {`entrypoint: [/bin/sh, -c, "exit 3"]` + "\nshell: true", []string{"/bin/sh", "-c", "exit 3"}, true},
		"string and shell true": {"entrypoint: exit 3\nshell: true", []string{"/bin/sh", "-c", "exit 3"}, true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := mustLoad(t, "name: ep\n"+tc.doc+"\n")
			if !slices.Equal(s.Entrypoint, tc.argv) || s.Shell != tc.shell {
				t.Errorf("entrypoint=%q shell=%v; want %q shell=%v", s.Entrypoint, s.Shell, tc.argv, tc.shell)
			}
		})
	}
}

func TestOverrides(t *testing.T) {
	base := minimal + "params: {lr: \"0.1\"}\nresources: {gpus: 1}\nlabels: {team: a}\n"
	tests := map[string]struct {
		sets  []string
		check func(domain.Spec) bool
	}{
		"param replaced":     {[]string{"params.lr=0.2"}, func(s domain.Spec) bool { return s.Params["lr"] == "0.2" }},
		"param added":        {[]string{"params.batch_size=256"}, func(s domain.Spec) bool { return s.Params["batch_size"] == "256" && s.Params["lr"] == "0.1" }},
		"param bool text":    {[]string{"params.fp16=true"}, func(s domain.Spec) bool { return s.Params["fp16"] == "true" }},
		"gpus":               {[]string{"resources.gpus=2"}, func(s domain.Spec) bool { return s.Resources.GPUs == 2 }},
		"memory":             {[]string{"resources.memory=64GiB"}, func(s domain.Spec) bool { return s.Resources.Memory == 64<<30 }},
		"cpus fraction":      {[]string{"resources.cpus=0.25"}, func(s domain.Spec) bool { return s.Resources.CPUs == 0.25 }},
		"retries":            {[]string{"policy.retries=3", "policy.reentrant=true"}, func(s domain.Spec) bool { return s.Policy.Retries == 3 && s.Policy.Reentrant }},
		"new section":        {[]string{"health.stall=5m"}, func(s domain.Spec) bool { return s.Health.Stall.D() == 5*time.Minute }},
		"label":              {[]string{"labels.team=x"}, func(s domain.Spec) bool { return s.Labels["team"] == "x" }},
		"label key with dot": {[]string{"labels.example.com/owner=me"}, func(s domain.Spec) bool { return s.Labels["example.com/owner"] == "me" }},
		"name":               {[]string{"name=foo"}, func(s domain.Spec) bool { return s.Name == "foo" }},
		"pool":               {[]string{"pool=x"}, func(s domain.Spec) bool { return s.Pool == "x" }},
		"workdir":            {[]string{"workdir=/abs"}, func(s domain.Spec) bool { return s.Workdir == "/abs" }},
		"later wins":         {[]string{"name=a", "name=b"}, func(s domain.Spec) bool { return s.Name == "b" }},
		"quoted number name": {[]string{"name='42'"}, func(s domain.Spec) bool { return s.Name == "42" }},
		"value with equals":  {[]string{"env_vars.OPTS=a=b"}, func(s domain.Spec) bool { return s.EnvVars["OPTS"] == "a=b" }},
		"entrypoint string": {[]string{"entrypoint=python3 train.py --fast"}, func(s domain.Spec) bool {
			return s.Shell && slices.Equal(s.Entrypoint, []string{"/bin/sh", "-c", "python3 train.py --fast"})
		}},
		"value looking like a list": {[]string{"entrypoint=[a, b]"}, func(s domain.Spec) bool { return s.Shell && s.Entrypoint[2] == "[a, b]" }},
		"null unsets":               {[]string{"workdir=/x", "workdir=~"}, func(s domain.Spec) bool { return s.Workdir == "" }},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := mustLoad(t, base, tc.sets...)
			if !tc.check(s) {
				c, _ := Canonical(s)
				t.Errorf("sets %q gave %s", tc.sets, c)
			}
		})
	}
}

func TestOverrideOfAliasedSectionLeavesAnchorAlone(t *testing.T) {
	doc := minimal + "resources: &r {gpus: 1}\nlabels: {a: b}\n"
	s := mustLoad(t, doc, "resources.gpus=3")
	if s.Resources.GPUs != 3 {
		t.Errorf("gpus = %d; want 3", s.Resources.GPUs)
	}
	doc = "name: job\nentrypoint: [a]\nparams: &p {lr: '1'}\n"
	if s := mustLoad(t, doc, "params.lr=2"); s.Params["lr"] != "2" {
		t.Errorf("lr = %q; want 2", s.Params["lr"])
	}
	// A mapping inside a section, one field at a time, created or merged.
	doc = "name: job\nentrypoint: [a]\npolicy: {timeout: 1h, warn: {signal: USR2, before: 1m}}\n"
	if s := mustLoad(t, doc, "policy.warn.signal=USR1"); s.Policy.Warn.Signal != "USR1" || s.Policy.Warn.Before.D() != time.Minute {
		t.Errorf("warn = %+v; want USR1 1m before", s.Policy.Warn)
	}
	doc = "name: job\nentrypoint: [a]\npolicy: {timeout: 1h}\n"
	if s := mustLoad(t, doc, "policy.warn.signal=USR1", "policy.warn.before=5m"); s.Policy.Warn.Signal != "USR1" || s.Policy.Warn.Before.D() != 5*time.Minute {
		t.Errorf("warn = %+v; want USR1 5m before", s.Policy.Warn)
	}
}

func TestOverrideErrors(t *testing.T) {
	tests := map[string]struct {
		set  string
		want string // substring of the message
	}{
		"no equals":       {"resources.gpus", `has no "="`},
		"empty key":       {"=1", `key before "=" is empty`},
		"unknown":         {"foo=1", `unknown key "foo"`},
		"typo":            {"resources.gpu=1", `did you mean "resources.gpus"?`},
		"top-level leaf":  {"gpus=1", `did you mean "resources.gpus"?`},
		"section whole":   {"resources=4", "cannot be set whole"},
		"map whole":       {"params=x", "cannot be set whole"},
		"map empty entry": {"params.=x", "entry name"},
		"list":            {"secrets=A", "is a list"},
		"inputs":          {"inputs.0.name=x", "is a list"},
		"scalar field":    {"pool.name=x", "single value"},
		"bad value":       {"resources.gpus=two", `resources.gpus: must be a whole number, got "two"`},
		"bad size":        {"resources.memory=lots", `"lots" is not a size`},
		"bad bool":        {"policy.reentrant=maybe", "must be true or false"},
		"sub whole":       {"policy.warn=USR1", "cannot be set whole"},
		"sub unknown":     {"policy.warn.sig=USR1", "policy.warn has the fields signal, before"},
		"scalar sub":      {"policy.timeout.x=1", "single value"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			es := loadErrors(t, minimal, "name=ok", tc.set)
			if len(es) != 1 || es[0].Path != "set[1]" || !strings.Contains(es[0].Message, tc.want) {
				t.Errorf("errors = %v; want one at set[1] containing %q", es, tc.want)
			}
		})
	}
}

func TestOverrideValidationUsesFieldPath(t *testing.T) {
	es := loadErrors(t, minimal, "resources.gpus=-1")
	if len(es) != 1 || es[0].Path != "resources.gpus" || es[0].Line != 0 {
		t.Errorf("errors = %#v; want resources.gpus without a line", es)
	}
}

func TestOverrideErrorsReportedWithBrokenDocument(t *testing.T) {
	es := loadErrors(t, "", "bogus=1")
	if got := paths(es); !slices.Equal(got, []string{"document", "set[0]"}) {
		t.Errorf("paths = %v; want [document set[0]]", got)
	}
}

func TestParseAppliesNoDefaults(t *testing.T) {
	s, err := Parse([]byte("name: job\nresources: {gpus: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Project != "" || s.Resources.CPUs != 0 || s.Resources.GPUs != 2 {
		t.Errorf("Parse = %+v; want only name and gpus set", s)
	}
	// Parse reports form problems but not rules.
	if _, err := Parse([]byte("name: BAD\nresources: {gpus: x}\n")); err == nil || !strings.Contains(err.Error(), "resources.gpus") || strings.Contains(err.Error(), "name") {
		t.Errorf("Parse error = %v; want only the gpus type error", err)
	}
	ApplyDefaults(&s)
	s.Entrypoint = []string{"a"}
	if es := Validate(s); len(es) != 0 {
		t.Errorf("Validate after ApplyDefaults = %v", es)
	}
}

func TestValidateProgrammaticSpec(t *testing.T) {
	s := Defaults()
	s.Name = "x"
	s.Entrypoint = []string{"a\x00b"}
	s.Resources.CPUs = math.NaN()
	s.Params = map[string]string{"ok": "v\x00"}
	s.Policy.Priority = ""
	es := Validate(s)
	if got := paths(es); !slices.Equal(got, []string{"entrypoint[0]", "resources.cpus", "params.ok", "policy.priority"}) {
		t.Errorf("paths = %v (%v)", got, es)
	}
}

func TestCanonical(t *testing.T) {
	a := mustLoad(t, minimal+"labels: {b: '2', a: '1', c: '3'}\nparams: {z: 1, y: 2}\n")
	b := mustLoad(t, "labels: {c: '3', a: '1', b: '2'}\nparams: {y: 2, z: 1}\nentrypoint: [python3, train.py]\nname: job\n")
	ca, ha := Canonical(a)
	cb, hb := Canonical(b)
	if string(ca) != string(cb) || ha != hb {
		t.Errorf("equal specs have different canonical forms:\n%s\n%s", ca, cb)
	}
	if !strings.HasPrefix(ha, "sha256:") || len(ha) != len("sha256:")+64 {
		t.Errorf("hash %q is not sha256:<64 hex>", ha)
	}
	if strings.ContainsAny(string(ca), "\n\t ") {
		t.Errorf("canonical JSON has whitespace: %s", ca)
	}
	c := mustLoad(t, minimal+"labels: {a: '1', b: '2', c: '4'}\n")
	if _, hc := Canonical(c); hc == ha {
		t.Error("different specs share a hash")
	}
	// Non-finite CPUs cannot be encoded; Canonical must still answer.
	bad := Defaults()
	bad.Resources.CPUs = math.Inf(1)
	if j, _ := Canonical(bad); !strings.Contains(string(j), `"cpus":0`) {
		t.Errorf("Canonical(Inf cpus) = %s", j)
	}
}

func TestCanonicalRoundTrip(t *testing.T) {
	odd := Defaults()
	odd.Name = "odd"
	odd.Entrypoint = []string{"/bin/sh", "-c", "echo '<&>' \"\\u00e9\" é\t😀"}
	odd.Shell = true
	odd.Workdir = "/srv/a b"
	odd.Resources = domain.Resources{GPUs: 8, CPUs: 0.1, Memory: 1_000_000_000, Nodes: 4}
	odd.Inputs = []domain.Input{{Name: "a", Path: "/d/a", Version: "2024-01-01"}, {Name: "b", Path: "/d/b", Version: "1.10"}}
	odd.Outputs.Path = "/out/{job_id}/x"
	odd.Params = map[string]string{"lr": "1e-3", "note": "true", "empty": "", "multi": "a\nb"}
	odd.EnvVars = map[string]string{"NCCL_DEBUG": "WARN", "X": "null"}
	odd.Secrets = []string{"B", "A"}
	odd.Policy = domain.Policy{Timeout: domain.Duration(90*time.Minute + 1500*time.Millisecond), Retries: 100, Reentrant: true, Priority: domain.PriorityUrgent, Preemptible: true}
	odd.Checkpoint.Keep = 0
	odd.Health = domain.Health{FirstProgress: domain.Duration(time.Nanosecond), Stall: domain.Duration(49 * time.Hour)}
	odd.Labels = map[string]string{"example.com/team": "ünïcode"}
	if es := Validate(odd); len(es) != 0 {
		t.Fatalf("test spec invalid: %v", es)
	}
	specs := map[string]domain.Spec{
		"minimal": mustLoad(t, minimal),
		"odd":     odd,
	}
	for name, s := range specs {
		t.Run(name, func(t *testing.T) {
			assertRoundTrip(t, s)
			c, _ := Canonical(s)
			back, err := Load(c, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(normalizeMaps(back), normalizeMaps(s)) {
				t.Errorf("spec changed on a round trip:\n%+v\n%+v", back, s)
			}
		})
	}
}

// normalizeMaps makes empty maps nil; the canonical form does not keep the
// difference.
func normalizeMaps(s domain.Spec) domain.Spec {
	if len(s.Params) == 0 {
		s.Params = nil
	}
	if len(s.EnvVars) == 0 {
		s.EnvVars = nil
	}
	if len(s.Labels) == 0 {
		s.Labels = nil
	}
	return s
}

func TestSuggest(t *testing.T) {
	tests := map[string]struct {
		word, want string
	}{
		"typo":           {"gpu", "gpus"},
		"swap":           {"nmae", "name"},
		"case":           {"Name", "name"},
		"camel":          {"envVars", "env_vars"},
		"alias":          {"command", "entrypoint"},
		"alias typo":     {"comand", "entrypoint"},
		"far":            {"base", ""},
		"empty":          {"", ""},
		"long gibberish": {strings.Repeat("x", 500), ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := suggest(tc.word, append(topFields, resourcesFields...)); got != tc.want {
				t.Errorf("suggest(%q) = %q; want %q", tc.word, got, tc.want)
			}
		})
	}
}

func TestOddInputsDoNotPanic(t *testing.T) {
	docs := map[string]string{
		"tags":          "name: !!binary aGVsbG8=\nentrypoint: !custom [a]\n",
		"timestamp":     "name: job\nentrypoint: [a]\ninputs: [{name: d, path: /d, version: 2024-01-01}]\n",
		"alias key":     "a: &k name\n*k : x\n",
		"unknown alias": "name: *nope\n",
		"self alias":    "a: &a [*a]\n",
		"huge int":      "name: job\nentrypoint: [a]\nresources: {gpus: 99999999999999999999999, memory: 99999999999999999999999}\n",
		"huge days":     "name: job\nentrypoint: [a]\npolicy: {timeout: 9999999999999d}\n",
		"nan":           "name: job\nentrypoint: [a]\nresources: {cpus: .nan, memory: NaN}\n",
		"deep":          strings.Repeat("[", 5000) + strings.Repeat("]", 5000),
		"map keys":      "? [a, b]\n: c\n",
		"null key":      "~: x\nname: job\n",
		"bom":           "\ufeffname: job\nentrypoint: [a]\n",
		"nul":           "name: \"a\\0b\"\nentrypoint: [\"\\0\"]\n",
		"too big":       "name: " + strings.Repeat("x", MaxDocumentBytes) + "\n",
		"binary":        "\xff\xfe\x00",
		"only dashes":   "---\n---\n",
		"tabs in yaml":  "name:\tjob\n\tentrypoint: [a]\n",
	}
	for name, doc := range docs {
		t.Run(name, func(t *testing.T) {
			_, err := Load([]byte(doc), []string{"resources.gpus=x\xff", "labels.\xff=\xfe"})
			if err == nil {
				t.Fatal("Load succeeded; want errors")
			}
			var fes domain.FieldErrors
			if !errors.As(err, &fes) {
				t.Fatalf("error %T is not FieldErrors", err)
			}
		})
	}
}

// The example templates parse and, with their defaults, are valid specs
// (their relative workdir made absolute, as template create does).
func TestExampleTemplatesCheck(t *testing.T) {
	files, err := filepath.Glob("../../examples/templates/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example templates found: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			doc, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			doc = regexp.MustCompile(`(?m)^workdir: \S+`).ReplaceAll(doc, []byte("workdir: /srv/examples"))
			tmpl, err := ParseTemplate(doc)
			if err != nil {
				t.Fatalf("example template does not parse: %v", err)
			}
			if err := tmpl.Check("default"); err != nil {
				t.Fatalf("example template with its defaults is not a valid spec: %v", err)
			}
		})
	}
}

func TestExamplesLoad(t *testing.T) {
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			doc, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			dir, err := filepath.Abs(filepath.Dir(file))
			if err != nil {
				t.Fatal(err)
			}
			s, err := Load(doc, []string{"workdir=" + dir})
			if err != nil {
				t.Fatalf("example does not load: %v", err)
			}
			assertRoundTrip(t, s)
		})
	}
}
