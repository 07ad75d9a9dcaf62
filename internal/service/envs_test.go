package service_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store/sqlite"
)

func torchDef(image string) service.EnvDefinition {
	return service.EnvDefinition{Name: "pytorch", Image: image, PathPrefix: []string{"/opt/torch/bin"},
		Vars: map[string]string{"OMP_NUM_THREADS": "4"}, Check: []string{"python3", "-c", "import torch"},
		Description: "PyTorch"}
}

func (e auditEnv) register(t *testing.T, d service.EnvDefinition) domain.Environment {
	t.Helper()
	env, created, err := e.svc.Envs.RegisterEnv(context.Background(), admin, d)
	if err != nil || !created {
		t.Fatalf("RegisterEnv(%s) = created %v, %v", d.Name, created, err)
	}
	return env
}

// envMessage returns the message of the single field error on env.
func envMessage(t *testing.T, err error) string {
	t.Helper()
	var fe domain.FieldErrors
	if !errors.As(err, &fe) || len(fe) != 1 || fe[0].Path != "env" {
		t.Fatalf("err = %v, want one field error on env", err)
	}
	return fe[0].Message
}

func TestRegisterEnvVersionsAndIdenticalDefinitions(t *testing.T) {
	e := newAuditEnv(t)
	ctx := context.Background()
	v1 := e.register(t, torchDef("reg/torch:2.4"))
	if v1.Version != 1 || v1.Digest != domain.EnvDigest(v1) || v1.CreatedBy != "user:admin" {
		t.Fatalf("first version = %+v", v1)
	}
	// The same definition (a new description does not count) is version 1.
	same := torchDef("reg/torch:2.4")
	same.Description = "other words"
	got, created, err := e.svc.Envs.RegisterEnv(ctx, admin, same)
	if err != nil || created || got.Version != 1 || got.Description != "PyTorch" {
		t.Fatalf("identical RegisterEnv = %+v, created %v, %v; want version 1 unchanged", got, created, err)
	}
	v2 := e.register(t, torchDef("reg/torch:2.5"))
	if v2.Version != 2 {
		t.Fatalf("second definition got version %d, want 2", v2.Version)
	}
	// Going back to the first definition returns version 1 again.
	if got, created, err := e.svc.Envs.RegisterEnv(ctx, admin, torchDef("reg/torch:2.4")); err != nil || created || got.Version != 1 {
		t.Errorf("re-registering version 1's definition = %+v, created %v, %v", got, created, err)
	}
	if n := len(e.records(t, "env.write")); n != 2 {
		t.Errorf("%d env.write records, want 2 (identical registrations record nothing)", n)
	}
	// Once version 1 is deprecated, its definition cannot come back.
	if _, err := e.svc.Envs.DeprecateEnv(ctx, admin, "pytorch", 1, "CVE in base image"); err != nil {
		t.Fatal(err)
	}
	_, _, err = e.svc.Envs.RegisterEnv(ctx, admin, torchDef("reg/torch:2.4"))
	if !errors.Is(err, domain.ErrConflict) || !strings.Contains(err.Error(), "pytorch@1, which is deprecated (reason: CVE in base image)") {
		t.Errorf("registering a deprecated definition = %v, want a conflict naming pytorch@1 and the reason", err)
	}
}

