package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// tierTests are the subtests of checkpoint tiers and storage accrual.
var tierTests = map[string]func(t *testing.T, s store.Store){
	"CheckpointTiers": testCheckpointTiers,
	"CheckpointsAt":   testCheckpointsAt,
	"StorageDays":     testStorageDays,
	"ManifestSizes":   testManifestSizes,
}

// A checkpoint is local, then also in the object store, then only there,
// then local again; a new version starts local only.
func testCheckpointTiers(t *testing.T, s store.Store) {
	ctx := context.Background()
	j := create(t, s, newJob(t, testSpec("c", "vision"), "alice", at(0)))
	c := domain.CheckpointRecord{JobID: j.ID, Attempt: 1, Name: "step-1", Path: "/x/step-1", Size: 10, Files: 1, At: at(1), SHA256: "aa"}
	if _, err := s.RecordCheckpoint(ctx, c); err != nil {
		t.Fatal(err)
	}
	get := func() domain.CheckpointRecord {
		t.Helper()
		cs, err := s.ListCheckpoints(ctx, j.ID, false)
		if err != nil || len(cs) != 1 {
			t.Fatalf("checkpoints = %+v, %v", cs, err)
		}
		return cs[0]
	}
	if got := get(); got.Tier() != domain.TierLocal || !got.Object.IsZero() {
		t.Fatalf("new checkpoint tier %s (object %v), want local", got.Tier(), got.Object)
	}
	if err := s.MarkCheckpointMoved(ctx, j.ID, "step-1", at(2), nil); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("moving without an object copy: %v, want ErrNotFound", err)
	}
	if err := s.MarkCheckpointCopied(ctx, j.ID, "step-1", "bb", at(2)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("copied with another digest: %v, want ErrNotFound", err)
	}
	if err := s.MarkCheckpointCopied(ctx, j.ID, "step-1", "aa", at(2)); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkCheckpointCopied(ctx, j.ID, "step-1", "aa", at(3)); err != nil {
		t.Fatal(err)
	}
	if got := get(); got.Tier() != "both" || !got.Object.Equal(at(2)) {
		t.Fatalf("after the copy: tier %s object %v, want both since %v (the first copy)", got.Tier(), got.Object, at(2))
	}
	rec := domain.AuditRecord{At: at(4), Actor: "system", Action: "artifact.gc", Target: "job/1/checkpoints/step-1", Result: domain.AuditOK}
	if err := s.MarkCheckpointMoved(ctx, j.ID, "step-1", at(4), &rec); err != nil {
		t.Fatal(err)
	}
	if got := get(); got.Tier() != domain.TierObject || !got.LocalGone.Equal(at(4)) {
		t.Fatalf("after the move: tier %s local gone %v", got.Tier(), got.LocalGone)
	}
	audit, err := s.ListAudit(ctx, store.AuditFilter{})
	if err != nil || len(audit) == 0 || audit[len(audit)-1].Target != rec.Target {
		t.Fatalf("the move's audit record is missing: %+v, %v", audit, err)
	}
	if err := s.MarkCheckpointRestored(ctx, j.ID, "step-1"); err != nil {
		t.Fatal(err)
	}
	if got := get(); got.Tier() != "both" || !got.LocalGone.IsZero() {
		t.Fatalf("after the restore: tier %s", got.Tier())
	}
	c.SHA256, c.At = "cc", at(5)
	if added, err := s.RecordCheckpoint(ctx, c); err != nil || !added {
		t.Fatalf("new version: %v, %v", added, err)
	}
	if got := get(); got.Tier() != domain.TierLocal || !got.Object.IsZero() {
		t.Fatalf("a new version keeps the old one's object copy: tier %s", got.Tier())
	}
	if err := s.MarkCheckpointRestored(ctx, j.ID, "nope"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("restoring an unknown checkpoint: %v", err)
	}
}

