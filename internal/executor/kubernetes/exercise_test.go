package kubernetes_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/executor/kubernetes"
	"trainyard/internal/executor/kubernetes/kubetest"
	"trainyard/internal/executor/local"
	"trainyard/internal/logs"
)

// procPool labels the process nodes: the executors of these tests place
// their pods there only.
const procPool = "process"

// procWorld is the Kubernetes executor on process nodes (kubetest's
// process kubelet): its pods' commands run on this machine, with the
// environment, working directory and signals the executor's Pod spec
// gives them, and their logs come through the API server's pods/log.
type procWorld struct {
	c    *kubetest.Cluster
	runs logs.Layout // where attempts keep their logs and outcomes
}

// TestProcessNodes runs the conformance suite, and what only Kubernetes
// shows (OOM from a container status, a restart, a multi-node attempt's
// ranks), on two process nodes named as the suite's placements name
// them (node-a, node-b).
func TestProcessNodes(t *testing.T) {
	c := kubetest.Shared(t)
	for _, name := range []string{"node-a", "node-b"} {
		c.ProcessNode(t, kubetest.Node{Name: name, CPUs: "16", Memory: "64Gi", GPUs: 4,
			Labels: map[string]string{"trainyard.io/test-pool": procPool}})
	}
	w := &procWorld{c: c, runs: logs.Layout{Root: t.TempDir()}}

	t.Run("Exercise", func(t *testing.T) {
		t.Parallel()
		executortest.Exercise(t, func(t *testing.T) executor.Executor { return w.exec(t, c.Namespace(t)) }, executortest.Options{
			SignalExitCodes: true,
			MergedStreams:   true,
			ContainerEnv:    true,
			ImageWorkDir:    true,
			PodNetwork:      true,
			NoSupervisor:    true,
			NoAgent:         true,
		})
	})
	t.Run("OOMKilled", func(t *testing.T) { t.Parallel(); w.testOOM(t) })
	t.Run("TimeoutFromStart", func(t *testing.T) { t.Parallel(); w.testTimeoutFromStart(t) })
	t.Run("WarnWithoutAgent", func(t *testing.T) { t.Parallel(); w.testWarnWithoutAgent(t) })
	t.Run("Restart", func(t *testing.T) { t.Parallel(); w.testRestart(t) })
	t.Run("MultiNode", func(t *testing.T) { t.Parallel(); w.testMultiNode(t) })
}

// layoutExec launches attempts where the control loop does (in the
// runs directory's layout, Config.Files' local reader reading them
// there), whatever directories the harness chose.
type layoutExec struct {
	*kubernetes.Executor
	runs logs.Layout
}

func (e layoutExec) Launch(ctx context.Context, l executor.Launch) error {
	l.Dir = e.runs.AttemptDir(l.JobID, l.Attempt)
	l.LogPath = e.runs.LogPath(l.JobID, l.Attempt)
	return e.Executor.Launch(ctx, l)
}

// exec is a new executor on the process nodes, in namespace ns.
func (w *procWorld) exec(t *testing.T, ns string) layoutExec {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ex, err := kubernetes.New(ctx, kubernetes.Config{REST: w.c.Config, Namespace: ns, Image: "example.com/trainer:1",
		NodeSelector: map[string]string{"trainyard.io/test-pool": procPool}, Files: local.NewReader(w.runs.Root)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ex.Close() })
	return layoutExec{Executor: ex, runs: w.runs}
}

