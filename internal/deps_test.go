// Package internal_test enforces the one-way import graph: each package may
// import only what its layer allows (see DESIGN.md §2–3). A violation fails
// the build's tests with the offending import named.
package internal_test

import (
	"debug/elf"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
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
	"internal/lazyre":                {}, // patterns compiled on first use: a leaf like the standard library
	"internal/api/apitypes":          {},
	"internal/scheduler/schedtest":   {"internal/scheduler", "internal/domain"},
	"internal/simulate":              {"internal/scheduler", "internal/domain", "internal/yamlcheck", "go.yaml.in/yaml/v3", "internal/lazyre"},
	"internal/authz":                 {"internal/domain"},
	"internal/cost":                  {"internal/domain"},
	"internal/audit":                 {"internal/domain"},
	"internal/secrets":               {},
	"internal/scheduler":             {"internal/domain"},
	"internal/scheduler/incremental": {"internal/scheduler", "internal/domain"},
	"internal/yamlcheck":             {"internal/domain", "go.yaml.in/yaml/v3", "internal/lazyre"},
	"internal/jobspec":               {"internal/domain", "internal/yamlcheck", "go.yaml.in/yaml/v3", "internal/lazyre"},
	"internal/logs":                  {"internal/domain"},
	"internal/diagnose":              {"internal/domain", "internal/logs", "internal/lazyre"},
	"internal/store":                 {"internal/domain", "internal/cost"},
	"internal/store/storetest":       {"internal/store", "internal/domain"},
	"internal/leader":                {"internal/store"},
	"internal/store/column":          {"internal/store", "internal/domain"},
	// pgtype only for its scanner interfaces (sqlstore.NullInt), so that
	// shared scan targets take pgx's fast path rather than sql.Scanner.
	"internal/store/sqlstore":        {"internal/store", "internal/store/column", "internal/domain", "internal/audit", "github.com/jackc/pgx/v5/pgtype"},
	"internal/store/postgres":        {"internal/store", "internal/store/column", "internal/store/sqlstore", "internal/domain", "internal/audit", "github.com/jackc/pgx/v5"},
	"internal/store/postgres/pgtest": {"github.com/jackc/pgx/v5"},
	"internal/store/sqlite":          {"internal/store", "internal/store/column", "internal/store/sqlstore", "internal/domain", "internal/audit", "modernc.org/sqlite"},
	"internal/executor":              {"internal/domain"},
	"internal/executor/executortest": {"internal/executor", "internal/domain", "internal/logs"},
	"internal/executor/local/cgroup": {"golang.org/x/sys"},
	"internal/executor/router":       {"internal/executor", "internal/domain"},
	"internal/executor/kubernetes":   {"internal/executor", "internal/domain", "internal/logs", "internal/executor/local", "k8s.io/api", "k8s.io/apimachinery", "k8s.io/client-go", "golang.org/x/sys"}, // x/sys: signal names
	// The test engine: starts a control plane and adds kwok nodes.
	"internal/executor/kubernetes/kubetest": {"k8s.io/api", "k8s.io/apimachinery", "k8s.io/client-go"},
	"internal/executor/local/userdb":        {},
	"internal/agent":                        {"internal/domain", "internal/logs", "internal/artifacts", "internal/api/apitypes"}, // the in-job agent: HTTP to the API, never the client or the server
	"internal/executor/local":               {"internal/executor", "internal/domain", "internal/logs", "internal/artifacts", "internal/codepkg", "internal/executor/local/cgroup", "golang.org/x/sys"},
	"internal/service":                      {"internal/executor", "internal/artifacts", "internal/domain", "internal/jobspec", "internal/store", "internal/logs", "internal/clock", "internal/scheduler", "internal/authz", "internal/audit", "internal/secrets", "internal/diagnose", "internal/blob", "internal/codepkg", "internal/cost", "internal/tier", "internal/lazyre"},
	"internal/imagepin":                     {"internal/domain", "github.com/google/go-containerregistry"}, // asks registries for digests; the server hands it to service as service.ImagePinner
	"internal/metrics/sample":               {},
	"internal/metrics":                      {"internal/domain", "internal/metrics/sample", "internal/cost", "github.com/prometheus"},
	"internal/alerts":                       {"internal/domain", "internal/lazyre"},
	"internal/artifacts":                    {"internal/domain"},
	"internal/observe":                      {"internal/alerting", "internal/alerts", "internal/control", "internal/domain", "internal/metrics"},
	"internal/alerting":                     {"internal/alerts", "internal/domain", "internal/store", "internal/clock", "internal/cost"},
	"internal/alerting/smtptest":            {}, // an SMTP receiver for tests
	"internal/blob":                         {},
	"internal/codepkg":                      {},
	"internal/blob/blobtest":                {"internal/blob"},
	"internal/store/sqlite/sqlitetest":      {"internal/store/sqlite"},
	"internal/blob/fs":                      {"internal/blob", "golang.org/x/sys"},
	"internal/blob/s3":                      {"internal/blob", "github.com/minio/minio-go/v7"},
	"internal/tier":                         {"internal/blob", "internal/executor", "internal/domain"},
	"internal/control":                      {"internal/domain", "internal/scheduler", "internal/store", "internal/executor", "internal/logs", "internal/clock", "internal/blob", "internal/codepkg", "internal/cost", "internal/metrics/sample", "internal/tier"},
	"internal/api":                          {"internal/service", "internal/api/apitypes", "internal/domain"},
	"internal/web":                          {"internal/service", "internal/authz", "internal/domain"}, // the pages: the service, as the API, and authz to offer only the buttons it would allow
	"internal/client":                       {"internal/api/apitypes"},
	"internal/cli":                          {"internal/client", "internal/api/apitypes", "internal/jobspec", "internal/domain", "internal/simulate", "internal/codepkg", "github.com/spf13/cobra", "go.yaml.in/yaml/v3", "golang.org/x/term"},
	"cmd/trainyard":                         {"*"},
	"cmd/trainyard-shim":                    {"internal/executor/local"},

	// The batch step is the local executor's supervisor: its launch
	// record and files.
	"internal/executor/slurm": {"internal/executor", "internal/domain", "internal/executor/local"},
	// The test engine: starts munged, slurmctld and slurmd.
	"internal/executor/slurm/slurmtest": {},
}

