package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// artifactTests are the subtests of the Artifacts contract.
var artifactTests = map[string]func(t *testing.T, s store.Store){
	"ManifestRoundTrip":   testManifestRoundTrip,
	"CheckpointsRegistry": testCheckpointsRegistry,
	"CheckpointVersions":  testCheckpointVersions,
	"CheckpointMarks":     testCheckpointMarks,
	"ManifestWithEnd":     testManifestWithEnd,
}

func testManifestRoundTrip(t *testing.T, s store.Store) {
	ctx := context.Background()
	j := create(t, s, newJob(t, testSpec("m", "vision"), "alice", at(0)))
	if _, err := s.GetManifest(ctx, j.ID, 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("manifest before any: %v, want ErrNotFound", err)
	}
	m1 := domain.Manifest{JobID: j.ID, Attempt: 1, At: at(1),
		Files:   []domain.ArtifactFile{{Path: "a.txt", Size: 3, SHA256: "aa"}, {Path: "dir/b.bin", Size: 0, SHA256: "bb"}},
		Lineage: domain.Lineage{JobID: j.ID, Attempt: 1, Env: "host@1", Inputs: []domain.Input{{Name: "imagenet", Version: "v2"}}, State: "failed", StartedAt: at(0)}}
	m2 := domain.Manifest{JobID: j.ID, Attempt: 2, At: at(2), Files: []domain.ArtifactFile{{Path: "model.pt", Size: 9, SHA256: "cc"}},
		Lineage: domain.Lineage{JobID: j.ID, Attempt: 2, Code: "sha256:x", GitCommit: "abc", GitDirty: true, State: "succeeded"}}
	for _, m := range []domain.Manifest{m1, m2, m2} {
		if err := s.RecordManifest(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.GetManifest(ctx, j.ID, 0)
	if err != nil || !reflect.DeepEqual(got, m2) {
		t.Fatalf("latest manifest = %+v, %v; want %+v", got, err, m2)
	}
	got, err = s.GetManifest(ctx, j.ID, 1)
	if err != nil || !reflect.DeepEqual(got, m1) {
		t.Fatalf("attempt 1 manifest = %+v, %v; want %+v", got, err, m1)
	}
	if err := s.RecordManifest(ctx, domain.Manifest{JobID: j.ID}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("manifest without attempt: %v", err)
	}
}

func testCheckpointsRegistry(t *testing.T, s store.Store) {
	ctx := context.Background()
	j := create(t, s, newJob(t, testSpec("c", "vision"), "alice", at(0)))
	other := create(t, s, newJob(t, testSpec("d", "vision"), "alice", at(0)))
	c1 := domain.CheckpointRecord{JobID: j.ID, Attempt: 1, Name: "step-10", Path: "/x/step-10", Size: 100, Files: 2, At: at(1)}
	c2 := domain.CheckpointRecord{JobID: j.ID, Attempt: 2, Name: "step-20", Path: "/x/step-20", Size: 200, Files: 2, At: at(2)}
	c3 := domain.CheckpointRecord{JobID: other.ID, Attempt: 1, Name: "ckpt", Path: "/y/ckpt", Size: 1, Files: 1, At: at(3)}
	for _, c := range []domain.CheckpointRecord{c2, c1, c3} {
		if added, err := s.RecordCheckpoint(ctx, c); err != nil || !added {
			t.Fatalf("record %s: %v, %v", c.Name, added, err)
		}
	}
	if added, err := s.RecordCheckpoint(ctx, c1); err != nil || added {
		t.Fatalf("recording step-10 again: added=%v, %v; want false", added, err)
	}
	got, err := s.ListCheckpoints(ctx, j.ID, false)
	if err != nil || !reflect.DeepEqual(got, []domain.CheckpointRecord{c1, c2}) {
		t.Fatalf("checkpoints = %+v, %v", got, err)
	}
	if err := s.MarkCheckpointDeleted(ctx, j.ID, "step-10", at(5), nil); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkCheckpointDeleted(ctx, j.ID, "step-10", at(6), nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleting twice: %v, want ErrNotFound", err)
	}
	got, _ = s.ListCheckpoints(ctx, j.ID, false)
	if len(got) != 1 || got[0].Name != "step-20" {
		t.Fatalf("after delete: %+v", got)
	}
	all, _ := s.ListCheckpoints(ctx, 0, true)
	if len(all) != 3 || all[0].Name != "step-10" || !all[0].Deleted.Equal(at(5)) {
		t.Fatalf("every checkpoint with deleted ones: %+v", all)
	}
}

// listOne returns a job's only checkpoint, deleted or not.
func listOne(t *testing.T, s store.Store, jobID int64) domain.CheckpointRecord {
	t.Helper()
	got, err := s.ListCheckpoints(context.Background(), jobID, true)
	if err != nil || len(got) != 1 {
		t.Fatalf("checkpoints of job %d = %+v, %v; want one", jobID, got, err)
	}
	return got[0]
}

func testCheckpointVersions(t *testing.T, s store.Store) {
	ctx := context.Background()
	j := create(t, s, newJob(t, testSpec("v", "vision"), "alice", at(0)))
	v1 := domain.CheckpointRecord{JobID: j.ID, Attempt: 1, Name: "step-10", Path: "/x/step-10", Size: 100, Files: 2, At: at(1), SHA256: "aa"}
	if added, err := s.RecordCheckpoint(ctx, v1); err != nil || !added {
		t.Fatalf("record v1: %v, %v; want true", added, err)
	}
	if got := listOne(t, s, j.ID); !reflect.DeepEqual(got, v1) {
		t.Fatalf("after v1: %+v; want %+v", got, v1)
	}
	if err := s.MarkCheckpointResumed(ctx, j.ID, "step-10", 2); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkCheckpointSuspect(ctx, j.ID, "step-10", "attempt 2 failed right after resuming from it: exit code 1"); err != nil {
		t.Fatal(err)
	}
	marked := v1
	marked.ResumedBy, marked.Suspect = 2, "attempt 2 failed right after resuming from it: exit code 1"
	if got := listOne(t, s, j.ID); !reflect.DeepEqual(got, marked) {
		t.Fatalf("after the marks: %+v; want %+v", got, marked)
	}

	// The same digest again changes nothing, whatever else differs.
	same := domain.CheckpointRecord{JobID: j.ID, Attempt: 3, Name: "step-10", Path: "/elsewhere", Size: 7, Files: 9, At: at(4), SHA256: "aa"}
	if added, err := s.RecordCheckpoint(ctx, same); err != nil || added {
		t.Fatalf("recording the same digest again: %v, %v; want false", added, err)
	}
	if got := listOne(t, s, j.ID); !reflect.DeepEqual(got, marked) {
		t.Fatalf("after recording the same digest: %+v; want it unchanged, %+v", got, marked)
	}

	// Another digest is a new version: every field replaced, marks cleared.
	v2 := domain.CheckpointRecord{JobID: j.ID, Attempt: 3, Name: "step-10", Path: "/x/step-10.b", Size: 300, Files: 3, At: at(5), SHA256: "bb"}
	if added, err := s.RecordCheckpoint(ctx, v2); err != nil || !added {
		t.Fatalf("record v2: %v, %v; want true", added, err)
	}
	if got := listOne(t, s, j.ID); !reflect.DeepEqual(got, v2) {
		t.Fatalf("after v2: %+v; want %+v", got, v2)
	}

	// A deleted one recorded again, even with its old digest, is a new
	// version that exists again.
	if err := s.MarkCheckpointResumed(ctx, j.ID, "step-10", 4); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkCheckpointSuspect(ctx, j.ID, "step-10", "attempt 4 failed"); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkCheckpointDeleted(ctx, j.ID, "step-10", at(6), nil); err != nil {
		t.Fatal(err)
	}
	if got := listOne(t, s, j.ID); !got.Deleted.Equal(at(6)) {
		t.Fatalf("after delete: %+v; want deleted at %v", got, at(6))
	}
	v3 := domain.CheckpointRecord{JobID: j.ID, Attempt: 5, Name: "step-10", Path: "/x/step-10.c", Size: 400, Files: 4, At: at(7), SHA256: "bb"}
	if added, err := s.RecordCheckpoint(ctx, v3); err != nil || !added {
		t.Fatalf("record after delete: %v, %v; want true", added, err)
	}
	if got := listOne(t, s, j.ID); !reflect.DeepEqual(got, v3) {
		t.Fatalf("after recording a deleted one again: %+v; want %+v", got, v3)
	}
	if got, err := s.ListCheckpoints(ctx, j.ID, false); err != nil || !reflect.DeepEqual(got, []domain.CheckpointRecord{v3}) {
		t.Fatalf("existing checkpoints after recording a deleted one again = %+v, %v; want %+v", got, err, v3)
	}
}

func testCheckpointMarks(t *testing.T, s store.Store) {
	ctx := context.Background()
	j := create(t, s, newJob(t, testSpec("k", "vision"), "alice", at(0)))
	other := create(t, s, newJob(t, testSpec("l", "vision"), "alice", at(0)))
	mine := domain.CheckpointRecord{JobID: j.ID, Attempt: 1, Name: "ckpt", Path: "/x/ckpt", Size: 1, Files: 1, At: at(1), SHA256: "aa"}
	theirs := domain.CheckpointRecord{JobID: other.ID, Attempt: 1, Name: "ckpt", Path: "/y/ckpt", Size: 2, Files: 1, At: at(1), SHA256: "aa"}
	gone := domain.CheckpointRecord{JobID: other.ID, Attempt: 1, Name: "gone", Path: "/y/gone", Size: 3, Files: 1, At: at(2), SHA256: "cc"}
	for _, c := range []domain.CheckpointRecord{mine, theirs, gone} {
		if added, err := s.RecordCheckpoint(ctx, c); err != nil || !added {
			t.Fatalf("record %d/%s: %v, %v", c.JobID, c.Name, added, err)
		}
	}
	if err := s.MarkCheckpointDeleted(ctx, other.ID, "gone", at(3), nil); err != nil {
		t.Fatal(err)
	}
	gone.Deleted = at(3)

	if err := s.MarkCheckpointResumed(ctx, j.ID, "ckpt", 2); err != nil {
		t.Fatalf("mark resumed: %v", err)
	}
	if err := s.MarkCheckpointResumed(ctx, j.ID, "ckpt", 3); err != nil {
		t.Fatalf("mark resumed again: %v", err)
	}
	if err := s.MarkCheckpointSuspect(ctx, j.ID, "ckpt", "attempt 3 failed right after resuming from it: exit code 1"); err != nil {
		t.Fatalf("mark suspect: %v", err)
	}
	mine.ResumedBy, mine.Suspect = 3, "attempt 3 failed right after resuming from it: exit code 1"

	for _, c := range []struct {
		what string
		err  error
		want error
	}{
		{"resumed, unknown name", s.MarkCheckpointResumed(ctx, j.ID, "nope", 1), store.ErrNotFound},
		{"suspect, unknown name", s.MarkCheckpointSuspect(ctx, j.ID, "nope", "x"), store.ErrNotFound},
		{"resumed, another job's name", s.MarkCheckpointResumed(ctx, j.ID, "gone", 1), store.ErrNotFound},
		{"resumed, unknown job", s.MarkCheckpointResumed(ctx, other.ID+1000, "ckpt", 1), store.ErrNotFound},
		{"resumed, deleted", s.MarkCheckpointResumed(ctx, other.ID, "gone", 1), store.ErrNotFound},
		{"suspect, deleted", s.MarkCheckpointSuspect(ctx, other.ID, "gone", "x"), store.ErrNotFound},
		{"suspect, empty why", s.MarkCheckpointSuspect(ctx, j.ID, "ckpt", ""), store.ErrInvalid},
		{"resumed, attempt 0", s.MarkCheckpointResumed(ctx, j.ID, "ckpt", 0), store.ErrInvalid},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("mark %s: %v; want %v", c.what, c.err, c.want)
		}
	}
	// The marks touched only the job's own checkpoint, and the failed ones
	// nothing at all.
	if got := listOne(t, s, j.ID); !reflect.DeepEqual(got, mine) {
		t.Errorf("marked checkpoint = %+v; want %+v", got, mine)
	}
	if got, err := s.ListCheckpoints(ctx, other.ID, true); err != nil || !reflect.DeepEqual(got, []domain.CheckpointRecord{theirs, gone}) {
		t.Errorf("the other job's checkpoints = %+v, %v; want %+v", got, err, []domain.CheckpointRecord{theirs, gone})
	}
}

// testManifestWithEnd: an attempt's end records the manifest it carries in
// its own write, replacing one recorded before; an end that does not apply
// records none, and a manifest of another attempt is refused.
func testManifestWithEnd(t *testing.T, s store.Store) {
	ctx := context.Background()
	j := create(t, s, newJob(t, testSpec("m", "vision"), "alice", at(0)))
	mustApply(t, s, store.Change{JobID: j.ID, Move: domain.MoveStart(), At: at(1),
		Attempt: &store.AttemptChange{Create: true, Number: 1, To: domain.AttemptStarting}})
	if err := s.RecordManifest(ctx, domain.Manifest{JobID: j.ID, Attempt: 1, At: at(1), Files: []domain.ArtifactFile{{Path: "old", Size: 1, SHA256: "00"}}}); err != nil {
		t.Fatal(err)
	}
	m := domain.Manifest{JobID: j.ID, Attempt: 1, At: at(2), Files: []domain.ArtifactFile{{Path: "model.pt", Size: 9, SHA256: "cc"}, {Path: "x/y", Size: 0, SHA256: "dd"}},
		Lineage: domain.Lineage{JobID: j.ID, Attempt: 1, State: "failed"}}
	end := func(from domain.AttemptState, m domain.Manifest) store.Change {
		return store.Change{JobID: j.ID, Move: domain.MoveFail(), At: at(2), Manifest: &m,
			Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{from}, To: domain.AttemptFailed}}
	}
	other := m
	other.Attempt = 2
	if errs := apply(t, s, end(domain.AttemptStarting, other)); !errors.Is(errs[0], domain.ErrInvalid) {
		t.Errorf("an end carrying another attempt's manifest = %v; want ErrInvalid", errs[0])
	}
	if errs := apply(t, s, end(domain.AttemptRunning, m)); !errors.Is(errs[0], store.ErrConflict) {
		t.Errorf("an end whose attempt guard fails = %v; want ErrConflict", errs[0])
	}
	if got, err := s.GetManifest(ctx, j.ID, 1); err != nil || len(got.Files) != 1 || got.Files[0].Path != "old" {
		t.Errorf("manifest after ends that did not apply = %+v, %v; want the one recorded before", got, err)
	}
	mustApply(t, s, end(domain.AttemptStarting, m))
	if got, err := s.GetManifest(ctx, j.ID, 1); err != nil || !reflect.DeepEqual(got, m) {
		t.Errorf("manifest after the end = %+v, %v; want %+v", got, err, m)
	}
	if g := get(t, s, j.ID); g.State != domain.JobFailed {
		t.Errorf("job is %s after its end, want failed", g.State)
	}
}