func TestRegisterEnvValidation(t *testing.T) {
	e := newAuditEnv(t)
	tests := map[string]struct {
		edit  func(*service.EnvDefinition)
		paths []string
	}{
		"bad name":        {func(d *service.EnvDefinition) { d.Name = "PyTorch!" }, []string{"name"}},
		"host is builtin": {func(d *service.EnvDefinition) { d.Name = "host" }, []string{"name"}},
		"image spaces":    {func(d *service.EnvDefinition) { d.Image = "reg/torch 2.4" }, []string{"image"}},
		"relative prefix": {func(d *service.EnvDefinition) { d.PathPrefix = []string{"bin"} }, []string{"path_prefix[0]"}},
		"colon in prefix": {func(d *service.EnvDefinition) { d.PathPrefix = []string{"/a", "/b:/c"} }, []string{"path_prefix[1]"}},
		"unclean prefix":  {func(d *service.EnvDefinition) { d.PathPrefix = []string{"/a/../b/"} }, []string{"path_prefix[0]"}},
		"twice":           {func(d *service.EnvDefinition) { d.PathPrefix = []string{"/a", "/a"} }, []string{"path_prefix[1]"}},
		"PATH var":        {func(d *service.EnvDefinition) { d.Vars = map[string]string{"PATH": "/x"} }, []string{"vars.PATH"}},
		"reserved var":    {func(d *service.EnvDefinition) { d.Vars = map[string]string{"TRAINYARD_X": "1"} }, []string{"vars.TRAINYARD_X"}},
		"bad var name":    {func(d *service.EnvDefinition) { d.Vars = map[string]string{"1X": "1"} }, []string{"vars.1X"}},
		"empty check":     {func(d *service.EnvDefinition) { d.Check = []string{""} }, []string{"check[0]"}},
		"nothing defined": {func(d *service.EnvDefinition) { *d = service.EnvDefinition{Name: "empty"} }, []string{"image"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := torchDef("reg/torch:2.4")
			tc.edit(&d)
			_, _, err := e.svc.Envs.RegisterEnv(context.Background(), admin, d)
			if got := fieldPaths(t, err); !slices.Equal(got, tc.paths) {
				t.Errorf("field paths = %v, want %v (%v)", got, tc.paths, err)
			}
		})
	}
	if list, err := e.svc.Envs.ListEnvs(context.Background(), admin, ""); err != nil || len(list) != 0 {
		t.Errorf("after refused registrations: ListEnvs = %+v, %v; want none", list, err)
	}
}

func TestEnvAuthorization(t *testing.T) {
	e := newAuditEnv(t)
	ctx := context.Background()
	member := service.Principal{Subject: "alice", Projects: []domain.ProjectRole{{Project: "default", Role: domain.RoleMember}}}
	resAdmin := service.Principal{Subject: "ops", Roles: []domain.Role{domain.RoleResourceAdmin}}
	nobody := service.Principal{Subject: "nobody"}
	if _, _, err := e.svc.Envs.RegisterEnv(ctx, member, torchDef("reg/t:1")); !errors.Is(err, domain.ErrForbidden) ||
		!strings.Contains(err.Error(), "needs role admin or resource-admin") {
		t.Errorf("member registers: %v, want forbidden naming the roles", err)
	}
	if _, _, err := e.svc.Envs.RegisterEnv(ctx, resAdmin, torchDef("reg/t:1")); err != nil {
		t.Errorf("resource-admin registers: %v", err)
	}
	if _, err := e.svc.Envs.DeprecateEnv(ctx, member, "pytorch", 1, ""); !errors.Is(err, domain.ErrForbidden) {
		t.Errorf("member deprecates: %v, want forbidden", err)
	}
	if list, err := e.svc.Envs.ListEnvs(ctx, member, ""); err != nil || len(list) != 1 {
		t.Errorf("member lists: %+v, %v; want the one version", list, err)
	}
	if _, err := e.svc.Envs.GetEnv(ctx, member, "pytorch", 1); err != nil {
		t.Errorf("member shows: %v", err)
	}
	if _, err := e.svc.Envs.ListEnvs(ctx, nobody, ""); !errors.Is(err, domain.ErrForbidden) {
		t.Errorf("a user without a role lists: %v, want forbidden", err)
	}
	if n := len(e.records(t, "env.write")); n != 3 { // the version, then two denials
		t.Errorf("%d env.write records, want 3", n)
	}
}