// pure packages may not read the clock, randomness or the environment.
var pure = []string{"internal/domain", "internal/scheduler", "internal/scheduler/incremental", "internal/cost"}

// Layers that decide rather than act — the scheduler (and the packages
// below it), the domain types, authorization, pricing and the alert
// engine — take the world as input: they reach no files, processes,
// network or clock of their own, and share no memory between goroutines
// except where a file says why. TestDecidingLayersStdlib checks every non-test file of these
// packages, by its imports and its calls, against the lists below.
var decidingLayers = []string{"internal/scheduler", "internal/domain", "internal/authz", "internal/alerts", "internal/cost"}

// layerBannedImports are the standard-library packages the deciding
// layers may not import, each with what to do instead.
var layerBannedImports = map[string]string{
	"os":       "take what it reads (files, environment, arguments) from the caller, as a value or an interface",
	"net":      "leave connections to the server's wiring (internal/service, internal/api, cmd); take an interface",
	"net/http": "leave HTTP to the server's wiring (internal/api, internal/alerting); take an interface or an *http.Client from the caller",
	"os/exec":  "leave processes to the executors (internal/executor/...)",
	"syscall":  "leave the operating system to the executors (internal/executor/...)",
	"unsafe":   "use ordinary Go; these layers need no pointer arithmetic",
}

// layerClockFuncs are the functions of package time that read the wall
// clock; the deciding layers take the time (a now argument, a Now func)
// from their caller instead.
var layerClockFuncs = []string{"Now", "Since", "Until"}

// layerImportAllowed lists, by file, the banned imports it may use and
// why: a real need of the design, not a shortcut. An entry no longer
// needed fails the test, so the list only shrinks.
var layerImportAllowed = map[string]map[string]string{
	"internal/alerts/channel.go": {"net/http": "the webhook and Slack channels post notifications over HTTP, with the *http.Client the server passes to NewRoutes; the engine (engine.go) decides which alerts fire without it"},
}

// layerSyncAllowed lists the files of the deciding layers that may import
// sync (or sync/atomic), and why. Everything else in those layers runs
// on its caller's goroutine.
var layerSyncAllowed = map[string]string{
	"internal/alerts/dispatcher.go": "each channel's delivery queue is filled by Submit on the caller's goroutine and drained by that channel's Run goroutine",
}

