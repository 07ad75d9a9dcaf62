// Package internal_test enforces the one-way import graph: each package may
// import only what its layer allows (see DESIGN.md §2–3). A violation fails
// the build's tests with the offending import named.
package internal_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const mod = "trainyard/"

// allowed lists, per package (relative to the module root), the module
// packages and third-party modules it may import. The standard library is
// always allowed. A package not listed here fails the test: add it on purpose.
var allowed = map[string][]string{
	"internal/domain":                {},
	"internal/clock":                 {},
	"internal/api/apitypes":          {},
	"internal/scheduler/schedtest":   {"internal/scheduler", "internal/domain"},
	"internal/simulate":              {"internal/scheduler", "internal/domain", "internal/yamlcheck", "go.yaml.in/yaml/v3"},
	"internal/authz":                 {"internal/domain"},
	"internal/audit":                 {"internal/domain"},
	"internal/secrets":               {},
	"internal/scheduler":             {"internal/domain"},
	"internal/yamlcheck":             {"internal/domain", "go.yaml.in/yaml/v3"},
	"internal/jobspec":               {"internal/domain", "internal/yamlcheck", "go.yaml.in/yaml/v3"},
	"internal/logs":                  {"internal/domain"},
	"internal/diagnose":              {"internal/domain", "internal/logs"},
	"internal/store":                 {"internal/domain"},
	"internal/store/storetest":       {"internal/store", "internal/domain"},
	"internal/store/column":          {"internal/store", "internal/domain"},
	"internal/store/postgres":        {"internal/store", "internal/store/column", "internal/domain", "internal/audit", "github.com/jackc/pgx/v5"},
	"internal/store/sqlite":          {"internal/store", "internal/store/column", "internal/domain", "internal/audit", "modernc.org/sqlite"},
	"internal/executor":              {"internal/domain"},
	"internal/executor/executortest": {"internal/executor", "internal/domain", "internal/logs"},
	"internal/executor/local/cgroup": {"golang.org/x/sys"},
	"internal/executor/local":        {"internal/executor", "internal/domain", "internal/logs", "internal/artifacts", "internal/codepkg", "internal/executor/local/cgroup", "golang.org/x/sys"},
	"internal/service":               {"internal/executor", "internal/artifacts", "internal/domain", "internal/jobspec", "internal/store", "internal/logs", "internal/clock", "internal/scheduler", "internal/authz", "internal/audit", "internal/secrets", "internal/diagnose", "internal/blob", "internal/codepkg"},
	"internal/metrics/sample":        {},
	"internal/metrics":               {"internal/domain", "internal/metrics/sample", "github.com/prometheus"},
	"internal/alerts":                {"internal/domain"},
	"internal/artifacts":             {"internal/domain"},
	"internal/alerting":              {"internal/alerts", "internal/domain", "internal/store", "internal/clock"},
	"internal/blob":                  {},
	"internal/codepkg":               {},
	"internal/blob/blobtest":         {"internal/blob"},
	"internal/blob/fs":               {"internal/blob", "golang.org/x/sys"},
	"internal/blob/s3":               {"internal/blob", "github.com/minio/minio-go/v7"},
	"internal/control":               {"internal/artifacts", "internal/domain", "internal/scheduler", "internal/store", "internal/executor", "internal/logs", "internal/clock", "internal/blob", "internal/codepkg"},
	"internal/api":                   {"internal/service", "internal/api/apitypes", "internal/domain"},
	"internal/client":                {"internal/api/apitypes"},
	"internal/cli":                   {"internal/client", "internal/api/apitypes", "internal/jobspec", "internal/domain", "internal/simulate", "internal/codepkg", "github.com/spf13/cobra", "go.yaml.in/yaml/v3", "golang.org/x/term"},
	"cmd/trainyard":                  {"*"},
}

// pure packages may not read the clock, randomness or the environment.
var pure = []string{"internal/domain", "internal/scheduler"}

func TestImportRules(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	pkgs := map[string][]string{} // package → imports (non-test files)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			pkgs[rel] = append(pkgs[rel], p)
		}
		if _, ok := pkgs[rel]; !ok {
			pkgs[rel] = nil
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for pkg, imps := range pkgs {
		rules, ok := allowed[filepath.ToSlash(pkg)]
		if !ok {
			if strings.HasPrefix(pkg, "examples") || strings.HasPrefix(pkg, "sdk") {
				continue
			}
			t.Errorf("package %s has no import rule; add it to allowed in deps_test.go", pkg)
			continue
		}
		if slices.Contains(rules, "*") {
			continue
		}
		for _, imp := range imps {
			if !strings.Contains(strings.Split(imp, "/")[0], ".") && !strings.HasPrefix(imp, mod) {
				continue // standard library
			}
			target := strings.TrimPrefix(imp, mod)
			if !slices.ContainsFunc(rules, func(r string) bool { return target == r || strings.HasPrefix(target, r+"/") }) {
				t.Errorf("%s imports %s, which its layer may not (allowed: %v)", pkg, imp, rules)
			}
		}
	}
}

func TestPurePackagesReadNoClock(t *testing.T) {
	for _, pkg := range pure {
		files, _ := filepath.Glob(filepath.Join("..", pkg, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, banned := range []string{"time.Now(", "time.Since(", "math/rand", "os.Getenv(", "time.Sleep("} {
				if strings.Contains(string(b), banned) {
					t.Errorf("%s uses %s; pure packages take time and randomness as inputs", f, banned)
				}
			}
		}
	}
}
