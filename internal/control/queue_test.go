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
)

// TestQueueEntriesNameTheSubmitter: the API filters the queue by who may
// list each job, which needs the job's submitter.
func TestQueueEntriesNameTheSubmitter(t *testing.T) {
	ctx := context.Background()
	st, dir := openStore(t)
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

// TestQueuePositionsCountPerPool: a waiting job's position is its place in
// its own pool's queue, the same with and without a pool filter.
func TestQueuePositionsCountPerPool(t *testing.T) {
	ctx := context.Background()
	st, dir := openStore(t)
	audit := domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK}
	pools := []string{"left", "right"}
	for _, name := range pools {
		pool := domain.Pool{Name: name, Executor: "local", Nodes: []domain.Node{{Name: name + "-n1", CPUs: 4, Memory: 8 << 30}}}
		if _, err := st.PutPool(ctx, pool, audit); err != nil {
			t.Fatal(err)
		}
		if err := st.PutQuota(ctx, domain.Quota{Project: "vision", Pool: name, Guaranteed: pool.Capacity(), MaxPriority: domain.PriorityUrgent}, audit); err != nil {
			t.Fatal(err)
		}
	}
	// Each job needs a whole node, so each pool starts its first and queues
	// the rest in submit order. The pools' submissions interleave, with more
	// in one pool than the other.
	want := map[string][]int64{} // each pool's waiting jobs, in queue order
	base := time.Now().Add(-time.Hour)
	for i, name := range []string{"left", "right", "left", "left", "right", "left", "right", "left"} {
		spec := domain.Spec{Name: fmt.Sprintf("job%d", i), Project: "vision", Pool: name, Entrypoint: []string{"true"},
			Resources: domain.Resources{CPUs: 4, Memory: 1 << 30, Nodes: 1}, Policy: domain.Policy{Priority: domain.PriorityNormal}}
		raw, _ := json.Marshal(spec)
		sum := sha256.Sum256(raw)
		j, _, err := st.CreateJob(ctx, store.NewJob{Spec: spec, SpecJSON: raw, SpecHash: "sha256:" + hex.EncodeToString(sum[:]), Submitter: "alice",
			Actor: "user:alice", SubmittedAt: base.Add(time.Duration(i) * time.Second),
			OutputDir: func(id int64) string { return fmt.Sprintf("/out/%d", id) }}, audit)
		if err != nil {
			t.Fatal(err)
		}
		want[name] = append(want[name], j.ID)
	}
	for _, name := range pools {
		want[name] = want[name][1:] // the first starts
	}
	ctl := control.New(control.Config{Store: st, Executor: &executortest.Fake{}, Clock: clock.Real{},
		Logs: logs.Layout{Root: filepath.Join(dir, "runs")}})
	if err := ctl.PreviewQueue(ctx); err != nil {
		t.Fatal(err)
	}
	// check reports whether q holds exactly each pool's waiting jobs in
	// queue order, at positions 1, 2, … within the pool.
	check := func(what string, q []domain.QueueEntry, pools ...string) {
		t.Helper()
		got := map[string][]int64{}
		for _, e := range q {
			got[e.Pool] = append(got[e.Pool], e.JobID)
			if n := len(got[e.Pool]); e.Position != n {
				t.Errorf("%s: job %d in pool %s at position %d, want %d (queue %+v)", what, e.JobID, e.Pool, e.Position, n, q)
			}
		}
		if len(got) != len(pools) {
			t.Errorf("%s: pools %v, want %v", what, got, pools)
		}
		for _, name := range pools {
			if fmt.Sprint(got[name]) != fmt.Sprint(want[name]) {
				t.Errorf("%s: pool %s queues %v, want %v", what, name, got[name], want[name])
			}
		}
	}
	all, err := ctl.Queue(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	check("unfiltered", all, pools...)
	for _, name := range pools {
		q, err := ctl.Queue(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		check("pool "+name, q, name)
		var same []domain.QueueEntry
		for _, e := range all {
			if e.Pool == name {
				same = append(same, e)
			}
		}
		if fmt.Sprint(q) != fmt.Sprint(same) {
			t.Errorf("pool %s filtered = %+v, want the unfiltered queue's entries of the pool %+v", name, q, same)
		}
	}
}
