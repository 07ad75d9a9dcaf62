package service_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// Rerun with Resume records the original's latest usable checkpoint in
// the new spec (a best-so-far copy and a set-aside one are passed over);
// FromCheckpoint names one; a plain re-run of a resumed job starts
// afresh; an original without checkpoints is refused with how to look.
func TestRerunResumePicksTheCheckpoint(t *testing.T) {
	ctx := context.Background()
	e := newAuditEnv(t)
	orig := submitJob(t, e.svc, admin, prioSpec)
	empty := submitJob(t, e.svc, admin, prioSpec)
	now := e.clk.Now()
	for i, name := range []string{"ckpt-1.json", "ckpt-2.json", "model_best.json", "ckpt-3.json"} {
		if _, err := e.st.RecordCheckpoint(ctx, domain.CheckpointRecord{JobID: orig.ID, Attempt: 1, Name: name, Size: 1, Files: 1,
			At: now.Add(time.Duration(i) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.st.MarkCheckpointSuspect(ctx, orig.ID, "ckpt-3.json", "attempt 2 failed right after resuming from it"); err != nil {
		t.Fatal(err)
	}

	job, _, err := e.svc.Jobs.Rerun(ctx, admin, orig.ID, service.RerunInput{Resume: true})
	if err != nil {
		t.Fatalf("Rerun --resume: %v", err)
	}
	if r := job.Spec.Resume; r == nil || *r != (domain.ResumeFrom{Job: orig.ID, Checkpoint: "ckpt-2.json"}) {
		t.Errorf("resume = %+v; want job %d checkpoint ckpt-2.json (the newest, neither best-so-far nor set aside)", r, orig.ID)
	}
	named, _, err := e.svc.Jobs.Rerun(ctx, admin, orig.ID, service.RerunInput{FromCheckpoint: "ckpt-1.json"})
	if err != nil || named.Spec.Resume == nil || named.Spec.Resume.Checkpoint != "ckpt-1.json" {
		t.Errorf("Rerun --from-checkpoint ckpt-1.json: %+v, %v", named.Spec.Resume, err)
	}
	again, _, err := e.svc.Jobs.Rerun(ctx, admin, job.ID, service.RerunInput{})
	if err != nil || again.Spec.Resume != nil {
		t.Errorf("a plain re-run of a resumed job: resume %+v, %v; want none (it starts afresh)", again.Spec.Resume, err)
	}

	_, _, err = e.svc.Jobs.Rerun(ctx, admin, orig.ID, service.RerunInput{FromCheckpoint: "ckpt-9.json"})
	var fe domain.FieldErrors
	if !errors.As(err, &fe) || fe[0].Path != "from_checkpoint" || !strings.Contains(fe[0].Message, "ckpt-1.json") {
		t.Errorf("an unknown checkpoint: %v; want a field error on from_checkpoint listing the original's", err)
	}
	_, _, err = e.svc.Jobs.Rerun(ctx, admin, empty.ID, service.RerunInput{Resume: true})
	if !errors.Is(err, domain.ErrConflict) || !strings.Contains(err.Error(), fmt.Sprintf("trainyard checkpoints ls %d", empty.ID)) {
		t.Errorf("an original without checkpoints: %v; want a conflict saying how to list them", err)
	}
}

// A spec that names resume itself is checked at submit: the job exists,
// the caller may read it, it is of the same project, and the checkpoint
// is one of its registered ones.
func TestSubmitResumeIsChecked(t *testing.T) {
	ctx := context.Background()
	e := newAuditEnv(t)
	alice := service.Principal{Subject: "alice", Projects: []domain.ProjectRole{{Project: "default", Role: domain.RoleMember}}}
	bob := service.Principal{Subject: "bob", Projects: []domain.ProjectRole{{Project: "default", Role: domain.RoleMember}}}
	orig := submitJob(t, e.svc, alice, prioSpec)
	if _, err := e.st.RecordCheckpoint(ctx, domain.CheckpointRecord{JobID: orig.ID, Attempt: 1, Name: "ckpt-1.json", Size: 1, Files: 1, At: e.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	doc := func(job int64, ckpt string) string {
		return prioSpec + fmt.Sprintf("resume: {job: %d, checkpoint: %s}\n", job, ckpt)
	}
	if job := submitJob(t, e.svc, alice, doc(orig.ID, "ckpt-1.json")); job.Spec.Resume == nil || job.Spec.Resume.Job != orig.ID {
		t.Errorf("submitted resume = %+v", job.Spec.Resume)
	}
	cases := map[string]struct {
		p    service.Principal
		doc  string
		path string // field error path; "": an error matching ErrNotFound
	}{
		"no such job":           {alice, doc(orig.ID+100, "ckpt-1.json"), "resume.job"},
		"no such checkpoint":    {alice, doc(orig.ID, "ckpt-2.json"), "resume.checkpoint"},
		"another member's job":  {bob, doc(orig.ID, "ckpt-1.json"), ""},
		"another project's job": {admin, doc(orig.ID, "ckpt-1.json") + "project: other\n", "resume.job"},
	}
	for name, c := range cases {
		_, _, err := e.svc.Jobs.Submit(ctx, c.p, service.SubmitInput{Doc: []byte(c.doc)})
		var fe domain.FieldErrors
		switch {
		case c.path == "" && !errors.Is(err, domain.ErrNotFound) && !errors.Is(err, domain.ErrForbidden):
			t.Errorf("%s: %v; want refused as unreadable", name, err)
		case c.path != "" && (!errors.As(err, &fe) || fe[0].Path != c.path):
			t.Errorf("%s: %v; want a field error on %s", name, err, c.path)
		}
	}
}