// testTimeoutFromStart: an attempt's timeout counts from its start, not
// from its Job's creation: a pod that takes longer to start than the
// timeout (an image pull) still runs, and gets SIGTERM once the timeout
// has passed since its start.
func (w *procWorld) testTimeoutFromStart(t *testing.T) {
	h := executortest.NewHarness(t, w.exec(t, w.c.Namespace(t)))
	p := executortest.Program{OnTerm: "terminated", Steps: []executortest.Step{{Out: "running"}, {Block: true}}}
	l := h.Run(t, p, func(l *executor.Launch) {
		l.Env = append(l.Env, kubetest.EnvStartMS+"=2500")
		l.Timeout = 1500 * time.Millisecond
		l.Grace = 300 * time.Millisecond
	})
	started := h.Wait(t, l.Ref, executor.Started)
	ev := h.Wait(t, l.Ref, executor.Exited)
	checkExit(t, ev, domain.AttemptTimedOut, domain.ReasonTimeout, nil)
	// The grace period Kubernetes gave: whole seconds, rounded up.
	if !strings.Contains(ev.Message, "timeout of 1.5s") || !strings.Contains(ev.Message, "grace period of 1s") {
		t.Errorf("message %q does not name the timeout and the grace period given", ev.Message)
	}
	// The start time is given in whole seconds.
	if ran := ev.At.Sub(started.At); ran < 1500*time.Millisecond-time.Second {
		t.Errorf("it ran %s, less than its timeout", ran)
	}
	if got := h.LogLines(t, l.Ref, executor.LogQuery{}); !slices.Equal(got, []string{"running", "terminated"}) {
		t.Errorf("log %q, want the program's lines up to its SIGTERM", got)
	}
}

// testWarnWithoutAgent: an executor without the in-job agent cannot send
// a launch's warning (admission refuses such jobs, but a pool's executor
// can lose its agent after one was admitted): the attempt runs, and its
// log says why no warning came and how to have one.
func (w *procWorld) testWarnWithoutAgent(t *testing.T) {
	h := executortest.NewHarness(t, w.exec(t, w.c.Namespace(t)))
	p := executortest.Program{OnWarn: "warned", Steps: []executortest.Step{{Out: "ran"}}}
	l := h.Run(t, p, func(l *executor.Launch) {
		l.Timeout = time.Hour
		l.Warn = executor.Warn{Signal: "USR1", Before: 10 * time.Minute}
	})
	checkExit(t, h.Wait(t, l.Ref, executor.Exited), domain.AttemptSucceeded, domain.ReasonCompleted, intp(0))
	if got := h.LogLines(t, l.Ref, executor.LogQuery{}); !slices.Equal(got, []string{"ran"}) {
		t.Errorf("log %q, want the program's line", got)
	}
	said := strings.Join(h.LogLines(t, l.Ref, executor.LogQuery{Stream: executor.StreamSystem}), "\n")
	if !strings.Contains(said, "no SIGUSR1 will come 10m before the timeout") || !strings.Contains(said, "agent.image") {
		t.Errorf("system lines %q do not say why no warning comes", said)
	}
}

// testOOM: a container the kubelet reports OOMKilled (the process
// kubelet takes the reason from TRAINYARD_KWOK_REASON) ends the attempt
// OOMKilled, with its exit code and its log.
func (w *procWorld) testOOM(t *testing.T) {
	h := executortest.NewHarness(t, w.exec(t, w.c.Namespace(t)))
	l := h.Run(t, executortest.Program{Exit: 137, Steps: []executortest.Step{{Out: "allocating"}}}, func(l *executor.Launch) {
		l.Env = append(l.Env, kubetest.EnvReason+"=OOMKilled")
	})
	ev := h.Wait(t, l.Ref, executor.Exited)
	checkExit(t, ev, domain.AttemptFailed, domain.ReasonOOMKilled, intp(137))
	if !strings.Contains(ev.Message, "memory") {
		t.Errorf("message %q does not say memory", ev.Message)
	}
	if got := h.LogLines(t, l.Ref, executor.LogQuery{}); !slices.Equal(got, []string{"allocating"}) {
		t.Errorf("log %q", got)
	}
}