func testCheckpointsAt(t *testing.T, s store.Store) {
	ctx := context.Background()
	j := create(t, s, newJob(t, testSpec("c", "vision"), "alice", at(0)))
	for i, name := range []string{"a", "b", "c"} {
		if _, err := s.RecordCheckpoint(ctx, domain.CheckpointRecord{JobID: j.ID, Attempt: 1, Name: name, Size: 1, Files: 1, At: at(i + 1)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.MarkCheckpointDeleted(ctx, j.ID, "b", at(9), nil); err != nil {
		t.Fatal(err)
	}
	held, err := s.ListCheckpointsHeld(ctx, at(9))
	if err != nil || len(held) != 3 {
		t.Fatalf("held since b's deletion = %+v, %v; want all three", held, err)
	}
	if held, _ = s.ListCheckpointsHeld(ctx, at(10)); len(held) != 2 || held[0].Name != "a" || held[1].Name != "c" {
		t.Fatalf("held after b's deletion = %+v; want a and c", held)
	}
	got, err := s.ListCheckpointsAt(ctx, at(1), at(3))
	var names []string
	for _, c := range got {
		names = append(names, c.Name)
	}
	if err != nil || !reflect.DeepEqual(names, []string{"a"}) {
		t.Fatalf("checkpoints in [1, 3) = %v, %v; want [a] (b is deleted, c is at 3)", names, err)
	}
}

func testStorageDays(t *testing.T, s store.Store) {
	ctx := context.Background()
	if d, err := s.LatestStorageDay(ctx); err != nil || !d.IsZero() {
		t.Fatalf("latest day of none = %v, %v", d, err)
	}
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	rows := []domain.StorageDay{
		{Day: day, JobID: 1, Tier: domain.TierLocal, Project: "p", Pool: "a", Submitter: "alice", JobName: "train", ByteSeconds: 86400 << 30},
		{Day: day, JobID: 1, Tier: domain.TierObject, Project: "p", Pool: "a", Submitter: "alice", JobName: "train", ByteSeconds: 7},
		{Day: day.AddDate(0, 0, 1), JobID: 2, Tier: domain.TierLocal, Project: "q", Pool: "b", Submitter: "bob", ByteSeconds: 9},
	}
	if err := s.RecordStorageDays(ctx, rows); err != nil {
		t.Fatal(err)
	}
	again := rows[0]
	again.ByteSeconds = 1
	if err := s.RecordStorageDays(ctx, []domain.StorageDay{again}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ListStorageDays(ctx, day, day.AddDate(0, 0, 2))
	if err != nil || !reflect.DeepEqual(got, rows) {
		t.Fatalf("storage days = %+v, %v; want %+v (a day written again is kept)", got, err, rows)
	}
	if got, _ := s.ListStorageDays(ctx, day.AddDate(0, 0, 1), day.AddDate(0, 0, 2)); len(got) != 1 || got[0].JobID != 2 {
		t.Fatalf("second day = %+v", got)
	}
	if d, err := s.LatestStorageDay(ctx); err != nil || !d.Equal(day.AddDate(0, 0, 1)) {
		t.Fatalf("latest day = %v, %v", d, err)
	}
}

func testManifestSizes(t *testing.T, s store.Store) {
	ctx := context.Background()
	j := create(t, s, newJob(t, testSpec("m", "vision"), "alice", at(0)))
	for _, m := range []domain.Manifest{
		{JobID: j.ID, Attempt: 1, At: at(1), Files: []domain.ArtifactFile{{Path: "a", Size: 3}, {Path: "b", Size: 4}}},
		{JobID: j.ID, Attempt: 2, At: at(2)},
	} {
		if err := s.RecordManifest(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.ManifestSizes(ctx)
	want := []store.ManifestSize{{JobID: j.ID, Attempt: 1, At: at(1), Bytes: 7}, {JobID: j.ID, Attempt: 2, At: at(2), Bytes: 0}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("manifest sizes = %+v, %v; want %+v", got, err, want)
	}
}
