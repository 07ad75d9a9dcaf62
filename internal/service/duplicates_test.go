package service_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store/sqlite"
)

// On a server that refuses repeated submits, a repeat of a live job is
// refused with the earlier job and the two ways out, unless the submit
// allows it; a retry of a keyed submit still answers with its job.
func TestRefuseRepeatedSubmits(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	svc := service.New(service.Config{Store: st, ArtifactsRoot: filepath.Join(dir, "artifacts"), DuplicateSubmits: service.DuplicatesRefuse})
	if _, _, err := svc.Pools.PutPool(ctx, admin, domain.Pool{Name: "default", Nodes: []domain.Node{{Name: "n1", CPUs: 8, Memory: 32 << 30}}}); err != nil {
		t.Fatal(err)
	}
	doc := []byte("name: sweep\nentrypoint: [python3, train.py]\n")
	first, err := svc.Jobs.Submission(ctx, admin, service.SubmitInput{Doc: doc, IdempotencyKey: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.Jobs.Submission(ctx, admin, service.SubmitInput{Doc: doc})
	if !errors.Is(err, domain.ErrConflict) || !strings.Contains(err.Error(), "same spec as your job 1 (queued") ||
		!strings.Contains(err.Error(), "trainyard cancel 1") || !strings.Contains(err.Error(), "--allow-duplicate") {
		t.Fatalf("a repeat: %v; want a conflict naming job 1, cancel and --allow-duplicate", err)
	}
	retry, err := svc.Jobs.Submission(ctx, admin, service.SubmitInput{Doc: doc, IdempotencyKey: "k1"})
	if err != nil || retry.Job.ID != first.Job.ID || retry.Created {
		t.Fatalf("a keyed retry: %+v, %v; want job %d again", retry, err, first.Job.ID)
	}
	again, err := svc.Jobs.Submission(ctx, admin, service.SubmitInput{Doc: doc, AllowDuplicate: true})
	if err != nil || !again.Created || len(again.Warnings) != 1 {
		t.Fatalf("an allowed repeat: %+v, %v; want it stored with a warning", again, err)
	}
	if n, _ := st.CountJobs(ctx); n[domain.JobQueued] != 2 {
		t.Fatalf("queued jobs = %v, want 2", n)
	}
}
