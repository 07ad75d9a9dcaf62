package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/postgres"
	"trainyard/internal/store/postgres/pgtest"
	"trainyard/internal/store/sqlite"
)

// A copied store keeps every field of its checkpoints: digest, resume
// bookkeeping and deletion.
func TestStoreCopyKeepsCheckpoints(t *testing.T) {
	dsn := pgtest.Schema(t)
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "trainyard.db")
	src, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	spec := domain.Spec{Name: "c", Project: "p", Pool: "standard", Entrypoint: []string{"true"}}
	specJSON := []byte(`{"name":"c"}`)
	sum := sha256.Sum256(specJSON)
	j, _, err := src.CreateJob(ctx, store.NewJob{Spec: spec, SpecJSON: specJSON, SpecHash: "sha256:" + hex.EncodeToString(sum[:]),
		Submitter: "alice", SubmittedAt: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC), Actor: "user:alice",
		OutputDir: func(id int64) string { return "/artifacts/p/c" }}, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2025, 6, 1, 12, 1, 0, 123456789, time.UTC)
	for _, c := range []domain.CheckpointRecord{
		{JobID: j.ID, Attempt: 1, Name: "a", Path: "/artifacts/p/c/checkpoints/a", Size: 10, Files: 1, At: at, SHA256: "aa"},
		{JobID: j.ID, Attempt: 2, Name: "b", Path: "/artifacts/p/c/checkpoints/b", Size: 20, Files: 2, At: at.Add(time.Second), SHA256: "bb"},
	} {
		if _, err := src.RecordCheckpoint(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := src.MarkCheckpointResumed(ctx, j.ID, "a", 3); err != nil {
		t.Fatal(err)
	}
	if err := src.MarkCheckpointSuspect(ctx, j.ID, "a", "attempt 3 failed right after resuming from it"); err != nil {
		t.Fatal(err)
	}
	if err := src.MarkCheckpointDeleted(ctx, j.ID, "b", at.Add(time.Minute), nil); err != nil {
		t.Fatal(err)
	}
	want, err := src.ListCheckpoints(ctx, 0, true)
	if err != nil || len(want) != 2 || want[0].ResumedBy != 3 || want[0].Suspect == "" || want[1].Deleted.IsZero() {
		t.Fatalf("source checkpoints = %+v, %v", want, err)
	}
	src.Close()

	if err := copyStore(ctx, io.Discard, path, dsn); err != nil {
		t.Fatalf("copy: %v", err)
	}
	dst, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	got, err := dst.ListCheckpoints(ctx, 0, true)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("copied checkpoints = %+v, %v; want %+v", got, err, want)
	}
}
