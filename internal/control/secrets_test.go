package control_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"trainyard/internal/clock"
	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/logs"
	"trainyard/internal/secrets"
	"trainyard/internal/service"
)

// secretRig runs a controller whose Secrets func is resolve (nil: the
// service's ResolveSecrets).
func secretRig(t *testing.T, ex *executortest.Fake, resolve func(context.Context, string, []string) ([]string, []string, error)) *rig {
	t.Helper()
	st, dir := openStore(t)
	key, _ := secrets.NewKey(bytes.Repeat([]byte{3}, secrets.KeySize))
	r := &rig{t: t, st: st, ex: ex, dir: dir}
	var svc *service.Service
	if resolve == nil {
		resolve = func(ctx context.Context, project string, names []string) ([]string, []string, error) {
			return svc.Secrets.ResolveSecrets(ctx, project, names)
		}
	}
	layout := logs.Layout{Root: filepath.Join(dir, "runs")}
	ctl := control.New(control.Config{Store: st, Executor: ex, Clock: clock.Real{}, Logs: layout,
		RetryBackoff: time.Millisecond, Grace: time.Second, BaseEnv: []string{"PATH=/usr/bin:/bin"}, Secrets: resolve})
	svc = service.New(service.Config{Store: st, Logs: layout, ArtifactsRoot: filepath.Join(dir, "artifacts"),
		Wake: ctl.Wake, Keyring: secrets.NewKeyring(key)})
	r.svc = svc
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctl.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("control loop: %v", err)
		}
	})
	inv, _ := ex.Inventory(context.Background())
	pool := domain.Pool{Name: "default", Executor: "local"}
	for _, n := range inv.Nodes {
		pool.Nodes = append(pool.Nodes, domain.Node{Name: n.Name, CPUs: n.CPUs, Memory: n.Memory, GPUs: n.GPUs})
	}
	if _, _, err := svc.Pools.PutPool(context.Background(), admin, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Pools.SetQuota(context.Background(), admin, domain.Quota{Project: "default", Pool: "default",
		Guaranteed: pool.Capacity(), MaxPriority: domain.PriorityUrgent}); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSecretsInjectedAndRedacted(t *testing.T) {
	r := secretRig(t, &executortest.Fake{}, nil)
	ctx := context.Background()
	for _, s := range []struct{ project, name, value string }{
		{"", "TOKEN", "global-token"}, {"default", "TOKEN", "project-token"}, {"", "OTHER", "other-value"},
	} {
		if _, err := r.svc.Secrets.SetSecret(ctx, admin, s.project, s.name, []byte(s.value)); err != nil {
			t.Fatal(err)
		}
	}
	j := r.submit("name: s\nentrypoint: [x]\nsecrets: [TOKEN, OTHER]\n")
	r.wait(j.ID, domain.JobSucceeded)
	l := r.ex.Launches()[0]
	for _, want := range []string{"TOKEN=project-token", "OTHER=other-value", "PATH=/usr/bin:/bin"} {
		if !slices.Contains(l.Env, want) {
			t.Errorf("environment lacks %s: %q", want, l.Env)
		}
	}
	if slices.Contains(l.Env, "TOKEN=global-token") {
		t.Errorf("the shadowed global secret reached the job")
	}
	if want := []string{"project-token", "other-value"}; !slices.Equal(l.Redact, want) {
		t.Errorf("Redact = %q, want %q", l.Redact, want)
	}
}

func TestSecretsUnresolvableFailTheLaunch(t *testing.T) {
	r := secretRig(t, &executortest.Fake{}, func(context.Context, string, []string) ([]string, []string, error) {
		return nil, nil, errors.New("secret TOKEN no longer exists")
	})
	if _, err := r.svc.Secrets.SetSecret(context.Background(), admin, "", "TOKEN", []byte("the-value")); err != nil {
		t.Fatal(err)
	}
	j := r.wait(r.submit("name: s\nentrypoint: [x]\nsecrets: [TOKEN]\n").ID, domain.JobFailed)
	if j.Reason != domain.ReasonLaunchFailed || !strings.Contains(j.Message, "TOKEN no longer exists") {
		t.Errorf("job %s %q, want LaunchFailed naming the secret", j.Reason, j.Message)
	}
	if n := len(r.ex.Launches()); n != 0 {
		t.Errorf("%d launches reached the executor, want 0", n)
	}
}
