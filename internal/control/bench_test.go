package control_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"trainyard/internal/clock"
	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/logs"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
)

// BenchmarkPreviewQueue is the read side of one control-loop cycle on the
// embedded store after one more submit: read pools, quotas and the jobs
// written since the last cycle, plan a full pass and publish the queue view.
// first-ms is the first cycle, which reads every active job. One pool of
// 1,000 nodes × 8 GPUs, 100 projects with quotas, n queued jobs.
func BenchmarkPreviewQueue(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("pending=%d", n), func(b *testing.B) {
			ctx := context.Background()
			dir := b.TempDir()
			st, err := sqlite.Open(ctx, filepath.Join(dir, "db.sqlite"))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			pool := domain.Pool{Name: "big", Executor: "local", Borrowing: true, Preemption: true}
			for i := range 1000 {
				pool.Nodes = append(pool.Nodes, domain.Node{Name: fmt.Sprintf("node-%04d", i), CPUs: 64, Memory: 512 << 30,
					GPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}})
			}
			if _, err := st.PutPool(ctx, pool, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); err != nil {
				b.Fatal(err)
			}
			for p := range 100 {
				name := fmt.Sprintf("proj-%03d", p)
				if err := st.PutProject(ctx, domain.Project{Name: name, Shares: float64(1 + p%3)}, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); err != nil {
					b.Fatal(err)
				}
				if err := st.PutQuota(ctx, domain.Quota{Project: name, Pool: "big", Guaranteed: domain.Limits{GPUs: 48},
					Borrow: domain.Limits{GPUs: 40}, MaxPriority: domain.PriorityUrgent}, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); err != nil {
					b.Fatal(err)
				}
			}
			start := time.Now()
			seedQueued(b, st, n)
			b.Logf("queued %d jobs in %v", n, time.Since(start).Round(time.Millisecond))
			ctl := control.New(control.Config{Store: st, Executor: &executortest.Fake{}, Clock: clock.Real{},
				Logs: logs.Layout{Root: filepath.Join(dir, "runs")}})
			start = time.Now()
			if err := ctl.PreviewQueue(ctx); err != nil { // reads every active job
				b.Fatal(err)
			}
			first := time.Since(start)
			// Then each cycle after one more submit: only what changed is read.
			extra := seedInput(b, "proj-007", 2, domain.PriorityNormal)
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				in := extra
				in.SubmittedAt = time.Now()
				in.OutputDir = func(id int64) string { return fmt.Sprintf("/out/%d", id) }
				if _, _, err := st.CreateJob(ctx, in, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := ctl.PreviewQueue(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(first.Milliseconds()), "first-ms")
		})
	}
}

// seedQueued creates n queued jobs of mixed shapes and priorities across
// 100 projects, from four concurrent callers (the store batches them).
func seedQueued(b *testing.B, st store.Store, n int) {
	b.Helper()
	ctx := context.Background()
	inputs := make([]store.NewJob, 0, 100*4*4)
	for p := range 100 {
		for _, gpus := range []int{1, 2, 4, 8} {
			for _, prio := range domain.Priorities() {
				inputs = append(inputs, seedInput(b, fmt.Sprintf("proj-%03d", p), gpus, prio))
			}
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				in := inputs[i%len(inputs)]
				in.SubmittedAt = time.Unix(1_700_000_000+int64(i), 0)
				in.OutputDir = func(id int64) string { return fmt.Sprintf("/out/%d", id) }
				if _, _, err := st.CreateJob(ctx, in, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// seedInput is the CreateJob input of a single-node training job.
func seedInput(b *testing.B, project string, gpus int, prio domain.Priority) store.NewJob {
	b.Helper()
	p := int(project[len(project)-1] - '0')
	spec := domain.Spec{Name: "train", Project: project, Pool: "big", Entrypoint: []string{"python", "train.py"},
		Resources: domain.Resources{GPUs: gpus, CPUs: float64(4 * gpus), Memory: domain.ByteSize(32*gpus) << 30, Nodes: 1},
		Policy:    domain.Policy{Priority: prio, Timeout: domain.Duration(time.Duration(1+p) * time.Hour), Preemptible: p%2 == 0}}
	raw, err := json.Marshal(spec)
	if err != nil {
		b.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	return store.NewJob{Spec: spec, SpecJSON: raw, SpecHash: "sha256:" + hex.EncodeToString(sum[:]), Submitter: "bench", Actor: "user:bench"}
}