func TestSubmitPinsAndRefusesEnvironments(t *testing.T) {
	e := newAuditEnv(t)
	ctx := context.Background()
	submit := func(env string) (domain.Job, error) {
		doc := "name: j\nentrypoint: [\"true\"]\nresources: {cpus: 1, memory: 1GiB}\n"
		if env != "" {
			doc += "env: " + env + "\n"
		}
		j, _, err := e.svc.Jobs.Submit(ctx, admin, service.SubmitInput{Doc: []byte(doc)})
		return j, err
	}
	// host resolves to the built-in host@1 even before it is stored.
	j, err := submit("")
	if err != nil || j.Spec.Env != "host@1" {
		t.Fatalf("default env: job env %q, %v; want host@1", j.Spec.Env, err)
	}
	if err := e.svc.Envs.EnsureHostEnv(ctx); err != nil {
		t.Fatal(err)
	}
	if j, err := submit("host"); err != nil || j.Spec.Env != "host@1" {
		t.Fatalf("env host: job env %q, %v; want host@1", j.Spec.Env, err)
	}
	if msg := envMessage(t, second(submit("pytorch@1"))); !strings.Contains(msg, "environment pytorch is not registered") ||
		!strings.Contains(msg, "trainyard env ls") {
		t.Errorf("unknown env: %q", msg)
	}
	e.register(t, torchDef("reg/torch:2.4"))
	j, err = submit("pytorch@1")
	if err != nil || j.Spec.Env != "pytorch@1" {
		t.Fatalf("pytorch@1: job env %q, %v", j.Spec.Env, err)
	}
	stored, err := e.st.GetJob(ctx, j.ID)
	if err != nil || stored.Spec.Env != "pytorch@1" || !strings.Contains(string(stored.SpecJSON), `"env":"pytorch@1"`) {
		t.Errorf("stored job env %q (%v); snapshot %s", stored.Spec.Env, err, stored.SpecJSON)
	}
	if msg := envMessage(t, second(submit("pytorch@7"))); !strings.Contains(msg, "has no version 7 (the latest is pytorch@1); use pytorch@1") {
		t.Errorf("missing version: %q", msg)
	}
	if msg := envMessage(t, second(submit("pytorch@1.0"))); !strings.Contains(msg, "not a version number") {
		t.Errorf("non-numeric version: %q", msg)
	}
	e.register(t, torchDef("reg/torch:2.5"))
	if _, err := e.svc.Envs.DeprecateEnv(ctx, admin, "pytorch", 1, "CVE in base image"); err != nil {
		t.Fatal(err)
	}
	want := "environment pytorch@1 is deprecated (reason: CVE in base image); use pytorch@2, or see trainyard env ls"
	if msg := envMessage(t, second(submit("pytorch@1"))); msg != want {
		t.Errorf("deprecated env:\n got %q\nwant %q", msg, want)
	}
	if msg := (domain.FieldError{Path: "env", Message: want}).Error(); !strings.HasPrefix(msg, "env: environment pytorch@1 is deprecated") {
		t.Errorf("error text %q", msg)
	}
	if j, err := submit("pytorch@2"); err != nil || j.Spec.Env != "pytorch@2" {
		t.Errorf("pytorch@2: %q, %v", j.Spec.Env, err)
	}
}

func second[T any](_ T, err error) error { return err }

