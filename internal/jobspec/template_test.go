package jobspec

import (
	"errors"
	"maps"
	"os"
	"reflect"
	"strings"
	"testing"

	"trainyard/internal/domain"
)

// profileTemplate is the dev/test/prod example of docs/templates.md.
const profileTemplate = `description: ResNet-50 on ImageNet
vars:
  profile: {default: dev, allowed: [dev, test, prod], description: where it runs}
  gpus: {default: 1, description: GPUs per node}
  pool_name: {default: dev}
  lr: 0.1
  epochs:
    description: passes over the data
name: resnet-${profile}
pool: ${pool_name}
entrypoint: [python3, train.py, --epochs, "${epochs}", --note, "cost is $${HOME} not ${profile}"]
resources: {gpus: "${gpus}", cpus: 4}
params: {lr: "${lr}", max_tokens: 512, tokenizer: bpe}
env_vars: {NCCL_DEBUG: WARN}
secrets: [WANDB_API_KEY]
labels: {team: vision, profile: "${profile}"}
`

func mustParseTemplate(t *testing.T, doc string) *Template {
	t.Helper()
	tm, err := ParseTemplate([]byte(doc))
	if err != nil {
		t.Fatalf("ParseTemplate: %v", err)
	}
	return tm
}

func fieldErrs(t *testing.T, err error) domain.FieldErrors {
	t.Helper()
	var fe domain.FieldErrors
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v (%T), want domain.FieldErrors", err, err)
	}
	return fe
}

// hasProblem reports whether fe has a problem at path whose message holds
// every one of words.
func hasProblem(fe domain.FieldErrors, path string, words ...string) bool {
	for _, e := range fe {
		if e.Path != path {
			continue
		}
		ok := true
		for _, w := range words {
			ok = ok && strings.Contains(e.Message, w)
		}
		if ok {
			return true
		}
	}
	return false
}

func TestTemplateParseVars(t *testing.T) {
	tm := mustParseTemplate(t, profileTemplate)
	want := []TemplateVar{
		{Name: "profile", Default: "dev", HasDefault: true, Description: "where it runs", Allowed: []string{"dev", "test", "prod"}},
		{Name: "gpus", Default: "1", HasDefault: true, Description: "GPUs per node"},
		{Name: "pool_name", Default: "dev", HasDefault: true},
		{Name: "lr", Default: "0.1", HasDefault: true},
		{Name: "epochs", Description: "passes over the data"},
	}
	if !reflect.DeepEqual(tm.Vars, want) {
		t.Errorf("Vars =\n%+v\nwant\n%+v", tm.Vars, want)
	}
	if tm.Description != "ResNet-50 on ImageNet" || tm.Project != "" {
		t.Errorf("Description, Project = %q, %q", tm.Description, tm.Project)
	}
}

func TestTemplateProfilesDifferOnlyByVariables(t *testing.T) {
	tm := mustParseTemplate(t, profileTemplate)
	dev, err := tm.Expand(TemplateExpansion{Vars: map[string]string{"epochs": "1"}, Project: "vision"})
	if err != nil {
		t.Fatalf("dev: %v", err)
	}
	prod, err := tm.Expand(TemplateExpansion{Project: "vision", Vars: map[string]string{
		"epochs": "90", "profile": "prod", "gpus": "8", "pool_name": "a100"}})
	if err != nil {
		t.Fatalf("prod: %v", err)
	}
	if dev.Name != "resnet-dev" || prod.Name != "resnet-prod" {
		t.Errorf("names = %q, %q", dev.Name, prod.Name)
	}
	if dev.Resources.GPUs != 1 || prod.Resources.GPUs != 8 || dev.Pool != "dev" || prod.Pool != "a100" {
		t.Errorf("dev %+v pool %s, prod %+v pool %s", dev.Resources, dev.Pool, prod.Resources, prod.Pool)
	}
	wantArgs := []string{"python3", "train.py", "--epochs", "90", "--note", "cost is ${HOME} not prod"}
	if !reflect.DeepEqual(prod.Entrypoint, wantArgs) {
		t.Errorf("prod entrypoint = %q, want %q", prod.Entrypoint, wantArgs)
	}
	if dev.Project != "vision" || dev.Params["lr"] != "0.1" || dev.Params["max_tokens"] != "512" || dev.Labels["profile"] != "dev" {
		t.Errorf("dev spec = %+v", dev)
	}
	// Everything else is the same: put the variable fields back and compare.
	prod.Name, prod.Pool, prod.Resources.GPUs, prod.Entrypoint = dev.Name, dev.Pool, dev.Resources.GPUs, dev.Entrypoint
	prod.Labels = maps.Clone(prod.Labels)
	prod.Labels["profile"] = "dev"
	if !reflect.DeepEqual(dev, prod) {
		t.Errorf("profiles differ beyond their variables:\ndev  %+v\nprod %+v", dev, prod)
	}
}

