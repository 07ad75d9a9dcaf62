package service_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/jobspec"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite/sqlitetest"
)

// trainTemplate has one required variable and two with defaults.
const trainTemplate = `description: a small training run
vars:
  profile: {default: dev, allowed: [dev, prod]}
  steps: {description: how many steps}
  cpus: "1"
name: train-${profile}
entrypoint: [python3, train.py, --steps, "${steps}"]
resources: {cpus: "${cpus}"}
labels: {profile: "${profile}"}
`

type templateEnv struct {
	svc *service.Service
	st  store.Store
}

func newTemplateEnv(t *testing.T) templateEnv {
	t.Helper()
	dir := t.TempDir()
	st := sqlitetest.Open(t, dir)
	svc := service.New(service.Config{Store: st, ArtifactsRoot: filepath.Join(dir, "artifacts"),
		Clock: clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))})
	pool := domain.Pool{Name: "default", Nodes: []domain.Node{{Name: "n1", CPUs: 8, Memory: 32 << 30}}}
	if _, _, err := svc.Pools.PutPool(context.Background(), admin, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Pools.SetQuota(context.Background(), admin, domain.Quota{Project: "vision", Pool: "default",
		Guaranteed: pool.Capacity(), MaxPriority: domain.PriorityUrgent}); err != nil {
		t.Fatal(err)
	}
	return templateEnv{svc: svc, st: st}
}

func inProject(subject, project string, role domain.Role) service.Principal {
	return service.Principal{Subject: subject, Projects: []domain.ProjectRole{{Project: project, Role: role}}}
}

func (e templateEnv) create(t *testing.T, p service.Principal, project, name, doc string) (service.TemplateInfo, bool) {
	t.Helper()
	info, created, err := e.svc.Templates.CreateTemplate(context.Background(), p, project, name, []byte(doc))
	if err != nil {
		t.Fatalf("CreateTemplate(%q, %q): %v", project, name, err)
	}
	return info, created
}

