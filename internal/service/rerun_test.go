package service_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"maps"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"trainyard/internal/blob/fs"
	"trainyard/internal/domain"
	"trainyard/internal/jobspec"
	"trainyard/internal/service"
	"trainyard/internal/store"
)

// rerunSpec uses a shell entrypoint, a relative-free workdir and several
// fields a re-run must carry over unchanged.
const rerunSpec = `name: lr-sweep
env: pytorch-2.4@1
entrypoint: echo lr=$TRAINYARD_PARAM_LR
workdir: /srv/code
params: {lr: "0.1", epochs: 3}
env_vars: {NCCL_DEBUG: WARN}
labels: {team: vision}
resources: {cpus: 1, memory: 1GiB}
policy: {timeout: 1h, retries: 1, reentrant: true, priority: high}
health: {stall: 10m}
`

// newRerunEnv is newAuditEnv with environments pytorch-2.4@1 and
// pytorch-2.5@1 registered.
func newRerunEnv(t *testing.T) auditEnv {
	t.Helper()
	e := newAuditEnv(t)
	for _, name := range []string{"pytorch-2.4", "pytorch-2.5"} {
		if _, _, err := e.svc.Envs.RegisterEnv(context.Background(), admin, service.EnvDefinition{Name: name, PathPrefix: []string{"/opt/" + name + "/bin"}}); err != nil {
			t.Fatalf("RegisterEnv(%s): %v", name, err)
		}
	}
	return e
}

func submitJob(t *testing.T, svc *service.Service, p service.Principal, doc string) domain.Job {
	t.Helper()
	job, created, err := svc.Jobs.Submit(context.Background(), p, service.SubmitInput{Doc: []byte(doc)})
	if err != nil || !created {
		t.Fatalf("Submit: created=%v, %v", created, err)
	}
	return job
}