func TestResolveEnvByName(t *testing.T) {
	e := newAuditEnv(t)
	ctx := context.Background()
	e.register(t, torchDef("reg/torch:2.4"))
	e.register(t, torchDef("reg/torch:2.5"))
	if got, err := e.svc.Envs.ResolveEnv(ctx, "pytorch"); err != nil || got.Ref() != "pytorch@2" {
		t.Errorf("ResolveEnv(pytorch) = %s, %v; want the latest, pytorch@2", got.Ref(), err)
	}
	if _, err := e.svc.Envs.DeprecateEnv(ctx, admin, "pytorch", 2, "broken CUDA"); err != nil {
		t.Fatal(err)
	}
	if got, err := e.svc.Envs.ResolveEnv(ctx, "pytorch"); err != nil || got.Ref() != "pytorch@1" {
		t.Errorf("ResolveEnv(pytorch) with 2 deprecated = %s, %v; want pytorch@1", got.Ref(), err)
	}
	list, err := e.svc.Envs.DeprecateEnv(ctx, admin, "pytorch", 0, "retired")
	if err != nil || len(list) != 2 || !list[0].Deprecated || list[0].DeprecatedReason != "retired" || list[1].DeprecatedReason != "broken CUDA" {
		t.Fatalf("DeprecateEnv(all) = %+v, %v", list, err)
	}
	msg := envMessage(t, second(e.svc.Envs.ResolveEnv(ctx, "pytorch")))
	if !strings.Contains(msg, "environment pytorch is deprecated (pytorch@2: reason: broken CUDA)") || !strings.Contains(msg, "every version of pytorch is deprecated") {
		t.Errorf("all deprecated: %q", msg)
	}
	// Deprecating again records nothing more.
	before := len(e.records(t, "env.write"))
	if _, err := e.svc.Envs.DeprecateEnv(ctx, admin, "pytorch", 1, "again"); err != nil {
		t.Fatal(err)
	}
	if got := len(e.records(t, "env.write")); got != before {
		t.Errorf("a repeated deprecation added %d audit records", got-before)
	}
	if _, err := e.svc.Envs.DeprecateEnv(ctx, admin, "pytorch", 9, ""); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("deprecating a missing version: %v, want not found", err)
	}
}

func TestEnsureHostEnv(t *testing.T) {
	e := newAuditEnv(t)
	ctx := context.Background()
	for range 2 {
		if err := e.svc.Envs.EnsureHostEnv(ctx); err != nil {
			t.Fatal(err)
		}
	}
	list, err := e.svc.Envs.ListEnvs(ctx, admin, "")
	if err != nil || len(list) != 1 || list[0].Ref() != "host@1" || list[0].Image != "" || list[0].Check != nil {
		t.Fatalf("environments after EnsureHostEnv twice = %+v, %v; want host@1 alone", list, err)
	}
	recs := e.records(t, "env.write")
	if len(recs) != 1 || recs[0].Actor != "system:bootstrap" || recs[0].Target != "env/host" {
		t.Errorf("env.write records = %+v, want one by system:bootstrap", recs)
	}
}

func TestRegisterEnvAuditsWhatRunsInEveryJob(t *testing.T) {
	e := newAuditEnv(t)
	e.register(t, torchDef("reg/torch:2.4"))
	recs := e.records(t, "env.write")
	if len(recs) == 0 {
		t.Fatal("registering an environment left no audit record")
	}
	after := recs[len(recs)-1].After
	for _, want := range []string{`"check":["python3","-c","import torch"]`, `"path_prefix":["/opt/torch/bin"]`} {
		if !strings.Contains(after, want) {
			t.Errorf("audit record after = %s, want it to hold %s", after, want)
		}
	}
}

// With the local executor, an environment whose path_prefix directory does
// not exist on the server's machine is refused, naming the field; one that
// exists is registered.
func TestRegisterEnvChecksLocalDirectories(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc := service.New(service.Config{Store: st, LocalEnvs: true})
	_, _, err = svc.Envs.RegisterEnv(context.Background(), admin, service.EnvDefinition{Name: "torch", PathPrefix: []string{"/opt/no-such-torch/bin"}})
	var fe domain.FieldErrors
	if !errors.As(err, &fe) || len(fe) != 1 || fe[0].Path != "path_prefix[0]" || !strings.Contains(fe[0].Message, "not a directory on the server's machine") {
		t.Fatalf("RegisterEnv with a missing directory = %v; want a field error on path_prefix[0]", err)
	}
	dir := t.TempDir()
	if _, created, err := svc.Envs.RegisterEnv(context.Background(), admin, service.EnvDefinition{Name: "torch", PathPrefix: []string{dir}}); err != nil || !created {
		t.Fatalf("RegisterEnv with an existing directory = created %v, %v", created, err)
	}
}