func TestDecidingLayersStdlib(t *testing.T) {
	used := map[string]bool{} // "file import" entries of the allowlists that were needed
	for _, dir := range decidingLayers {
		var files []string
		err := filepath.WalkDir(filepath.Join("..", dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			rel, _ := filepath.Rel("..", path)
			rel = filepath.ToSlash(rel)
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				line := fset.Position(imp.Pos()).Line
				if p == "sync" || p == "sync/atomic" {
					if _, ok := layerSyncAllowed[rel]; ok {
						used[rel+" sync"] = true
						continue
					}
					t.Errorf("%s:%d: imports %s: the deciding layers run on their caller's goroutine and share no memory;"+
						" keep state per call (or in a value the caller owns), or, if the file must synchronise goroutines, add it to layerSyncAllowed in deps_test.go with the reason", rel, line, p)
					continue
				}
				fix, banned := layerBannedImports[p]
				if !banned {
					continue
				}
				if _, ok := layerImportAllowed[rel][p]; ok {
					used[rel+" "+p] = true
					continue
				}
				t.Errorf("%s:%d: imports %s, which the %s layer may not: %s."+
					" If this is a real need of the design, allowlist it in layerImportAllowed in deps_test.go with the reason", rel, line, p, dir, fix)
			}
			for _, v := range bannedUses(t, path, "time", layerClockFuncs) {
				t.Errorf("%s:%d: uses %s, which reads the wall clock: take the time from the caller instead (a now argument, or a Now func in the options, as alerts.DispatcherOptions.Now)", rel, v.line, v.what)
			}
		}
	}
	for f, imps := range layerImportAllowed {
		for imp, why := range imps {
			if !used[f+" "+imp] {
				t.Errorf("%s is allowlisted for %s (%s) but no longer imports it: remove the entry from layerImportAllowed", f, imp, why)
			}
		}
	}
	for f, why := range layerSyncAllowed {
		if !used[f+" sync"] {
			t.Errorf("%s is allowlisted for sync (%s) but no longer imports it: remove the entry from layerSyncAllowed", f, why)
		}
	}
}

// shimBanned are the packages the attempt supervisor binary may not link,
// even indirectly: each start of an attempt pays for every package
// initialiser it links, and every running attempt for its memory.
var shimBanned = []string{"internal/store", "internal/api", "internal/service", "internal/control", "internal/cli", "internal/metrics",
	"github.com/minio", "github.com/prometheus", "github.com/spf13/cobra", "modernc.org/sqlite", "github.com/jackc/pgx"}

// shimBannedStd are the standard packages the attempt supervisor may not
// link: with cgo on (the default of go build and go install), each makes
// it a dynamically linked binary that loads the C library at every start.
var shimBannedStd = []string{"os/user", "net", "runtime/cgo", "plugin"}

// TestShimLinksLittle: cmd/trainyard-shim reaches none of shimBanned
// through the module's packages, links none of shimBannedStd, and builds,
// as go build and go install make it, into a static binary.
func TestShimLinksLittle(t *testing.T) {
	t.Run("std", func(t *testing.T) {
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}: {{join .Imports \" \"}}", mod+"cmd/trainyard-shim").Output()
		if err != nil {
			t.Fatalf("go list: %v", err)
		}
		for line := range strings.Lines(string(out)) {
			pkg, imps, _ := strings.Cut(strings.TrimSpace(line), ": ")
			for _, imp := range strings.Fields(imps) {
				if slices.Contains(shimBannedStd, imp) {
					t.Errorf("cmd/trainyard-shim links %s (imported by %s); the supervisor must stay a static binary: move what needs it out of the supervisor's packages", imp, pkg)
				}
			}
		}
	})
	t.Run("static", func(t *testing.T) {
		bin := filepath.Join(t.TempDir(), "trainyard-shim")
		if out, err := exec.Command("go", "build", "-o", bin, mod+"cmd/trainyard-shim").CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
		f, err := elf.Open(bin)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("cmd/trainyard-shim builds into a dynamically linked binary (it has %v); it must link no C code", p.Type)
			}
		}
	})

	pkgs := moduleImports(t)
	seen := map[string]string{"cmd/trainyard-shim": ""} // package → the one that imports it
	queue := []string{"cmd/trainyard-shim"}
	reported := map[string]bool{}
	for len(queue) > 0 {
		pkg := queue[0]
		queue = queue[1:]
		for _, imp := range pkgs[pkg] {
			target := strings.TrimPrefix(imp, mod)
			for _, b := range shimBanned {
				if (target == b || strings.HasPrefix(target, b+"/")) && !reported[target] {
					reported[target] = true
					chain := []string{target}
					for p := pkg; p != ""; p = seen[p] {
						chain = append(chain, p)
					}
					slices.Reverse(chain)
					t.Errorf("cmd/trainyard-shim links %s (%s); the supervisor must stay small: move what it needs out of that package", imp, strings.Join(chain, " → "))
				}
			}
			if _, ok := seen[target]; !ok && strings.HasPrefix(imp, mod) {
				seen[target] = pkg
				queue = append(queue, target)
			}
		}
	}
}