func TestCreateTemplateVersionsAndAudit(t *testing.T) {
	e := newTemplateEnv(t)
	ctx := context.Background()
	alice := inProject("alice", "vision", domain.RoleMember)
	info, created := e.create(t, alice, "vision", "train", trainTemplate)
	if !created || info.Version != 1 || info.Project != "vision" || info.CreatedBy != "user:alice" || len(info.Vars) != 3 {
		t.Fatalf("first create = %+v, created %v", info, created)
	}
	// The same bytes again: no new version, and no audit record.
	again, created := e.create(t, alice, "vision", "train", trainTemplate)
	if created || again.Version != 1 || again.Hash != info.Hash {
		t.Errorf("identical create = version %d created %v, want version 1 not created", again.Version, created)
	}
	v2, created := e.create(t, alice, "vision", "train", trainTemplate+"# tuned\n")
	if !created || v2.Version != 2 {
		t.Errorf("changed create = version %d created %v, want version 2", v2.Version, created)
	}
	// Versions are immutable: version 1 still reads as it was stored.
	got, err := e.svc.Templates.GetTemplate(ctx, alice, "vision", "train", 1)
	if err != nil || string(got.Body) != trainTemplate {
		t.Errorf("version 1 = %q, %v", got.Body, err)
	}
	recs, err := e.st.ListAudit(ctx, store.AuditFilter{Action: "template.write"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0].Target != "template/vision/train" || recs[1].Actor != "user:alice" ||
		!strings.Contains(recs[1].Before, `"version":1`) || !strings.Contains(recs[1].After, `"version":2`) {
		t.Errorf("audit records = %+v, want two template.write records with before/after versions", recs)
	}

	// A viewer may read but not create; the denial is audited.
	vic := inProject("vic", "vision", domain.RoleViewer)
	_, _, err = e.svc.Templates.CreateTemplate(ctx, vic, "vision", "other", []byte(trainTemplate))
	if !errors.Is(err, domain.ErrForbidden) || !strings.Contains(err.Error(), "member or lead") {
		t.Errorf("viewer create = %v, want forbidden naming member or lead", err)
	}
	if _, err := e.svc.Templates.GetTemplate(ctx, vic, "vision", "train", 0); err != nil {
		t.Errorf("viewer read: %v", err)
	}
	// A member of another project may read it too (any role reads), but not write there.
	bob := inProject("bob", "audio", domain.RoleMember)
	if list, err := e.svc.Templates.ListTemplates(ctx, bob, ""); err != nil || len(list) != 1 || list[0].Version != 2 || list[0].Body != nil {
		t.Errorf("ListTemplates = %+v, %v; want train v2 without its body", list, err)
	}
	if _, _, err := e.svc.Templates.CreateTemplate(ctx, bob, "vision", "train", []byte(trainTemplate)); !errors.Is(err, domain.ErrForbidden) {
		t.Errorf("member of audio creating in vision = %v, want forbidden", err)
	}
	if _, err := e.svc.Templates.ListTemplates(ctx, service.Principal{Subject: "nobody"}, ""); !errors.Is(err, domain.ErrForbidden) {
		t.Errorf("user without a role listing = %v, want forbidden", err)
	}
}

func TestCreateTemplateRefusals(t *testing.T) {
	e := newTemplateEnv(t)
	ctx := context.Background()
	tests := map[string]struct {
		project, name, doc string
		path               string
		words              []string
	}{
		"credential": {"vision", "t", "name: x\nentrypoint: [a]\nenv_vars: {HF_TOKEN: hf_live_123}\n", "env_vars.HF_TOKEN",
			[]string{"trainyard secret set HF_TOKEN", "secrets: [HF_TOKEN]"}},
		"project mismatch": {"vision", "t", "name: x\nproject: audio\nentrypoint: [a]\n", "project", []string{"--project audio"}},
		"bad name":         {"vision", "Bad_Name", "name: x\nentrypoint: [a]\n", "name", []string{"template name"}},
		"invalid with defaults": {"vision", "t", "vars: {g: two}\nname: x\nentrypoint: [a]\nresources: {gpus: \"${g}\"}\n", "resources.gpus",
			[]string{"whole number", "${g}", "defaults"}},
		"unknown field": {"vision", "t", "vars: {s: {}}\nname: x\nentrypoint: [\"${s}\"]\nresources: {gpu: 1}\n", "resources.gpu",
			[]string{`did you mean "gpus"`}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, _, err := e.svc.Templates.CreateTemplate(ctx, admin, tc.project, tc.name, []byte(tc.doc))
			var fe domain.FieldErrors
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want field errors", err)
			}
			found := false
			for _, f := range fe {
				ok := f.Path == tc.path
				for _, w := range tc.words {
					ok = ok && strings.Contains(f.Message, w)
				}
				found = found || ok
			}
			if !found {
				t.Errorf("errors = %v, want %s with %q", fe, tc.path, tc.words)
			}
		})
	}
	if list, _ := e.svc.Templates.ListTemplates(ctx, admin, ""); len(list) != 0 {
		t.Errorf("refused templates were stored: %+v", list)
	}
	// The document's project is the default project of the template.
	info, _ := e.create(t, admin, "", "t", "name: x\nproject: audio\nentrypoint: [a]\n")
	if info.Project != "audio" {
		t.Errorf("project = %q, want audio from the document", info.Project)
	}
	info, _ = e.create(t, admin, "", "u", "name: x\nentrypoint: [a]\n")
	if info.Project != jobspec.DefaultProject {
		t.Errorf("project = %q, want %s", info.Project, jobspec.DefaultProject)
	}
}