func TestTemplateInjectionStaysOneValue(t *testing.T) {
	tm := mustParseTemplate(t, `vars: {run: {}}
name: job-a
entrypoint: [echo, "${run}"]
labels: {run: "${run}"}
`)
	evil := "x\"\nentrypoint: [rm, -rf, /]\nresources: {gpus: 64}\n#"
	spec, err := tm.Expand(TemplateExpansion{Vars: map[string]string{"run": evil}})
	if err == nil {
		t.Fatalf("expanded with a newline in a label value: %+v", spec)
	}
	fe := fieldErrs(t, err)
	if !hasProblem(fe, "labels.run", "(the value comes from ${run})") || len(fe) != 1 {
		t.Errorf("errors = %v, want one at labels.run naming ${run}", fe)
	}
	// Without the label the value is one argument, nothing more.
	tm = mustParseTemplate(t, "vars: {run: {}}\nname: job-a\nentrypoint: [echo, \"${run}\"]\n")
	spec, err = tm.Expand(TemplateExpansion{Vars: map[string]string{"run": evil}})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(spec.Entrypoint, []string{"echo", evil}) || spec.Resources.GPUs != 0 {
		t.Errorf("entrypoint = %q, gpus = %d; the value leaked out of its scalar", spec.Entrypoint, spec.Resources.GPUs)
	}
	// YAML syntax in a value is text: no list, mapping, null or number.
	for _, v := range []string{"[a, b]", "{a: 1}", "~", "null", "*x", "&x y"} {
		tm = mustParseTemplate(t, "vars: {v: {}}\nname: job-a\nentrypoint: [echo]\nworkdir: ${v}\nparams: {p: \"${v}\"}\n")
		_, err := tm.Expand(TemplateExpansion{Vars: map[string]string{"v": v}})
		fe := fieldErrs(t, err)
		if !hasProblem(fe, "workdir", "absolute") {
			t.Errorf("value %q: errors = %v, want workdir must be absolute (a string)", v, fe)
		}
	}
	// A value holding ${...} is not expanded again.
	tm = mustParseTemplate(t, "vars: {a: {}, b: B}\nname: job-a\nentrypoint: [echo, \"${a}\", \"${b}\"]\n")
	spec, err = tm.Expand(TemplateExpansion{Vars: map[string]string{"a": "${b}"}})
	if err != nil || !reflect.DeepEqual(spec.Entrypoint, []string{"echo", "${b}", "B"}) {
		t.Errorf("entrypoint = %q, %v; want the value ${b} kept as text", spec.Entrypoint, err)
	}
}

func TestTemplateEscapesAndEmbedding(t *testing.T) {
	tm := mustParseTemplate(t, `vars: {p: dev}
name: resnet-${p}-${p}
entrypoint: "echo $${HOME} $$HOME $ ${p}"
`)
	spec, err := tm.Expand(TemplateExpansion{})
	if err != nil {
		t.Fatal(err)
	}
	if spec.Name != "resnet-dev-dev" {
		t.Errorf("name = %q", spec.Name)
	}
	if want := []string{"/bin/sh", "-c", "echo ${HOME} $$HOME $ dev"}; !reflect.DeepEqual(spec.Entrypoint, want) {
		t.Errorf("entrypoint = %q, want %q", spec.Entrypoint, want)
	}
}