func TestImportRules(t *testing.T) {
	for pkg, imps := range moduleImports(t) {
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

// moduleImports returns, for every package of the module (relative to its
// root), what its non-test files import.
func moduleImports(t *testing.T) map[string][]string {
	t.Helper()
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
		if d.IsDir() && path != root {
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir // a module of its own (tools/kube)
			}
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
	return pkgs
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

// Nothing reads a job's files but the executor: control, service, api and
// cli reach job trees (outputs, checkpoints, logs) only through the
// executor contract (executor.Files, executor.Outputs), so that an
// executor whose jobs leave their files elsewhere (object storage, a
// cluster's volumes) serves them without the server ever seeing them.
// Packages below internal/executor and internal/blob, and cmd/trainyard
// wiring them, are where files are touched.

// jobTreeArtifacts are the parts of package artifacts that open or change
// a job's tree; its pure parts (retention plans, policies) stay usable.
var jobTreeArtifacts = []string{"OpenDir", "Manifest", "MakeReadOnly", "Dir"}

// osFileFuncs are the functions of package os that reach files.
var osFileFuncs = []string{"Open", "OpenFile", "OpenRoot", "OpenInRoot", "Create", "CreateTemp", "ReadFile", "WriteFile",
	"ReadDir", "Stat", "Lstat", "Remove", "RemoveAll", "Rename", "Mkdir", "MkdirAll", "MkdirTemp", "Chmod", "Chown",
	"Lchown", "Chtimes", "Symlink", "Link", "Readlink", "Truncate", "DirFS", "CopyFS"}

// osAllowed lists, by file, why it may call osFileFuncs: it touches only
// the server's own state, never a job's tree. An entry no longer needed
// fails the test, so the list only shrinks.
var osAllowed = map[string]string{
	"internal/service/auditwitness.go": "the audit witness file: the server's own record of the audit log's head, outside the store",
	"internal/service/envs.go":         "the path_prefix check: an environment's install directories on the server's machine (Config.LocalEnvs), not a job's files",
	"internal/service/paths.go":        "the outputs.path check: links among the directories of the project's artifact directory that already exist above {job_id}, which the server makes; no job's tree (data_roots are resolved with filepath)",
	"internal/control/artifacts.go":    "the outputs-pending markers, in the server's own state directory (Config.StateDir); jobs' outputs are read through executor.Outputs",
}

// artifactsAllowed lists, by file, why it may use jobTreeArtifacts; the
// same rules as osAllowed.
var artifactsAllowed = map[string]string{}

func TestJobTreesOnlyThroughTheExecutor(t *testing.T) {
	type rule struct {
		pkgPath string   // the import path the rule is about
		names   []string // its banned identifiers
		dirs    []string // the packages it applies to
		allowed map[string]string
	}
	rules := []rule{
		{mod + "internal/artifacts", jobTreeArtifacts, []string{"internal/control", "internal/service", "internal/api", "internal/cli"}, artifactsAllowed},
		{"os", osFileFuncs, []string{"internal/control", "internal/service", "internal/api"}, osAllowed},
	}
	for _, r := range rules {
		used := map[string]bool{}
		for _, dir := range r.dirs {
			var files []string
			err := filepath.WalkDir(filepath.Join("..", dir), func(path string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
					files = append(files, path)
				}
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, path := range files {
				rel, _ := filepath.Rel("..", path)
				rel = filepath.ToSlash(rel)
				for _, v := range bannedUses(t, path, r.pkgPath, r.names) {
					if _, ok := r.allowed[rel]; ok {
						used[rel] = true
						continue
					}
					t.Errorf("%s:%d: %s: nothing but the executor touches a job's files; go through executor.Files / Outputs (Config.Files in the service)."+
						" If this file touches only the server's own state, never a job's tree, allowlist it in deps_test.go with the reason", rel, v.line, v.what)
				}
			}
		}
		for f, why := range r.allowed {
			if !used[f] {
				t.Errorf("%s is allowlisted for %s (%s) but no longer uses it: remove the entry", f, r.pkgPath, why)
			}
		}
	}
}

// bannedUse is one use of a banned identifier.
type bannedUse struct {
	line int
	what string
}

// bannedUses finds, in the Go file path, the uses of the identifiers
// names of the package imported as pkgPath, under whatever name it is
// imported (a dot import is a use in itself: it hides them).
func bannedUses(t *testing.T, path, pkgPath string, names []string) []bannedUse {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []bannedUse
	local := ""
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p != pkgPath {
			continue
		}
		switch {
		case imp.Name == nil:
			local = pkgPath[strings.LastIndex(pkgPath, "/")+1:]
		case imp.Name.Name == "_":
		case imp.Name.Name == ".":
			out = append(out, bannedUse{fset.Position(imp.Pos()).Line, "a dot import of " + pkgPath})
		default:
			local = imp.Name.Name
		}
	}
	if local == "" {
		return out
	}
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		// Obj is set when the name is declared in the file (a variable
		// shadowing the package), nil for a package name.
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == local && id.Obj == nil && slices.Contains(names, sel.Sel.Name) {
			what := local + "." + sel.Sel.Name
			if local != pkgPath[strings.LastIndex(pkgPath, "/")+1:] {
				what += " (" + local + " is " + pkgPath + ")"
			}
			out = append(out, bannedUse{fset.Position(sel.Pos()).Line, what})
		}
		return true
	})
	return out
}
