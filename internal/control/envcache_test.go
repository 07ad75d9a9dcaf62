package control_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/service"
	"trainyard/internal/store"
)

// envCounter counts the environment reads of a store.
type envCounter struct {
	store.Store
	mu    sync.Mutex
	reads map[string]int
}

func (s *envCounter) GetEnv(ctx context.Context, name string, version int) (domain.Environment, error) {
	s.mu.Lock()
	s.reads[name]++
	s.mu.Unlock()
	return s.Store.GetEnv(ctx, name, version)
}

func (s *envCounter) readsOf(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads[name]
}

// A launch reads its job's environment version once for all the launches
// of jobs pinned to it; a version registered since is read when a job
// pinned to it launches.
func TestEnvironmentVersionReadOnce(t *testing.T) {
	var counter *envCounter
	r := newTunedRig(t, &executortest.Fake{}, func(cfg *control.Config) {
		counter = &envCounter{Store: cfg.Store.(store.Store), reads: map[string]int{}}
		cfg.Store = counter
	})
	ctx := context.Background()
	register := func(mode string) {
		t.Helper()
		if _, _, err := r.svc.Envs.RegisterEnv(ctx, admin, service.EnvDefinition{Name: "py3", Vars: map[string]string{"MODE": mode}}); err != nil {
			t.Fatal(err)
		}
	}
	modeOf := func(id int64) string {
		t.Helper()
		for _, l := range r.ex.Launches() {
			if l.JobID != id {
				continue
			}
			for _, kv := range l.Env {
				if v, ok := strings.CutPrefix(kv, "MODE="); ok {
					return v
				}
			}
		}
		t.Fatalf("job %d: no launch with MODE", id)
		return ""
	}
	register("one")
	for range 3 {
		j := r.wait(r.submit("name: e\nenv: py3@1\nentrypoint: [x]\n").ID, domain.JobSucceeded)
		if m := modeOf(j.ID); m != "one" {
			t.Errorf("job %d on py3@1 got MODE=%s", j.ID, m)
		}
	}
	if n := counter.readsOf("py3"); n != 1 {
		t.Errorf("py3 read %d times for three launches on py3@1, want once", n)
	}
	register("two")
	two := r.wait(r.submit("name: e\nenv: py3@2\nentrypoint: [x]\n").ID, domain.JobSucceeded)
	one := r.wait(r.submit("name: e\nenv: py3@1\nentrypoint: [x]\n").ID, domain.JobSucceeded)
	if m := modeOf(two.ID); m != "two" {
		t.Errorf("job on py3@2 got MODE=%s", m)
	}
	if m := modeOf(one.ID); m != "one" {
		t.Errorf("job on py3@1 got MODE=%s after py3@2 was registered", m)
	}
}
