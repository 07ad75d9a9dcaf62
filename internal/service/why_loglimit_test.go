package service_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor/local"
	"trainyard/internal/logs"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
)

// why says an attempt's log reached its limit, and how much was dropped,
// for a running and a finished job too, not only a failed one; a job whose
// log stayed under its limit gets no such line.
func TestWhySaysTheLogReachedItsLimit(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	layout := logs.Layout{Root: filepath.Join(dir, "runs")}
	svc := service.New(service.Config{Store: st, Logs: layout, Files: local.NewReader(layout.Root)})

	// start creates a job and its first attempt, running, with a log of
	// size bytes under a 1MiB limit.
	start := func(name string, size int) domain.Job {
		t.Helper()
		spec := domain.Spec{Name: name, Project: "vision", Pool: "standard", Entrypoint: []string{"train"},
			Resources: domain.Resources{CPUs: 1, Memory: 1 << 30, Nodes: 1}}
		raw, _ := json.Marshal(spec)
		sum := sha256.Sum256(raw)
		job, _, err := st.CreateJob(ctx, store.NewJob{Spec: spec, SpecJSON: raw, SpecHash: "sha256:" + hex.EncodeToString(sum[:]),
			Submitter: "alice", Actor: "user:alice", SubmittedAt: time.Now(), OutputDir: func(id int64) string { return fmt.Sprintf("/out/%d", id) }}, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK})
		if err != nil {
			t.Fatal(err)
		}
		apply(t, st, store.Change{JobID: job.ID, Move: domain.MoveStart(), At: time.Now(),
			Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting, Node: "n1"}})
		apply(t, st, store.Change{JobID: job.ID, Move: domain.MoveRun(), At: time.Now(),
			Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}})
		if err := os.MkdirAll(layout.AttemptDir(job.ID, 1), 0o755); err != nil {
			t.Fatal(err)
		}
		w, err := logs.Create(layout.LogPath(job.ID, 1), 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		line := logs.AppendLine(nil, time.Now(), logs.Stdout, []byte(strings.Repeat("x", 200)))
		for n := 0; n < size; n += len(line) {
			if _, err := w.Write(line); err != nil {
				t.Fatal(err)
			}
		}
		return job
	}
	finish := func(job domain.Job) {
		t.Helper()
		code := 0
		apply(t, st, store.Change{JobID: job.ID, Move: domain.MoveSucceed().Only(domain.JobRunning), At: time.Now(),
			Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptSucceeded,
				Reason: domain.ReasonCompleted, ExitCode: &code}})
	}
	note := func(job domain.Job) string {
		t.Helper()
		w, err := svc.Jobs.Explain(ctx, admin, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(w.Evidence, func(e string) bool { return strings.HasPrefix(e, "the log of attempt") })
		if i < 0 {
			return ""
		}
		return w.Evidence[i]
	}

	chatty := start("chatty", 3<<20) // well past the limit: some dropped
	got := note(chatty)
	if !strings.HasPrefix(got, "the log of attempt 1 reached its limit of 1MiB: ") || !strings.Contains(got, "MiB between its head and its tail was dropped so far (raise policy.log_limit") {
		t.Errorf("running job: %q", got)
	}
	finish(chatty)
	got = note(chatty)
	if !strings.HasPrefix(got, "the log of attempt 1 reached its limit of 1MiB: ") || !strings.Contains(got, "was dropped (raise policy.log_limit") || strings.Contains(got, "so far") {
		t.Errorf("succeeded job: %q", got)
	}

	// Just past the head: the log keeps the newest lines, none dropped yet.
	just := start("just", 600<<10)
	if got := note(just); got != "the log of attempt 1 reached its limit of 1MiB: from here on it keeps its head and only the newest lines (raise policy.log_limit, or print less)" {
		t.Errorf("running job at its limit: %q", got)
	}

	quiet := start("quiet", 100<<10)
	if got := note(quiet); got != "" {
		t.Errorf("running job under its limit: %q", got)
	}
	finish(quiet)
	if got := note(quiet); got != "" {
		t.Errorf("succeeded job under its limit: %q", got)
	}
}

func apply(t *testing.T, st store.Store, ch store.Change) {
	t.Helper()
	errs, err := st.Apply(context.Background(), []store.Change{ch})
	if err == nil {
		err = errs[0]
	}
	if err != nil {
		t.Fatalf("apply %+v: %v", ch, err)
	}
}