func TestTemplateVariableErrors(t *testing.T) {
	tm := mustParseTemplate(t, profileTemplate)
	tests := map[string]struct {
		vars  map[string]string
		path  string
		words []string
	}{
		"required unset":   {nil, "vars.epochs", []string{"is required (passes over the data)", "--set epochs=VALUE"}},
		"unknown":          {map[string]string{"epochs": "1", "profle": "prod"}, "vars.profle", []string{`did you mean "profile"`, "profile, gpus"}},
		"not allowed":      {map[string]string{"epochs": "1", "profile": "staging"}, "vars.profile", []string{`"staging" is not one of the allowed values dev, test, prod`}},
		"bad value":        {map[string]string{"epochs": "1", "gpus": "two"}, "resources.gpus", []string{"whole number", "(the value comes from ${gpus})"}},
		"bad embedded use": {map[string]string{"epochs": "1", "profile": "test", "pool_name": "Bad_Pool"}, "pool", []string{"${pool_name}"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := tm.Expand(TemplateExpansion{Vars: tc.vars})
			fe := fieldErrs(t, err)
			if !hasProblem(fe, tc.path, tc.words...) {
				t.Errorf("errors = %v, want %s with %q", fe, tc.path, tc.words)
			}
		})
	}
	// A body problem is reported at the template's line.
	_, err := tm.Expand(TemplateExpansion{Vars: map[string]string{"epochs": "1", "gpus": "-1"}})
	fe := fieldErrs(t, err)
	if len(fe) != 1 || fe[0].Path != "resources.gpus" || fe[0].Line != 12 {
		t.Errorf("errors = %+v, want resources.gpus at line 12", fe)
	}
	// Overrides apply after substitution and keep their set[i] paths.
	spec, err := tm.Expand(TemplateExpansion{Vars: map[string]string{"epochs": "1"}, Sets: []string{"params.lr=0.5", "resources.gpu=2"}})
	fe = fieldErrs(t, err)
	if !hasProblem(fe, "set[1]", `did you mean "resources.gpus"`) {
		t.Errorf("errors = %v, spec %+v", fe, spec)
	}
	spec, err = tm.Expand(TemplateExpansion{Vars: map[string]string{"epochs": "1"}, Sets: []string{"params.lr=0.5"}})
	if err != nil || spec.Params["lr"] != "0.5" {
		t.Errorf("override: lr = %q, %v", spec.Params["lr"], err)
	}
}

func TestParseTemplateErrors(t *testing.T) {
	tests := map[string]struct {
		doc   string
		path  string
		words []string
	}{
		"undeclared": {"vars: {profile: dev}\nname: x-${profil}\nentrypoint: [a]\n", "name",
			[]string{"${profil}", "not declared", `did you mean ${profile}?`, "$${profil}"}},
		"shell syntax": {"name: x\nentrypoint: \"echo ${HOME%/}\"\n", "entrypoint", []string{"not a variable reference", "$${HOME%/}"}},
		"unterminated": {"name: x\nentrypoint: [\"${a\"]\n", "entrypoint[0]", []string{"without a closing }"}},
		"unused":       {"vars: {a: 1}\nname: x\nentrypoint: [a]\n", "vars.a", []string{"never used"}},
		"key":          {"vars: {a: 1}\nname: x\nentrypoint: [\"${a}\"]\nparams: {\"${a}\": 1}\n", "params.${a}", []string{"only in values"}},
		"spec field":   {"vars: {pool: x}\nname: x\nentrypoint: [\"${pool}\"]\n", "vars.pool", []string{"also a spec field"}},
		"var field":    {"vars: {a: {defualt: 1}}\nname: x\nentrypoint: [\"${a}\"]\n", "vars.a.defualt", []string{`did you mean "default"`}},
		"default not allowed": {"vars: {a: {default: x, allowed: [y, z]}}\nname: x\nentrypoint: [\"${a}\"]\n", "vars.a.default",
			[]string{"not one of the allowed values y, z"}},
		"project variable": {"vars: {p: x}\nname: x\nproject: ${p}\nentrypoint: [a]\n", "project", []string{"may not use a variable"}},
		"label reserved":   {"name: x\nentrypoint: [a]\nlabels: {trainyard.template: y}\n", "labels.trainyard.template", []string{"set by the platform"}},
		"not a mapping":    {"- a\n", "document", []string{"mapping"}},
		"escape in description": {"description: \"Runs \\e[2Jfast\"\nname: x\nentrypoint: [a]\n", "description",
			[]string{"control character U+001B"}},
		"bidi in a variable's description": {"vars: {a: {description: \"lr \\u202E\"}}\nname: x\nentrypoint: [\"${a}\"]\n", "vars.a.description",
			[]string{"bidirectional formatting character U+202E"}},
		"env credential": {"name: x\nentrypoint: [a]\nenv_vars: {HF_TOKEN: hf_abc123}\n", "env_vars.HF_TOKEN",
			[]string{"credential", "trainyard secret set HF_TOKEN", "secrets: [HF_TOKEN]"}},
		"param credential": {"name: x\nentrypoint: [a]\nparams: {wandbApiKey: abc}\n", "params.wandbApiKey", []string{"credential", "WANDBAPIKEY"}},
		"credential from variable": {"vars: {k: {}}\nname: x\nentrypoint: [a]\nenv_vars: {DB_PASSWORD: \"${k}\"}\n", "env_vars.DB_PASSWORD",
			[]string{"credential"}},
		"credential variable": {"vars: {hf_token: {}}\nname: x\nentrypoint: [\"${hf_token}\"]\n", "vars.hf_token", []string{"credential", "secret set HF_TOKEN"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := ParseTemplate([]byte(tc.doc))
			fe := fieldErrs(t, err)
			if !hasProblem(fe, tc.path, tc.words...) {
				t.Errorf("errors = %v, want %s with %q", fe, tc.path, tc.words)
			}
		})
	}
}

