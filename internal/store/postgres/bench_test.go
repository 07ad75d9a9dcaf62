package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/storetest"
)

// BenchmarkStore runs the shared store benchmarks on PostgreSQL, each
// store in a schema of its own (openTest).
func BenchmarkStore(b *testing.B) {
	storetest.Benchmark(b, func(b *testing.B) store.Store { return openTest(b) }, storetest.BenchOptions{
		Seed:         seedJobs,
		SeedAttempts: seedAttempts,
		Batches: func(s store.Store) (int64, int64) {
			st := s.(*Store)
			return st.batches.Load(), st.batched.Load()
		},
	})
}

// seedJobs implements storetest.BenchOptions.Seed with one COPY, the
// fastest way into a table, ids given so that jobs[i] gets i+1. It then
// moves the id sequence past them, so later submits do not collide, and
// analyzes the table, so the planner reads it as the size it is rather
// than as the empty table it was.
func seedJobs(b *testing.B, st store.Store, spec store.NewJob, jobs []storetest.SeedJob) {
	b.Helper()
	s := st.(*Store)
	ctx := context.Background()
	if _, err := s.pool.Exec(ctx, insertSnapshotSQL, spec.SpecHash, string(spec.SpecJSON)); err != nil {
		b.Fatalf("seed: snapshot: %v", err)
	}
	r := spec.Spec.Resources
	rows := make([][]any, len(jobs))
	for i, j := range jobs {
		at := j.SubmittedAt.UnixNano()
		rows[i] = []any{int64(i + 1), j.Name, j.Project, spec.Spec.Pool, string(j.State), string(domain.ReasonSubmitted),
			string(spec.Spec.Policy.Priority), j.Submitter, at, at, spec.SpecHash, j.OutputDir,
			int64(r.GPUs), r.CPUs, int64(r.Memory), int64(r.Nodes)}
	}
	if _, err := s.pool.CopyFrom(ctx, pgx.Identifier{"jobs"}, []string{"id", "name", "project", "pool", "state", "reason",
		"priority", "submitter", "submitted_at", "updated_at", "spec_hash", "output_dir",
		"req_gpus", "req_cpus", "req_memory", "req_nodes"}, pgx.CopyFromRows(rows)); err != nil {
		b.Fatalf("seed: copy %d jobs: %v", len(jobs), err)
	}
	if _, err := s.pool.Exec(ctx, `SELECT setval('jobs_id_seq', (SELECT MAX(id) FROM jobs)); ANALYZE jobs`); err != nil {
		b.Fatalf("seed: %v", err)
	}
}

// seedAttempts implements storetest.BenchOptions.SeedAttempts with one
// INSERT from generate_series, then analyzes the table.
func seedAttempts(b *testing.B, st store.Store, n, perJob int, from time.Time, step, held time.Duration) {
	b.Helper()
	s := st.(*Store)
	ctx := context.Background()
	if _, err := s.pool.Exec(ctx, `INSERT INTO attempts (job_id, number, state, created_at, started_at, finished_at)
		SELECT i / $2 + 1, i % $2 + 1, CASE WHEN i % 10 = 0 THEN 'failed' ELSE 'succeeded' END, $3 + i * $4, $3 + i * $4, $3 + i * $4 + $5
		FROM generate_series(0::bigint, $1::bigint - 1) AS i`, n, perJob, from.UnixNano(), int64(step), int64(held)); err != nil {
		b.Fatalf("seed %d attempts: %v", n, err)
	}
	// The hours the attempts would have added as they ended.
	if err := s.RebuildUsage(ctx); err != nil {
		b.Fatalf("seed: %v", err)
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE attempts; ANALYZE usage_hours; ANALYZE jobs`); err != nil {
		b.Fatalf("seed: %v", err)
	}
}
