package service_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/service"
	"trainyard/internal/store/sqlite/sqlitetest"
)

// admitService is a service whose executors can do what caps says, with
// a pool "default" of two nodes.
func admitService(t *testing.T, caps func(string) executor.Capabilities) *service.Service {
	t.Helper()
	svc := service.New(service.Config{Store: sqlitetest.Open(t, t.TempDir()), Clock: clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)),
		ArtifactsRoot: filepath.Join(t.TempDir(), "artifacts"), Capabilities: caps})
	pool := domain.Pool{Name: "default", Nodes: []domain.Node{{Name: "n1", CPUs: 8, Memory: 32 << 30}, {Name: "n2", CPUs: 8, Memory: 32 << 30}}}
	if _, _, err := svc.Pools.PutPool(context.Background(), admin, pool); err != nil {
		t.Fatal(err)
	}
	return svc
}

// Admission asks the pool's executor whether it runs multi-node jobs
// (service.Config.Capabilities) instead of assuming.
func TestAdmitMultiNodeAsksTheExecutor(t *testing.T) {
	for _, multi := range []bool{false, true} {
		var asked []string
		svc := admitService(t, func(name string) executor.Capabilities {
			asked = append(asked, name)
			return executor.Capabilities{MultiNode: multi}
		})
		_, _, err := svc.Jobs.Submit(context.Background(), admin, service.SubmitInput{Doc: []byte("name: gang\nentrypoint: [true]\nresources: {cpus: 1, memory: 1GiB, nodes: 2}\n")})
		refused := err != nil && strings.Contains(err.Error(), "runs single-node jobs")
		if refused == multi {
			t.Errorf("multi-node executor %v: submit of 2 nodes = %v", multi, err)
		}
		if refused && !strings.Contains(err.Error(), "(Kubernetes, Slurm)") {
			t.Errorf("refusal %q does not name the executors that run multi-node jobs", err)
		}
		if len(asked) == 0 || asked[0] != service.ExecutorLocal {
			t.Errorf("asked about executors %v, want %q", asked, service.ExecutorLocal)
		}
	}
}

// A warning before the timeout (policy.warn) is refused, naming the field
// and the fix, in a pool whose executor cannot send it (Kubernetes
// without the in-job agent), and accepted where it can.
func TestAdmitWarnAsksTheExecutor(t *testing.T) {
	for _, warn := range []bool{false, true} {
		svc := admitService(t, func(string) executor.Capabilities { return executor.Capabilities{Warn: warn} })
		spec := "name: warned\nentrypoint: [true]\nresources: {cpus: 1, memory: 1GiB}\npolicy: {timeout: 1h, warn: {signal: USR1, before: 5m}}\n"
		_, _, err := svc.Jobs.Submit(context.Background(), admin, service.SubmitInput{Doc: []byte(spec)})
		switch {
		case warn && err != nil:
			t.Errorf("an executor that sends warnings: submit = %v", err)
		case !warn && (err == nil || !strings.Contains(err.Error(), "policy.warn") || !strings.Contains(err.Error(), "remove policy.warn")):
			t.Errorf("an executor that cannot warn: submit = %v, want a refusal naming policy.warn and the fix", err)
		}
	}
}