func jobCount(t *testing.T, st store.Store) int {
	t.Helper()
	jobs, err := st.ListJobs(context.Background(), store.JobFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return len(jobs)
}

func TestRerunUnchangedReusesTheSnapshot(t *testing.T) {
	e := newRerunEnv(t)
	orig := submitJob(t, e.svc, admin, rerunSpec)
	job, created, err := e.svc.Jobs.Rerun(context.Background(), admin, orig.ID, service.RerunInput{})
	if err != nil || !created {
		t.Fatalf("Rerun: created=%v, %v", created, err)
	}
	if job.ID == orig.ID || job.RerunOf != orig.ID {
		t.Errorf("new job %d RerunOf %d; want a new job that re-runs %d", job.ID, job.RerunOf, orig.ID)
	}
	if job.SpecHash != orig.SpecHash || !bytes.Equal(job.SpecJSON, orig.SpecJSON) {
		t.Errorf("re-run without changes has snapshot %s, want the original's %s\n got: %s\nwant: %s",
			job.SpecHash, orig.SpecHash, job.SpecJSON, orig.SpecJSON)
	}
	if job.State != domain.JobQueued || job.Submitter != admin.Subject || job.OutputDir == orig.OutputDir {
		t.Errorf("new job: state %s, submitter %s, output dir %s (original's %s); want queued, by admin, its own directory",
			job.State, job.Submitter, job.OutputDir, orig.OutputDir)
	}
	stored, err := e.st.GetJob(context.Background(), job.ID)
	if err != nil || stored.RerunOf != orig.ID {
		t.Fatalf("stored job: RerunOf %d, %v; want %d", stored.RerunOf, err, orig.ID)
	}
	if again, err := e.st.GetJob(context.Background(), orig.ID); err != nil || again.RerunOf != 0 {
		t.Errorf("original: RerunOf %d, %v; want 0", again.RerunOf, err)
	}
	// A re-run is audited like a submit of the new job.
	recs := e.records(t, "job.submit")
	if len(recs) != 2 || recs[1].Target != "job/"+strconv.FormatInt(job.ID, 10) {
		t.Errorf("job.submit records = %+v; want one for the original and one for job %d", recs, job.ID)
	}
}

func TestRerunAppliesOverridesAndKeepsTheRest(t *testing.T) {
	e := newRerunEnv(t)
	orig := submitJob(t, e.svc, admin, rerunSpec)
	job, _, err := e.svc.Jobs.Rerun(context.Background(), admin, orig.ID, service.RerunInput{
		Env: "pytorch-2.5@1",
		Set: []string{"params.lr=0.2", "labels.sweep=b"},
	})
	if err != nil {
		t.Fatalf("Rerun: %v", err)
	}
	want := orig.Spec
	want.Env = "pytorch-2.5@1"
	want.Params = maps.Clone(orig.Spec.Params)
	want.Params["lr"] = "0.2"
	want.Labels = maps.Clone(orig.Spec.Labels)
	want.Labels["sweep"] = "b"
	if !reflect.DeepEqual(job.Spec, want) {
		t.Errorf("re-run spec:\n got %+v\nwant %+v", job.Spec, want)
	}
	if wantJSON, hash := jobspec.Canonical(want); !bytes.Equal(job.SpecJSON, wantJSON) || job.SpecHash != hash {
		t.Errorf("re-run snapshot %s:\n%s\nwant %s:\n%s", job.SpecHash, job.SpecJSON, hash, wantJSON)
	}
	if orig.Spec.Params["lr"] != "0.1" || orig.Spec.Env != "pytorch-2.4@1" {
		t.Errorf("the original's spec changed: %+v", orig.Spec)
	}
	stored, err := e.st.GetJob(context.Background(), orig.ID)
	if err != nil || !bytes.Equal(stored.SpecJSON, orig.SpecJSON) {
		t.Errorf("the original's stored snapshot changed (%v)", err)
	}
	if job.Priority != domain.PriorityHigh || !job.Spec.Shell {
		t.Errorf("re-run lost fields: priority %s, shell %v", job.Priority, job.Spec.Shell)
	}
}

func TestRerunRefusesInvalidChangesAndStoresNothing(t *testing.T) {
	e := newRerunEnv(t)
	orig := submitJob(t, e.svc, admin, rerunSpec)
	before := jobCount(t, e.st)
	cases := map[string]struct {
		in    service.RerunInput
		paths []string
	}{
		"unknown key, bad value, unpinned env": {
			in:    service.RerunInput{Env: "pytorch", Set: []string{"params.lr=0.2", "resources.gpus=-1", "resorces.cpus=2"}},
			paths: []string{"set[2]", "env", "resources.gpus"},
		},
		"retries without reentrant": {
			in:    service.RerunInput{Set: []string{"policy.reentrant=false"}},
			paths: []string{"policy.retries"},
		},
		"no pool of that name": {
			in:    service.RerunInput{Set: []string{"pool=nowhere"}},
			paths: []string{"pool"},
		},
		"not key=value": {
			in:    service.RerunInput{Set: []string{"params.lr"}},
			paths: []string{"set[0]"},
		},
		"forged template label": { // as a normal submit refuses it
			in:    service.RerunInput{Set: []string{"labels.trainyard.template=train@1"}},
			paths: []string{"labels.trainyard.template"},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := e.svc.Jobs.Rerun(context.Background(), admin, orig.ID, c.in)
			var fe domain.FieldErrors
			if !errors.As(err, &fe) {
				t.Fatalf("Rerun: %v; want field errors", err)
			}
			var paths []string
			for _, f := range fe {
				paths = append(paths, f.Path)
				if f.Line != 0 {
					t.Errorf("%s: line %d; a re-run's problems carry no line of the stored snapshot", f.Path, f.Line)
				}
				if f.Message == "" {
					t.Errorf("%s: empty message", f.Path)
				}
			}
			slices.Sort(paths)
			want := slices.Sorted(slices.Values(c.paths))
			if !slices.Equal(paths, want) {
				t.Errorf("paths = %v, want %v (%v)", paths, want, err)
			}
		})
	}
	if n := jobCount(t, e.st); n != before {
		t.Errorf("refused re-runs stored %d job(s)", n-before)
	}
	if n := len(e.records(t, "job.submit")); n != 1 {
		t.Errorf("%d job.submit records after refused re-runs, want the original's only", n)
	}
}

