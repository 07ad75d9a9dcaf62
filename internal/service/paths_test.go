package service_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store/sqlite/sqlitetest"
)

// pathEnv is a service whose artifact root is art and whose data
// directory is data, with pool default and a quota for project default.
type pathEnv struct {
	svc            *service.Service
	dir, art, data string
}

func newPathEnv(t *testing.T, roots service.DataRoots) pathEnv {
	t.Helper()
	dir := t.TempDir()
	st := sqlitetest.Open(t, dir)
	e := pathEnv{dir: dir, art: filepath.Join(dir, "data", "artifacts"), data: filepath.Join(dir, "data")}
	if err := os.MkdirAll(e.art, 0o755); err != nil {
		t.Fatal(err)
	}
	in, err := roots.Resolve(e.data)
	if err != nil {
		t.Fatal(err)
	}
	e.svc = service.New(service.Config{Store: st, ArtifactsRoot: e.art, InputRoots: in})
	pool := domain.Pool{Name: "default", Nodes: []domain.Node{{Name: "n1", CPUs: 8, Memory: 32 << 30}}}
	if _, _, err := e.svc.Pools.PutPool(context.Background(), admin, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Pools.SetQuota(context.Background(), admin, domain.Quota{Project: "default", Pool: "default",
		Guaranteed: pool.Capacity(), MaxPriority: domain.PriorityUrgent}); err != nil {
		t.Fatal(err)
	}
	return e
}

// fieldErr returns the message of the field error at path in err, failing
// the test when err is not a field error there.
func fieldErr(t *testing.T, err error, path string) string {
	t.Helper()
	var fe domain.FieldErrors
	if !errors.As(err, &fe) {
		t.Fatalf("error %v is not a field error at %s", err, path)
	}
	for _, f := range fe {
		if f.Path == path {
			return f.Message
		}
	}
	t.Fatalf("error %v has nothing at %s", err, path)
	return ""
}

// outputs.path lies in the job's own project directory under the artifact
// root, with {job_id} a directory of its own: the supervisor's files, the
// filesystem root, another project's checkpoints and prefix tricks are
// refused, with the allowed directory and an example.
func TestOutputPathMustLieInTheProjectsDirectory(t *testing.T) {
	e := newPathEnv(t, service.DataRoots{})
	ctx := context.Background()
	project := filepath.Join(e.art, "default")
	if err := os.MkdirAll(filepath.Join(project, "shared"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(t.TempDir(), filepath.Join(project, "link")); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		filepath.Join(e.data, "runs", "{job_id}"): "outside the directory of project default's outputs, " + project,
		"/{job_id}": "outside the directory",
		filepath.Join(e.art, "vision", "checkpoints", "{job_id}"): "outside the directory",
		filepath.Join(e.art, "default-evil", "x", "{job_id}"):     "outside the directory",
		filepath.Join(e.art, "{job_id}"):                          "outside the directory",
		filepath.Join(project, "{job_id}"):                        "add a directory before it",
		filepath.Join(project, "x", "12", "{job_id}"):             "the number 12",
		filepath.Join(project, "x", "run-{job_id}"):               "inside a directory name",
		filepath.Join(project, "link", "{job_id}"):                "symbolic link",
	} {
		_, _, err := e.svc.Jobs.Submit(ctx, admin, service.SubmitInput{Doc: []byte("name: a\nentrypoint: [true]\noutputs: {path: \"" + path + "\"}\n")})
		msg := fieldErr(t, err, "outputs.path")
		if !strings.Contains(msg, want) {
			t.Errorf("%s: %q, want it to say %q", path, msg, want)
		}
		if strings.Contains(want, "outside") && !strings.Contains(msg, filepath.Join(project, "a", "{job_id}")) {
			t.Errorf("%s: %q gives no example", path, msg)
		}
	}
	for _, path := range []string{filepath.Join(project, "shared", "{job_id}"), filepath.Join(project, "sweep", "{job_id}", "out")} {
		job, _, err := e.svc.Jobs.Submit(ctx, admin, service.SubmitInput{Doc: []byte("name: a\nentrypoint: [true]\noutputs: {path: \"" + path + "\"}\n")})
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if want := strings.ReplaceAll(path, "{job_id}", fmt.Sprint(job.ID)); job.OutputDir != want {
			t.Errorf("output directory %s, want %s", job.OutputDir, want)
		}
	}
}

// Inputs lie under the directories data_roots allows for the job's
// project or pool, compared by whole path elements and after resolving
// links; with none configured, inputs are refused with the way to allow
// them.
func TestInputsMustLieUnderDataRoots(t *testing.T) {
	ctx := context.Background()
	submit := func(e pathEnv, path string) error {
		_, _, err := e.svc.Jobs.Submit(ctx, admin, service.SubmitInput{Doc: []byte("name: a\nentrypoint: [true]\ninputs: [{name: d, path: \"" + path + "\", version: v1}]\n")})
		return err
	}
	none := newPathEnv(t, service.DataRoots{})
	if msg := fieldErr(t, submit(none, "/datasets/imagenet"), "inputs[0].path"); !strings.Contains(msg, "data_roots") {
		t.Errorf("no roots: %q, want the way to allow inputs", msg)
	}

	base := t.TempDir()
	datasets, vision, scratch := filepath.Join(base, "datasets"), filepath.Join(base, "vision"), filepath.Join(base, "scratch")
	outside := filepath.Join(base, "private")
	for _, d := range []string{filepath.Join(datasets, "imagenet"), vision, scratch, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(datasets, "escape")); err != nil {
		t.Fatal(err)
	}
	// A root configured through a link is resolved once: both spellings work.
	if err := os.Symlink(datasets, filepath.Join(base, "ds")); err != nil {
		t.Fatal(err)
	}
	e := newPathEnv(t, service.DataRoots{Default: []string{filepath.Join(base, "ds")},
		Projects: map[string][]string{"default": {vision}, "other": {outside}}, Pools: map[string][]string{"gpu": {scratch}}})
	for _, ok := range []string{filepath.Join(base, "ds", "imagenet"), filepath.Join(datasets, "imagenet"), filepath.Join(datasets, "not-yet", "v1"), vision, filepath.Join(vision, "coco")} {
		if err := submit(e, ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for path, want := range map[string]string{
		datasets + "-evil/x":                   "is outside the directories jobs of project default in pool default may read inputs from: " + filepath.Join(base, "ds") + ", " + vision,
		filepath.Join(scratch, "x"):            "is outside", // pool gpu's
		filepath.Join(outside, "x"):            "is outside", // project other's
		filepath.Join(datasets, "escape", "x"): "leads through a symbolic link to " + filepath.Join(outside, "x"),
		"/etc/shadow":                          "is outside",
	} {
		if msg := fieldErr(t, submit(e, path), "inputs[0].path"); !strings.Contains(msg, want) {
			t.Errorf("%s: %q, want it to say %q", path, msg, want)
		}
	}
}

// The data directory is never an allowed root, however it is reached, and
// an input inside it is refused even under a root that contains it.
func TestDataRootsNeverIncludeTheDataDirectory(t *testing.T) {
	base := t.TempDir()
	data := filepath.Join(base, "data")
	if err := os.MkdirAll(filepath.Join(data, "runs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(data, "runs"), filepath.Join(base, "innocent")); err != nil {
		t.Fatal(err)
	}
	for name, roots := range map[string]service.DataRoots{
		"the data directory": {Default: []string{data}},
		"inside it":          {Projects: map[string][]string{"vision": {filepath.Join(data, "runs")}}},
		"a link into it":     {Pools: map[string][]string{"gpu": {filepath.Join(base, "innocent")}}},
		"a trailing slash":   {Default: []string{data + "/"}},
	} {
		_, err := roots.Resolve(data)
		if err == nil || !strings.Contains(err.Error(), "data directory") || !strings.Contains(err.Error(), "data_roots.") {
			t.Errorf("%s: %v, want a refusal naming the key and the data directory", name, err)
		}
	}
	if _, err := (service.DataRoots{Default: []string{"datasets"}}).Resolve(data); err == nil || !strings.Contains(err.Error(), "data_roots.default[0]") {
		t.Errorf("relative root: %v", err)
	}
	e := newPathEnv(t, service.DataRoots{Default: []string{"/"}})
	_, _, err := e.svc.Jobs.Submit(context.Background(), admin, service.SubmitInput{Doc: []byte("name: a\nentrypoint: [true]\ninputs: [{name: d, path: \"" + filepath.Join(e.data, "master.key") + "\", version: v1}]\n")})
	if msg := fieldErr(t, err, "inputs[0].path"); !strings.Contains(msg, "data directory") {
		t.Errorf("input in the data directory under root /: %q", msg)
	}
}

// Re-runs and templates go through the same checks.
func TestRerunAndTemplatesCheckPaths(t *testing.T) {
	e := newPathEnv(t, service.DataRoots{})
	ctx := context.Background()
	job, _, err := e.svc.Jobs.Submit(ctx, admin, service.SubmitInput{Doc: []byte("name: a\nentrypoint: [true]\n")})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = e.svc.Jobs.Rerun(ctx, admin, job.ID, service.RerunInput{Set: []string{"outputs.path=" + filepath.Join(e.data, "runs", "{job_id}")}})
	fieldErr(t, err, "outputs.path")
	if _, _, err := e.svc.Templates.CreateTemplate(ctx, admin, "default", "t", []byte("name: t\nentrypoint: [true]\noutputs: {path: \"/{job_id}\"}\n")); err != nil {
		t.Fatal(err)
	}
	_, _, err = e.svc.Jobs.Submit(ctx, admin, service.SubmitInput{Template: "t"})
	fieldErr(t, err, "outputs.path")
	if _, _, err := e.svc.Templates.CreateTemplate(ctx, admin, "default", "u", []byte("name: u\nentrypoint: [true]\ninputs: [{name: d, path: /data/x, version: v1}]\n")); err != nil {
		t.Fatal(err)
	}
	_, _, err = e.svc.Jobs.Submit(ctx, admin, service.SubmitInput{Template: "u"})
	fieldErr(t, err, "inputs[0].path")
}
