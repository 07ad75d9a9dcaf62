package kubernetes_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/executor/kubernetes"
	"trainyard/internal/executor/kubernetes/kubetest"
)

// TestTaintedNodes: a node whose taint the executor's tolerations do not
// tolerate is not in its inventory (its pods could not go there); with
// the toleration it is. A pod Kubernetes cannot place says why through
// Waiting, for why.
func TestTaintedNodes(t *testing.T) {
	c := kubetest.Shared(t)
	ns := c.Namespace(t)
	sel := map[string]string{"trainyard.io/test-pool": ns}
	c.AddNode(t, kubetest.Node{Name: ns + "-plain", CPUs: "8", Memory: "32Gi", Labels: sel})
	c.AddNode(t, kubetest.Node{Name: ns + "-dedicated", CPUs: "8", Memory: "32Gi", Labels: sel,
		Taints: []corev1.Taint{{Key: "dedicated", Value: "ml", Effect: corev1.TaintEffectNoSchedule}}})
	start := func(tol []corev1.Toleration) *kubernetes.Executor {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ex, err := kubernetes.New(ctx, kubernetes.Config{REST: c.Config, Namespace: ns, Image: "example.com/trainer:1",
			NodeSelector: sel, Tolerations: tol})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ex.Close() })
		return ex
	}
	names := func(ex *kubernetes.Executor) []string {
		inv, err := ex.Inventory(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, n := range inv.Nodes {
			out = append(out, n.Name)
		}
		return out
	}
	plain := start(nil)
	if got := names(plain); len(got) != 1 || got[0] != ns+"-plain" {
		t.Errorf("inventory without the toleration: %v, want the untainted node only", got)
	}
	tolerant := start([]corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "ml", Effect: corev1.TaintEffectNoSchedule}})
	if got := names(tolerant); len(got) != 2 {
		t.Errorf("inventory with the toleration: %v, want both nodes", got)
	}

	// Placed on the tainted node anyway (a stale placement), the pod
	// cannot go: Waiting says so until it is stopped.
	h := executortest.NewHarness(t, plain)
	l := h.Launch(t, []string{"python3", "train.py"}, func(l *executor.Launch) {
		l.Resources = domain.Resources{CPUs: 1, Memory: 1 << 30, Nodes: 1}
		l.Placement = executor.Placement{Nodes: []executor.PlacedNode{{Name: ns + "-dedicated"}}}
	})
	var why string
	err := kubetest.WaitFor(context.Background(), 30*time.Second, "the pod to be unschedulable", func(context.Context) (bool, error) {
		why = plain.Waiting(l.Ref)
		return why != "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(why, "cannot place") || !strings.Contains(why, "taint") {
		t.Errorf("Waiting = %q, want Kubernetes' reason (the untolerated taint)", why)
	}
	if err := plain.Stop(context.Background(), l.Ref, executor.StopRequest{Grace: time.Second}); err != nil {
		t.Fatal(err)
	}
	h.Wait(t, l.Ref, executor.Exited)
	if got := plain.Waiting(l.Ref); got != "" {
		t.Errorf("Waiting after the attempt ended = %q", got)
	}
}
