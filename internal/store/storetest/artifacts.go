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
	if err := s.MarkCheckpointDeleted(ctx, j.ID, "step-10", at(5)); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkCheckpointDeleted(ctx, j.ID, "step-10", at(6)); !errors.Is(err, store.ErrNotFound) {
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
