package router_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/executor/router"
)

// TestRouterExercise: a router over one executor passes the conformance
// suite, as that executor does alone.
func TestRouterExercise(t *testing.T) {
	executortest.Exercise(t, func(t *testing.T) executor.Executor {
		f := &executortest.Fake{Caps: executor.Capabilities{MultiNode: true}}
		r, err := router.New("local", map[string]executor.Executor{"local": f}, f)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}, executortest.Options{})
}

func newRouter(t *testing.T) (*router.Router, *executortest.Fake, *executortest.Fake) {
	t.Helper()
	local := &executortest.Fake{Caps: executor.Capabilities{CPULimits: true}}
	kube := &executortest.Fake{Caps: executor.Capabilities{MultiNode: true, Containers: true}}
	r, err := router.New("local", map[string]executor.Executor{"local": local, "gpu-cluster": kube}, local)
	if err != nil {
		t.Fatal(err)
	}
	return r, local, kube
}

func launch(id int64, pool, exec string) executor.Launch {
	return executor.Launch{Ref: executor.Ref{JobID: id, Attempt: 1}, Pool: pool, Executor: exec, Argv: []string{"true"}}
}

// next returns the next event for ref from the router, skipping others.
func next(t *testing.T, r *router.Router, ref executor.Ref, kind executor.EventKind) executor.Event {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-r.Events():
			if ev.Ref == ref && ev.Kind == kind {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %s event for %s", kind, ref)
		}
	}
}

func refs(ls []executor.Launch) []executor.Ref {
	var out []executor.Ref
	for _, l := range ls {
		out = append(out, l.Ref)
	}
	return out
}

func TestRouterRoutesByPoolExecutor(t *testing.T) {
	ctx := context.Background()
	r, local, kube := newRouter(t)
	if got := r.Names(); !slices.Equal(got, []string{"local", "gpu-cluster"}) {
		t.Errorf("Names() = %v, want the default first", got)
	}
	if c := r.Capabilities(); !c.MultiNode || !c.Containers || !c.CPULimits {
		t.Errorf("Capabilities() = %+v, want what any executor can do", c)
	}
	for _, l := range []executor.Launch{launch(1, "default", ""), launch(2, "default", "local"), launch(3, "a100", "gpu-cluster")} {
		if err := r.Launch(ctx, l); err != nil {
			t.Fatalf("Launch(%s): %v", l.Ref, err)
		}
		next(t, r, l.Ref, executor.Exited) // both executors' events come through
	}
	if got := refs(local.Launches()); len(got) != 2 || got[0].JobID != 1 || got[1].JobID != 2 {
		t.Errorf("local launched %v, want jobs 1 and 2", got)
	}
	if got := refs(kube.Launches()); len(got) != 1 || got[0].JobID != 3 {
		t.Errorf("gpu-cluster launched %v, want job 3", got)
	}

	// Calls for a launched attempt go to its executor only.
	ref := executor.Ref{JobID: 3, Attempt: 1}
	if err := r.Stop(ctx, ref, executor.StopRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Release(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if s := local.Stops(); len(s) != 0 {
		t.Errorf("local got stops %v for an attempt on gpu-cluster", s)
	}
	if s := kube.Stops(); !slices.Equal(s, []executor.Ref{ref}) {
		t.Errorf("gpu-cluster stops %v, want %v", s, ref)
	}
}

func TestRouterRefuses(t *testing.T) {
	ctx := context.Background()
	r, local, kube := newRouter(t)

	err := r.Launch(ctx, launch(1, "h100", "slurm-east"))
	if err == nil || !strings.Contains(err.Error(), `pool "h100"`) || !strings.Contains(err.Error(), `"slurm-east"`) ||
		!strings.Contains(err.Error(), "local, gpu-cluster") {
		t.Errorf("launch on an unconfigured executor: %v; want the pool, the executor and those configured named", err)
	}
	l := launch(2, "default", "")
	l.Resources.Nodes = 2
	if err := r.Launch(ctx, l); err == nil || !strings.Contains(err.Error(), "single-node") {
		t.Errorf("multi-node launch on the local executor: %v, want refused", err)
	}
	if n := len(local.Launches()) + len(kube.Launches()); n != 0 {
		t.Errorf("%d launches reached an executor; want none", n)
	}
	l.Executor = "gpu-cluster"
	if err := r.Launch(ctx, l); err != nil {
		t.Errorf("multi-node launch on gpu-cluster: %v", err)
	}
	if _, err := router.New("nope", map[string]executor.Executor{"local": local}, local); err == nil {
		t.Error("New with a default that is not given: no error")
	}
}

// TestRouterUnknownAttempt: after a restart the router has launched
// nothing; a Stop or Release for an attempt that ended before goes to
// every executor, and an executor that does not know it is no error
// unless none does.
func TestRouterUnknownAttempt(t *testing.T) {
	ctx := context.Background()
	r, local, kube := newRouter(t)
	ref := executor.Ref{JobID: 9, Attempt: 2}
	if err := r.Release(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(ctx, ref, executor.StopRequest{}); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(local.Stops(), ref) || !slices.Contains(kube.Stops(), ref) {
		t.Errorf("stops: local %v, gpu-cluster %v; want the attempt asked of both", local.Stops(), kube.Stops())
	}

	notFound := func(ctx context.Context, ref executor.Ref, req executor.StopRequest) error {
		return fmt.Errorf("stop %s: %w", ref, domain.ErrNotFound)
	}
	local.StopFunc = notFound
	if err := r.Stop(ctx, ref, executor.StopRequest{}); err != nil {
		t.Errorf("one executor knows the attempt: %v", err)
	}
	kube.StopFunc = notFound
	if err := r.Stop(ctx, ref, executor.StopRequest{}); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("no executor knows the attempt: %v, want ErrNotFound", err)
	}
}

// followingFake is an executor that wants to know who follows a log.
type followingFake struct {
	*executortest.Fake
	followed []executor.Ref
}

func (f *followingFake) Following(ref executor.Ref) { f.followed = append(f.followed, ref) }

// Following an attempt's log tells the executor that runs it, when it
// wants to know; reading it without following does not.
func TestRouterTellsWhoFollowsALog(t *testing.T) {
	ctx := context.Background()
	local := &executortest.Fake{}
	kube := &followingFake{Fake: &executortest.Fake{}}
	r, err := router.New("local", map[string]executor.Executor{"local": local, "gpu-cluster": kube}, local)
	if err != nil {
		t.Fatal(err)
	}
	l := launch(3, "a100", "gpu-cluster")
	if err := r.Launch(ctx, l); err != nil {
		t.Fatal(err)
	}
	_ = r.Logs(ctx, l.Ref, executor.LogQuery{}, io.Discard)
	if len(kube.followed) != 0 {
		t.Errorf("reading the log told the executor %v, want nothing", kube.followed)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond) // the fake's follow waits for the attempt's end
	defer cancel()
	_ = r.Logs(short, l.Ref, executor.LogQuery{Follow: true}, io.Discard)
	if !slices.Equal(kube.followed, []executor.Ref{l.Ref}) {
		t.Errorf("following the log told the executor %v, want %v", kube.followed, l.Ref)
	}
}
