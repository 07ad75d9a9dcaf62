package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// codeTests cover a job's code package (store.NewJob.Code, domain.Job.Code).
var codeTests = map[string]func(t *testing.T, s store.Store){
	"CodeRoundTrip":     testCodeRoundTrip,
	"CodeIdempotency":   testCodeIdempotency,
	"CodeInvalidHash":   testCodeInvalidHash,
	"CodeWithFailedJob": testCodeWithFailedJob,
	"CodeSharedByJobs":  testCodeSharedByJobs,
}

func codeRef(c byte, commit string, dirty bool) *domain.CodeRef {
	return &domain.CodeRef{SHA256: "sha256:" + strings.Repeat(string(c), 64), Commit: commit, Dirty: dirty}
}

func testCodeRoundTrip(t *testing.T, s store.Store) {
	want := codeRef('a', "0123456789abcdef0123456789abcdef01234567", true)
	p := newJob(t, testSpec("with-code", "p"), "alice", t0)
	p.Code = codeRef('a', "0123456789abcdef0123456789abcdef01234567", true)
	created := create(t, s, p)
	p.Code.Dirty = false // the returned job must not share the caller's struct
	if created.Code == nil || *created.Code != *want {
		t.Errorf("CreateJob returned Code %+v, want %+v", created.Code, want)
	}
	if got := get(t, s, created.ID); got.Code == nil || *got.Code != *want {
		t.Errorf("GetJob returned Code %+v, want %+v", got.Code, want)
	}
	// Not a git tree: no commit, not dirty.
	p = newJob(t, testSpec("plain-tree", "p"), "alice", at(1))
	p.Code = codeRef('b', "", false)
	if got := get(t, s, create(t, s, p).ID); got.Code == nil || *got.Code != *codeRef('b', "", false) {
		t.Errorf("GetJob returned Code %+v for a package without git state", got.Code)
	}
	without := create(t, s, newJob(t, testSpec("no-code", "p"), "alice", at(2)))
	if without.Code != nil {
		t.Errorf("CreateJob without code returned Code %+v", without.Code)
	}
	if got := get(t, s, without.ID); got.Code != nil {
		t.Errorf("GetJob of a job without code returned Code %+v", got.Code)
	}
}

func testCodeIdempotency(t *testing.T, s store.Store) {
	ctx := context.Background()
	p := newJob(t, testSpec("idem", "p"), "alice", t0)
	p.IdempotencyKey = "k"
	p.Code = codeRef('c', "abc", false)
	first := create(t, s, p)
	p.Code = codeRef('d', "def", true) // a replay changes nothing
	again, created, err := s.CreateJob(ctx, p, setupAudit)
	if err != nil || created || again.ID != first.ID {
		t.Fatalf("replay: job %d created=%v err=%v, want job %d created=false", again.ID, created, err, first.ID)
	}
	if again.Code == nil || *again.Code != *codeRef('c', "abc", false) {
		t.Errorf("replay returned Code %+v, want the first submit's", again.Code)
	}
}

func testCodeInvalidHash(t *testing.T, s store.Store) {
	ctx := context.Background()
	for _, h := range []string{"", "sha256:xyz", "md5:" + strings.Repeat("a", 64), "sha256:" + strings.Repeat("A", 64)} {
		p := newJob(t, testSpec("bad-code", "p"), "alice", t0)
		p.Code = &domain.CodeRef{SHA256: h}
		if _, _, err := s.CreateJob(ctx, p, setupAudit); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("CreateJob with code hash %q: err = %v, want ErrInvalid", h, err)
		}
	}
	jobs, err := s.ListJobs(ctx, store.JobFilter{})
	if err != nil || len(jobs) != 0 {
		t.Errorf("after invalid creates ListJobs = %d jobs (err %v), want none", len(jobs), err)
	}
}

// A create that fails leaves no code row behind for the id it would have had.
func testCodeWithFailedJob(t *testing.T, s store.Store) {
	ctx := context.Background()
	fixed := func(int64) string { return "/artifacts/shared" }
	p := newJob(t, testSpec("a", "p"), "alice", t0)
	p.OutputDir = fixed
	create(t, s, p)
	clash := newJob(t, testSpec("clash", "p"), "alice", at(1))
	clash.OutputDir = fixed
	clash.Code = codeRef('e', "lost", true)
	if _, _, err := s.CreateJob(ctx, clash, setupAudit); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("CreateJob with a used output directory: err = %v, want ErrConflict", err)
	}
	next := newJob(t, testSpec("next", "p"), "alice", at(2))
	next.Code = codeRef('f', "kept", false)
	j := create(t, s, next)
	if got := get(t, s, j.ID); got.Code == nil || *got.Code != *codeRef('f', "kept", false) {
		t.Errorf("job after a failed create has Code %+v, want its own", got.Code)
	}
}

func testCodeSharedByJobs(t *testing.T, s store.Store) {
	var ids []int64
	for i, name := range []string{"one", "two"} {
		p := newJob(t, testSpec(name, "p"), "alice", at(i))
		p.Code = codeRef('9', "c", i == 1)
		ids = append(ids, create(t, s, p).ID)
	}
	for i, id := range ids {
		if got := get(t, s, id); got.Code == nil || got.Code.SHA256 != codeRef('9', "", false).SHA256 || got.Code.Dirty != (i == 1) {
			t.Errorf("job %d Code = %+v", id, got.Code)
		}
	}
}