// testRestart is a server restart: the first executor goes away while
// two attempts run; one of them ends while no executor watches. A fresh
// executor on the same cluster, launched with the same attempts,
// reattaches: it reports the one that ended with its outcome and its
// whole log (each line once), and still runs and stops the other.
func (w *procWorld) testRestart(t *testing.T) {
	ns := w.c.Namespace(t)
	ex1 := w.exec(t, ns)
	h1 := executortest.NewHarness(t, ex1)
	gate := filepath.Join(t.TempDir(), "gate")
	ending := h1.Launch(t, []string{"/bin/sh", "-c", `echo before; while [ ! -e "$GATE" ]; do sleep 0.05; done; echo after; exit 4`},
		func(l *executor.Launch) { l.Env = append(l.Env, "GATE="+gate) })
	running := h1.Run(t, executortest.Program{OnTerm: "bye", Steps: []executortest.Step{{Out: "up"}, {Block: true}}}, nil)
	h1.WaitLine(t, ending.Ref, "before")
	h1.WaitLine(t, running.Ref, "up")
	_ = ex1.Close()

	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cs := w.c.Client(t)
	if err := kubetest.WaitFor(context.Background(), 30*time.Second, "the ending attempt's pod to fail", func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelJob + "=" + strconv.FormatInt(ending.JobID, 10)})
		return err == nil && len(pods.Items) == 1 && pods.Items[0].Status.Phase == "Failed", err
	}); err != nil {
		t.Fatal(err)
	}

	ex2 := w.exec(t, ns)
	h2 := executortest.NewHarness(t, ex2)
	for _, l := range []executor.Launch{ending, running} {
		if err := ex2.Launch(context.Background(), l); err != nil {
			t.Fatal(err)
		}
	}
	h2.Wait(t, ending.Ref, executor.Started)
	checkExit(t, h2.Wait(t, ending.Ref, executor.Exited), domain.AttemptFailed, domain.ReasonExitCode, intp(4))
	if got := h2.LogLines(t, ending.Ref, executor.LogQuery{}); !slices.Equal(got, []string{"before", "after"}) {
		t.Errorf("the log of the attempt that ended unwatched is %q, want before and after, once each; whole log:\n%v", got,
			h2.LogLines(t, ending.Ref, executor.LogQuery{Timestamps: true}))
	}
	h2.Wait(t, running.Ref, executor.Started)
	if n := len(h2.Events(running.Ref)); n != 1 {
		t.Errorf("the running attempt has %d events, want Started only: %+v", n, h2.Events(running.Ref))
	}
	if err := ex2.Stop(context.Background(), running.Ref, executor.StopRequest{Grace: time.Minute}); err != nil {
		t.Fatal(err)
	}
	checkExit(t, h2.Wait(t, running.Ref, executor.Exited), domain.AttemptCanceled, domain.ReasonCanceledByUser, nil)
	if got := h2.LogLines(t, running.Ref, executor.LogQuery{}); !slices.Equal(got, []string{"up", "bye"}) {
		t.Errorf("the log of the stopped attempt is %q, want up and bye, once each", got)
	}
}

// testMultiNode: a two-node attempt is an Indexed Job whose two pods run
// on the two nodes, each with its rank's environment, and whose logs are
// copied with their ranks.
func (w *procWorld) testMultiNode(t *testing.T) {
	ns := w.c.Namespace(t)
	h := executortest.NewHarness(t, w.exec(t, ns))
	l := h.Run(t, executortest.Program{Steps: []executortest.Step{{EnvFile: "env"}, {Out: "hello"}}}, func(l *executor.Launch) {
		l.Resources = domain.Resources{CPUs: 1, Memory: 1 << 30, Nodes: 2}
	})
	checkExit(t, h.Wait(t, l.Ref, executor.Exited), domain.AttemptSucceeded, domain.ReasonCompleted, intp(0))
	o := h.Outputs(t, l)
	job := name(l.Ref)
	for rank := range 2 {
		got := map[string]string{}
		for _, kv := range strings.Split(executortest.ReadOutput(t, o, fmt.Sprintf("env.%d", rank)), "\n") {
			k, v, _ := strings.Cut(kv, "=")
			got[k] = v
		}
		want := map[string]string{"RANK": strconv.Itoa(rank), "NODE_RANK": strconv.Itoa(rank), "WORLD_SIZE": "2",
			"LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": job + "-0." + job, "MASTER_PORT": "29500"}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("rank %d: %s=%q, want %q", rank, k, got[k], v)
			}
		}
	}
	pods, err := w.c.Client(t).CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: kubernetes.LabelJob + "=" + strconv.FormatInt(l.JobID, 10)})
	if err != nil || len(pods.Items) != 2 || pods.Items[0].Spec.NodeName == pods.Items[1].Spec.NodeName {
		t.Fatalf("want 2 pods on 2 nodes, got %d (%v)", len(pods.Items), err)
	}
	got := h.LogLines(t, l.Ref, executor.LogQuery{})
	slices.Sort(got)
	if want := []string{"[rank 0] hello", "[rank 1] hello"}; !slices.Equal(got, want) {
		t.Errorf("log %q, want %q", got, want)
	}
}