func TestLooksLikeCredential(t *testing.T) {
	for name, want := range map[string]bool{
		"HF_TOKEN": true, "hfToken": true, "GITHUBTOKEN": true, "WANDB_API_KEY": true, "apiKey": true, "OPENAI_APIKEY": true,
		"AWS_SECRET_ACCESS_KEY": true, "db_password": true, "DB_PASSWD": true, "GOOGLE_APPLICATION_CREDENTIALS": true,
		"SSH_PRIVATE_KEY": true, "client-secret": true,
		"max_tokens": false, "tokenizer": false, "TOKENIZERS_PARALLELISM": false, "lr": false, "NCCL_DEBUG": false,
		"key_frames": false, "api_url": false, "secretary": false, "num_keys": false,
	} {
		if got := looksLikeCredential(name); got != want {
			t.Errorf("looksLikeCredential(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestTemplateCheck(t *testing.T) {
	// Required variables: problems at their values wait for submit; others
	// show at once.
	tm := mustParseTemplate(t, profileTemplate)
	if err := tm.Check("vision"); err != nil {
		t.Errorf("Check of the profile template: %v", err)
	}
	tm = mustParseTemplate(t, "vars: {g: {}, p: 1}\nname: x\nentrypoint: [a]\nresources: {gpus: \"${g}\", gpu: 1}\npolicy: {retries: \"${p}\"}\n")
	fe := fieldErrs(t, tm.Check("vision"))
	if !hasProblem(fe, "resources.gpu", "did you mean") || hasProblem(fe, "resources.gpus") {
		t.Errorf("Check = %v, want only the unknown field", fe)
	}
	// No required variables: the defaults must make a valid spec.
	tm = mustParseTemplate(t, "vars: {p: 2}\nname: x\nentrypoint: [a]\npolicy: {retries: \"${p}\"}\n")
	fe = fieldErrs(t, tm.Check("vision"))
	if !hasProblem(fe, "policy.retries", "re-entrant", "checked with the variables' defaults") {
		t.Errorf("Check = %v", fe)
	}
}

func TestSplitTemplateSets(t *testing.T) {
	vars, rest, err := SplitTemplateSets([]string{"profile", "gpus"}, []string{"profile=prod", "params.lr=0.2", "name=x", "gpus=a=b"})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(vars, map[string]string{"profile": "prod", "gpus": "a=b"}) || !reflect.DeepEqual(rest, []string{"params.lr=0.2", "name=x"}) {
		t.Errorf("vars %v rest %v", vars, rest)
	}
	_, _, err = SplitTemplateSets([]string{"profile"}, []string{"profle=prod"})
	if err == nil || !strings.Contains(err.Error(), `did you mean "profile"`) || !errors.Is(err, domain.ErrInvalid) {
		t.Errorf("err = %v", err)
	}
}

func TestParseTemplateRef(t *testing.T) {
	for ref, want := range map[string]struct {
		name string
		v    int
		ok   bool
	}{"resnet": {"resnet", 0, true}, "resnet@3": {"resnet", 3, true}, "resnet@0": {}, "resnet@x": {}, "Res": {}, "": {}} {
		name, v, err := ParseTemplateRef(ref)
		if (err == nil) != want.ok || name != want.name || v != want.v {
			t.Errorf("ParseTemplateRef(%q) = %q, %d, %v", ref, name, v, err)
		}
	}
}

// TestTemplateDocExample keeps the example of docs/templates.md valid.
func TestTemplateDocExample(t *testing.T) {
	b, err := os.ReadFile("../../docs/templates.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```yaml\n")
	doc, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/templates.md has no yaml example")
	}
	tm := mustParseTemplate(t, doc)
	if err := tm.Check("vision"); err != nil {
		t.Fatalf("Check: %v", err)
	}
	spec, err := tm.Expand(TemplateExpansion{Project: "vision", Vars: map[string]string{"epochs": "90", "profile": "prod", "gpus": "8", "pool_name": "a100"}})
	if err != nil {
		t.Fatal(err)
	}
	if spec.Name != "resnet-prod" || spec.Pool != "a100" || spec.Resources.GPUs != 8 || spec.Entrypoint[3] != "90" || spec.Secrets[0] != "WANDB_API_KEY" {
		t.Errorf("prod spec = %+v", spec)
	}
}
