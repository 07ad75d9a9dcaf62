package control_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"trainyard/internal/clock"
	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/logs"
	"trainyard/internal/service"
)

// An active attempt this loop neither launched nor reattached to — one a
// deposed leader created after this leader started — is reattached to
// once it is AdoptAfter old, and runs to its end.
func TestStrayAttemptIsAdopted(t *testing.T) {
	st, dir := openStore(t)
	ex := &executortest.Fake{}
	var fenced atomic.Int32
	layout := logs.Layout{Root: filepath.Join(dir, "runs")}
	ctl := control.New(control.Config{Store: st, Executor: ex, Clock: clock.Real{}, Logs: layout,
		BaseEnv: []string{"PATH=/usr/bin:/bin"}, AdoptAfter: 50 * time.Millisecond,
		// The first launch is refused as if this replica had just lost the
		// lead: its placement is stored, its launch never happens.
		Fence: func(context.Context) error {
			if fenced.Add(1) == 1 {
				return errors.New("term ended")
			}
			return nil
		}})
	svc := service.New(service.Config{Store: st, Logs: layout, ArtifactsRoot: filepath.Join(dir, "artifacts"), Wake: ctl.Wake})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctl.Run(ctx) }()
	defer func() { cancel(); <-done }()
	r := &rig{t: t, st: st, svc: svc, ex: ex, dir: dir}
	pool := domain.Pool{Name: "default", Executor: "local", Nodes: []domain.Node{{Name: "fake", CPUs: 8, Memory: 64 << 30}}}
	if _, _, err := svc.Pools.PutPool(ctx, admin, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Pools.SetQuota(ctx, admin, domain.Quota{Project: "default", Pool: "default", Guaranteed: pool.Capacity(), MaxPriority: domain.PriorityUrgent}); err != nil {
		t.Fatal(err)
	}
	j := r.submit("name: stray\nentrypoint: [train]\n")
	r.wait(j.ID, domain.JobSucceeded)
	if n := len(ex.Launches()); n != 1 {
		t.Fatalf("%d launches, want exactly one (the adoption)", n)
	}
	if atts := r.attempts(j.ID); len(atts) != 1 {
		t.Fatalf("attempts = %+v, want one", atts)
	}
}
