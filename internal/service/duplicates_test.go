package service_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store"
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

// lookFails is a store whose look for repeated submits fails, read
// beside the write or in it.
type lookFails struct{ *sqlite.Store }

func (lookFails) SameSpecJobs(context.Context, string, string, time.Time) ([]domain.Job, bool, error) {
	return nil, false, errors.New("disk on fire")
}

func (f lookFails) CreateJobLooking(ctx context.Context, p store.NewJob, audit domain.AuditRecord, since time.Time) (domain.Job, bool, store.Repeats, error) {
	j, created, err := f.CreateJob(ctx, p, audit)
	return j, created, store.Repeats{Err: errors.New("disk on fire")}, err
}

// plainStore hides the store's CreateJobLooking: the service looks
// beside the write.
type plainStore struct{ store.Store }

// On a server that warns of repeated submits (the default), the look runs
// beside the write or in it: a repeat is stored with a warning that names
// the earlier jobs, never the new one; a look that fails loses the
// warning, not the submit.
func TestWarnRepeatedSubmits(t *testing.T) {
	t.Run("in the write", func(t *testing.T) {
		testWarnRepeatedSubmits(t, func(st *sqlite.Store) store.Store { return st }, func(st *sqlite.Store) store.Store { return lookFails{st} })
	})
	t.Run("beside the write", func(t *testing.T) {
		testWarnRepeatedSubmits(t, func(st *sqlite.Store) store.Store { return plainStore{st} },
			func(st *sqlite.Store) store.Store { return plainStore{lookFails{st}} })
	})
}

func testWarnRepeatedSubmits(t *testing.T, wrap, failing func(*sqlite.Store) store.Store) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	pool := domain.Pool{Name: "default", Nodes: []domain.Node{{Name: "n1", CPUs: 8, Memory: 32 << 30}}}
	svc := service.New(service.Config{Store: wrap(st), ArtifactsRoot: filepath.Join(dir, "artifacts")})
	if _, _, err := svc.Pools.PutPool(ctx, admin, pool); err != nil {
		t.Fatal(err)
	}
	doc := []byte("name: sweep\nentrypoint: [python3, train.py]\n")
	var ids []int64
	for i := range 5 {
		r, err := svc.Jobs.Submission(ctx, admin, service.SubmitInput{Doc: doc})
		if err != nil || !r.Created {
			t.Fatalf("submit %d: %+v, %v", i, r, err)
		}
		ids = append(ids, r.Job.ID)
		if i == 0 {
			if len(r.Warnings) != 0 {
				t.Fatalf("first submit warns %q; it repeats nothing", r.Warnings)
			}
			continue
		}
		if len(r.Warnings) != 1 || !strings.HasPrefix(r.Warnings[0], fmt.Sprintf("job %d has the same spec as your job %d (queued", r.Job.ID, ids[i-1])) {
			t.Fatalf("submit %d (job %d) warns %q; want the earlier jobs, newest first", i, r.Job.ID, r.Warnings)
		}
		// It names earlier jobs only, and says "and more" exactly when
		// there are earlier ones it does not name. (The look may have seen
		// the new job, which then takes the place of one name.)
		named := 0
		for _, id := range ids {
			if strings.Contains(r.Warnings[0], fmt.Sprintf("job %d (", id)) {
				named++
				if id == r.Job.ID {
					t.Errorf("submit %d warns %q, naming the new job itself", i, r.Warnings[0])
				}
			}
		}
		if more := strings.Contains(r.Warnings[0], "and more"); named == 0 || named > i || more != (named < i) {
			t.Errorf("submit %d warns %q: names %d of the %d earlier jobs, \"and more\" = %v", i, r.Warnings[0], named, i, more)
		}
	}

	broken := service.New(service.Config{Store: failing(st), ArtifactsRoot: filepath.Join(dir, "artifacts")})
	r, err := broken.Jobs.Submission(ctx, admin, service.SubmitInput{Doc: doc})
	if err != nil || !r.Created || len(r.Warnings) != 0 {
		t.Fatalf("submit while the look fails: %+v, %v; want it stored, without a warning", r, err)
	}
	if n, _ := st.CountJobs(ctx); n[domain.JobQueued] != 6 {
		t.Fatalf("queued jobs = %v, want 6", n)
	}
}