func TestRerunAuthorization(t *testing.T) {
	e := newRerunEnv(t)
	ctx := context.Background()
	member := func(name string) service.Principal {
		return service.Principal{Subject: name, Projects: []domain.ProjectRole{{Project: "default", Role: domain.RoleMember}}}
	}
	alice, bob := member("alice"), member("bob")
	viewer := service.Principal{Subject: "vera", Projects: []domain.ProjectRole{{Project: "default", Role: domain.RoleViewer}}}
	outsider := service.Principal{Subject: "olga", Projects: []domain.ProjectRole{{Project: "vision", Role: domain.RoleLead}}}
	orig := submitJob(t, e.svc, alice, "name: mine\nentrypoint: [\"true\"]\n")
	before := jobCount(t, e.st)

	// A member reads only their own jobs: bob's re-run finds nothing, as
	// would a re-run of a job that does not exist.
	for name, c := range map[string]struct {
		p    service.Principal
		id   int64
		want error
	}{
		"another member's job":       {bob, orig.ID, domain.ErrNotFound},
		"another project's lead":     {outsider, orig.ID, domain.ErrNotFound},
		"a viewer may not submit":    {viewer, orig.ID, domain.ErrForbidden},
		"a job that does not exist":  {admin, orig.ID + 100, domain.ErrNotFound},
		"no roles at all":            {service.Principal{Subject: "nobody"}, orig.ID, domain.ErrNotFound},
		"a viewer, missing job too":  {viewer, orig.ID + 100, domain.ErrNotFound},
		"the member's own job is ok": {alice, orig.ID, nil},
	} {
		_, _, err := e.svc.Jobs.Rerun(ctx, c.p, c.id, service.RerunInput{})
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", name, err, c.want)
		}
	}
	if n := jobCount(t, e.st); n != before+1 {
		t.Errorf("%d jobs created, want only alice's re-run", n-before)
	}
	// Overrides may not move a job to a project the caller cannot submit in.
	_, _, err := e.svc.Jobs.Rerun(ctx, alice, orig.ID, service.RerunInput{Set: []string{"project=vision"}})
	if !errors.Is(err, domain.ErrForbidden) {
		t.Errorf("re-run into another project: err = %v, want forbidden", err)
	}
}

func TestRerunIdempotencyKey(t *testing.T) {
	e := newRerunEnv(t)
	orig := submitJob(t, e.svc, admin, rerunSpec)
	in := service.RerunInput{Set: []string{"params.lr=0.3"}, IdempotencyKey: "sweep-0.3"}
	first, created, err := e.svc.Jobs.Rerun(context.Background(), admin, orig.ID, in)
	if err != nil || !created {
		t.Fatalf("Rerun: created=%v, %v", created, err)
	}
	again, created, err := e.svc.Jobs.Rerun(context.Background(), admin, orig.ID, in)
	if err != nil || created || again.ID != first.ID || again.RerunOf != orig.ID {
		t.Errorf("replay: job %d created=%v RerunOf=%d err=%v; want job %d, created=false, RerunOf=%d",
			again.ID, created, again.RerunOf, err, first.ID, orig.ID)
	}
}

func TestRerunKeepsTheCodePackage(t *testing.T) {
	e := newRerunEnv(t)
	blobs, err := fs.New(filepath.Join(t.TempDir(), "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { blobs.Close() })
	svc := service.New(service.Config{Store: e.st, Clock: e.clk, ArtifactsRoot: t.TempDir(), Blobs: blobs})
	ctx := context.Background()
	body := []byte("not really a tar.gz; the store keeps bytes by their hash")
	sum := sha256.Sum256(body)
	hash := "sha256:" + hex.EncodeToString(sum[:])
	if _, _, err := svc.Jobs.PutCode(ctx, admin, hash, bytes.NewReader(body), int64(len(body))); err != nil {
		t.Fatalf("PutCode: %v", err)
	}
	code := &domain.CodeRef{SHA256: hash, Commit: "0123456789abcdef0123456789abcdef01234567"}
	orig, _, err := svc.Jobs.Submit(ctx, admin, service.SubmitInput{Doc: []byte(rerunSpec), Code: code})
	if err != nil {
		t.Fatal(err)
	}
	job, _, err := svc.Jobs.Rerun(ctx, admin, orig.ID, service.RerunInput{Set: []string{"params.lr=0.2"}})
	if err != nil {
		t.Fatalf("Rerun: %v", err)
	}
	if job.Code == nil || *job.Code != *code {
		t.Errorf("re-run Code = %+v, want the original's %+v", job.Code, code)
	}
}