func TestSubmitFromTemplate(t *testing.T) {
	e := newTemplateEnv(t)
	ctx := context.Background()
	alice := inProject("alice", "vision", domain.RoleMember)
	e.create(t, alice, "vision", "train", trainTemplate)
	e.create(t, alice, "vision", "train", strings.Replace(trainTemplate, "train.py", "train2.py", 1))

	job, created, err := e.svc.Jobs.Submit(ctx, alice, service.SubmitInput{Template: "train@1", Vars: map[string]string{"steps": "10"}})
	if err != nil || !created {
		t.Fatalf("Submit from train@1: %v", err)
	}
	got, err := e.svc.Jobs.Get(ctx, alice, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	spec := got.Job.Spec
	if spec.Name != "train-dev" || spec.Project != "vision" || spec.Entrypoint[1] != "train.py" || spec.Entrypoint[3] != "10" ||
		spec.Labels[jobspec.TemplateLabel] != "train@1" || spec.Labels["profile"] != "dev" {
		t.Errorf("spec from train@1 = %+v", spec)
	}
	job, _, err = e.svc.Jobs.Submit(ctx, alice, service.SubmitInput{Template: "train", Project: "vision",
		Vars: map[string]string{"steps": "99", "profile": "prod"}, Set: []string{"params.lr=0.3"}})
	if err != nil {
		t.Fatal(err)
	}
	got, _ = e.svc.Jobs.Get(ctx, alice, job.ID)
	if spec := got.Job.Spec; spec.Name != "train-prod" || spec.Entrypoint[1] != "train2.py" || spec.Params["lr"] != "0.3" ||
		spec.Labels[jobspec.TemplateLabel] != "train@2" {
		t.Errorf("spec from train (latest) = %+v", spec)
	}
	// A re-run of a template's job keeps its provenance label.
	again, _, err := e.svc.Jobs.Rerun(ctx, alice, job.ID, service.RerunInput{})
	if err != nil || again.Spec.Labels[jobspec.TemplateLabel] != "train@2" {
		t.Errorf("rerun of a template's job: %v, labels %v", err, again.Spec.Labels)
	}
	// ... and may not change it.
	_, _, err = e.svc.Jobs.Rerun(ctx, alice, job.ID, service.RerunInput{Set: []string{"labels.trainyard.template=train@1"}})
	var fe domain.FieldErrors
	if !errors.As(err, &fe) || len(fe) != 1 || fe[0].Path != "labels.trainyard.template" || !strings.Contains(fe[0].Message, `"train@2"`) {
		t.Errorf("rerun changing the template label: %v; want a field error naming the label and the kept value", err)
	}

	tests := map[string]struct {
		p     service.Principal
		in    service.SubmitInput
		path  string
		words []string
		kind  error
	}{
		"required unset": {alice, service.SubmitInput{Template: "train"}, "vars.steps", []string{"required (how many steps)", "--set steps="}, nil},
		"unknown var":    {alice, service.SubmitInput{Template: "train", Vars: map[string]string{"steps": "1", "step": "2"}}, "vars.step", []string{`did you mean "steps"`}, nil},
		"not allowed":    {alice, service.SubmitInput{Template: "train", Vars: map[string]string{"steps": "1", "profile": "test"}}, "vars.profile", []string{"dev, prod"}, nil},
		"other project":  {alice, service.SubmitInput{Template: "train", Vars: map[string]string{"steps": "1"}, Set: []string{"project=audio"}}, "project", []string{"belongs to project vision"}, nil},
		"forged label": {alice, service.SubmitInput{Template: "train", Vars: map[string]string{"steps": "1"}, Set: []string{"labels.trainyard.template=x@9"}},
			"labels.trainyard.template", []string{"set by the platform"}, nil},
		"both":         {alice, service.SubmitInput{Template: "train", Doc: []byte("name: x\nentrypoint: [a]\n")}, "spec", []string{"exclude each other"}, nil},
		"vars no tmpl": {alice, service.SubmitInput{Doc: []byte("name: x\nentrypoint: [a]\n"), Vars: map[string]string{"a": "b"}}, "vars", []string{"only for a template"}, nil},
		"forged by spec": {alice, service.SubmitInput{Doc: []byte("name: x\nentrypoint: [a]\nlabels: {trainyard.template: train@1}\n")},
			"labels.trainyard.template", []string{"set by the platform"}, nil},
		"missing":        {alice, service.SubmitInput{Template: "nope"}, "", []string{"no template is named nope"}, domain.ErrNotFound},
		"no version":     {alice, service.SubmitInput{Template: "train@7", Project: "vision"}, "", []string{"has no version 7; the latest is 2"}, domain.ErrNotFound},
		"viewer submits": {inProject("vic", "vision", domain.RoleViewer), service.SubmitInput{Template: "train", Vars: map[string]string{"steps": "1"}}, "", []string{"member or lead"}, domain.ErrForbidden},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, _, err := e.svc.Jobs.Submit(ctx, tc.p, tc.in)
			if err == nil {
				t.Fatal("Submit succeeded")
			}
			if tc.kind != nil {
				if !errors.Is(err, tc.kind) {
					t.Errorf("err = %v, want %v", err, tc.kind)
				}
				for _, w := range tc.words {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("err = %v, want %q", err, w)
					}
				}
				return
			}
			var fe domain.FieldErrors
			if !errors.As(err, &fe) {
				t.Fatalf("err = %v, want field errors", err)
			}
			for _, f := range fe {
				if f.Path != tc.path {
					continue
				}
				ok := true
				for _, w := range tc.words {
					ok = ok && strings.Contains(f.Message, w)
				}
				if ok {
					return
				}
			}
			t.Errorf("errors = %v, want %s with %q", fe, tc.path, tc.words)
		})
	}

	// The same name in two projects needs a project.
	e.create(t, admin, "audio", "train", trainTemplate)
	_, _, err = e.svc.Jobs.Submit(ctx, alice, service.SubmitInput{Template: "train", Vars: map[string]string{"steps": "1"}})
	fe = nil
	if !errors.As(err, &fe) || fe[0].Path != "project" || !strings.Contains(fe[0].Message, "audio, vision") {
		t.Errorf("ambiguous name: err = %v, want project required naming audio, vision", err)
	}
}
