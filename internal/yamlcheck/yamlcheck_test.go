package yamlcheck

import (
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"trainyard/internal/domain"
)

type node struct {
	Name string `json:"name"`
	GPUs []int  `json:"gpus"`
}

type inner struct {
	Timeout domain.Duration `yaml:"timeout"`
}

type doc struct {
	LogLevel string          `yaml:"log_level"`
	Workers  int             `yaml:"workers"`
	Policy   inner           `yaml:"policy"`
	Limits   map[string]bool `yaml:"limits"`
	Pools    []yaml.Node     `yaml:"pools"` // checked by the caller
	common   `yaml:",inline"`
}

type common struct {
	Enabled bool `yaml:"enabled"`
}

func check(t *testing.T, src string) (*Result, []string) {
	t.Helper()
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(src), &root); err != nil {
		t.Fatal(err)
	}
	var res Result
	Check(root.Content[0], reflect.TypeFor[doc](), YAML, "", &res)
	var got []string
	for _, e := range res.Errs {
		got = append(got, e.Error())
	}
	return &res, got
}

func TestCheck(t *testing.T) {
	src := `log_levl: debug
workers: many
policy:
  timout: 1h
limits: {a: yes, b: 3}
enabled: true
pools:
  - {name: a, gpus: [0, "one"]}
`
	res, got := check(t, src)
	want := []string{
		"log_levl (line 1): unknown field; did you mean log_level?",
		`workers (line 2): must be a whole number, got "many"`,
		"policy.timout (line 4): unknown field; did you mean timeout?",
		`limits.b (line 5): must be true or false, got "3"`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if res.LineOf("policy.timout.x") != 4 || res.LineOf("enabled") != 6 {
		t.Errorf("lines = %v", res.Lines)
	}

	// An entry kept as a yaml.Node, checked against its API shape.
	var root yaml.Node
	_ = yaml.Unmarshal([]byte(src), &root)
	pools := root.Content[0].Content[11]
	var pres Result
	Check(pools.Content[0], reflect.TypeFor[node](), JSON, "pools[0]", &pres)
	if len(pres.Errs) != 1 || pres.Errs[0].Path != "pools[0].gpus[1]" || pres.Errs[0].Line != 8 {
		t.Fatalf("pool errors = %v", pres.Errs)
	}
}

func TestCheckCustomTypes(t *testing.T) {
	_, got := check(t, "policy: {timeout: soon}\n")
	if len(got) != 1 || !strings.HasPrefix(got[0], "policy.timeout (line 1): ") {
		t.Fatalf("errors = %q", got)
	}
	if _, got := check(t, "policy: {timeout: 90m}\nlimits: {}\n"); len(got) != 0 {
		t.Fatalf("a valid document: %q", got)
	}
}

func TestSuggest(t *testing.T) {
	for _, tc := range []struct{ word, want string }{
		{"log_levl", "log_level"}, {"LogLevel", "log_level"}, {"zzz", ""}, {"mem", "memory"},
	} {
		if got := Suggest(tc.word, []string{"log_level", "memory"}, map[string]string{"mem": "memory"}); got != tc.want {
			t.Errorf("Suggest(%q) = %q, want %q", tc.word, got, tc.want)
		}
	}
}
