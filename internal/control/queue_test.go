package control_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
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

// TestQueueEntriesNameTheSubmitter: the API filters the queue by who may
// list each job, which needs the job's submitter.
func TestQueueEntriesNameTheSubmitter(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	pool := domain.Pool{Name: "small", Executor: "local", Nodes: []domain.Node{{Name: "n1", CPUs: 4, Memory: 8 << 30}}}
	if _, err := st.PutPool(ctx, pool, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutQuota(ctx, domain.Quota{Project: "vision", Pool: "small", Guaranteed: pool.Capacity(), MaxPriority: domain.PriorityUrgent}, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); err != nil {
		t.Fatal(err)
	}
	for i, who := range []string{"alice", "bob"} { // each needs the whole node: bob's waits
		spec := domain.Spec{Name: "train", Project: "vision", Pool: "small", Entrypoint: []string{"true"},
			Resources: domain.Resources{CPUs: 4, Memory: 1 << 30, Nodes: 1}, Policy: domain.Policy{Priority: domain.PriorityNormal}}
		raw, _ := json.Marshal(spec)
		sum := sha256.Sum256(raw)
		if _, _, err := st.CreateJob(ctx, store.NewJob{Spec: spec, SpecJSON: raw, SpecHash: "sha256:" + hex.EncodeToString(sum[:]), Submitter: who,
			Actor: "user:" + who, SubmittedAt: time.Now().Add(time.Duration(i) * time.Second),
			OutputDir: func(id int64) string { return fmt.Sprintf("/out/%d", id) }}, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}); err != nil {
			t.Fatal(err)
		}
	}
	ctl := control.New(control.Config{Store: st, Executor: &executortest.Fake{}, Clock: clock.Real{},
		Logs: logs.Layout{Root: filepath.Join(dir, "runs")}})
	if err := ctl.PreviewQueue(ctx); err != nil {
		t.Fatal(err)
	}
	q, err := ctl.Queue(ctx, "")
	if err != nil || len(q) != 1 || q[0].Submitter != "bob" || q[0].Project != "vision" {
		t.Fatalf("queue = %+v, %v; want bob's job, with its submitter", q, err)
	}
	if want := (domain.Resources{CPUs: 4, Memory: 1 << 30, Nodes: 1}); q[0].Resources != want {
		t.Errorf("queue entry's request = %+v, want %+v", q[0].Resources, want)
	}
	if q, err := ctl.Queue(ctx, "small"); err != nil || len(q) != 1 || q[0].Pool != "small" || q[0].Name != "train" || q[0].Position != 1 {
		t.Fatalf("queue of pool small = %+v, %v; want bob's job first", q, err)
	}
	if q, err := ctl.Queue(ctx, "other"); err != nil || len(q) != 0 {
		t.Fatalf("queue of pool other = %+v, %v; want none", q, err)
	}
}
