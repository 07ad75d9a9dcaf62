package sqlite

import (
	"context"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/storetest"
)

// BenchmarkStore runs the shared store benchmarks on SQLite.
func BenchmarkStore(b *testing.B) {
	storetest.Benchmark(b, func(b *testing.B) store.Store { return openTest(b) }, storetest.BenchOptions{
		InProcess:    true,
		Seed:         seedJobs,
		SeedAttempts: seedAttempts,
		Batches: func(s store.Store) (int64, int64) {
			st := s.(*Store)
			return st.batches.Load(), st.batched.Load()
		},
	})
}

// seedJobs implements storetest.BenchOptions.Seed with plain INSERTs in
// one write transaction: through CreateJob, each job would also write its
// event and audit record and wait for a batch of its own.
func seedJobs(b *testing.B, st store.Store, spec store.NewJob, jobs []storetest.SeedJob) {
	b.Helper()
	s := st.(*Store)
	r := spec.Spec.Resources
	err := s.write(context.Background(), func(w *writer) error {
		if _, err := w.exec(insertSnapshotSQL, spec.SpecHash, spec.SpecJSON); err != nil {
			return err
		}
		for _, j := range jobs {
			at := j.SubmittedAt.UnixNano()
			if _, err := w.exec(`INSERT INTO jobs (name, project, pool, state, reason, message, priority, submitter,
				submitted_at, updated_at, spec_hash, output_dir, idempotency_key, req_gpus, req_cpus, req_memory, req_nodes)
				VALUES (?, ?, ?, ?, ?, '', ?, ?, ?, ?, ?, ?, '', ?, ?, ?, ?)`,
				j.Name, j.Project, spec.Spec.Pool, j.State, domain.ReasonSubmitted, spec.Spec.Policy.Priority, j.Submitter,
				at, at, spec.SpecHash, j.OutputDir, r.GPUs, r.CPUs, int64(r.Memory), r.Nodes); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatalf("seed %d jobs: %v", len(jobs), err)
	}
}

// seedAttempts implements storetest.BenchOptions.SeedAttempts with one
// INSERT from a recursive count, in one write transaction.
func seedAttempts(b *testing.B, st store.Store, n, perJob int, from time.Time, step, held time.Duration) {
	b.Helper()
	s := st.(*Store)
	err := s.write(context.Background(), func(w *writer) error {
		_, err := w.exec(`WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?)
			INSERT INTO attempts (job_id, number, state, created_at, started_at, finished_at)
			SELECT i / ? + 1, i % ? + 1, CASE WHEN i % 10 = 0 THEN 'failed' ELSE 'succeeded' END, ? + i * ?, ? + i * ?, ? + i * ? + ? FROM n`,
			n, perJob, perJob, from.UnixNano(), int64(step), from.UnixNano(), int64(step), from.UnixNano(), int64(step), int64(held))
		return err
	})
	if err != nil {
		b.Fatalf("seed %d attempts: %v", n, err)
	}
	// The hours the attempts would have added as they ended.
	if err := s.RebuildUsage(context.Background()); err != nil {
		b.Fatalf("seed: %v", err)
	}
}
