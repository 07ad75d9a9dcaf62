package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/executor/kubernetes/kubetest"
)

// kubeServer starts a server that drives a local pool and a pool, k8s, on
// a Kubernetes executor over two kwok nodes of 8 CPUs and 4 GPUs each in
// a namespace of the test's own.
func kubeServer(t *testing.T) (*server, kubernetes.Interface, string) {
	t.Helper()
	c := kubetest.Shared(t)
	ns := c.Namespace(t)
	for _, n := range []string{"a", "b"} {
		c.AddNode(t, kubetest.Node{Name: ns + "-" + n, CPUs: "8", Memory: "32Gi", GPUs: 4,
			Labels: map[string]string{"trainyard.test/e2e": ns}})
	}
	extra := fmt.Sprintf(`executors:
  - name: kube
    kind: kubernetes
    kubeconfig: %s
    namespace: %s
    image: registry.example/train:1
    node_selector: {trainyard.test/e2e: %s}
pools:
  - name: cpu
    nodes: [{name: here, cpus: 2, memory: 8GiB}]
  - name: k8s
    executor: kube
`, c.Kubeconfig, ns, ns)
	s := startServer(t, serverOpts{extra: extra})
	return s, c.Client(t), ns
}

// kubeJobs lists the Kubernetes Jobs of a Trainyard job.
func kubeJobs(t *testing.T, cs kubernetes.Interface, ns string, id int64) []batchv1.Job {
	t.Helper()
	l, err := cs.BatchV1().Jobs(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "trainyard.io/job=" + strconv.FormatInt(id, 10)})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func envOf(c corev1.Container) map[string]corev1.EnvVar {
	m := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		m[e.Name] = e
	}
	return m
}

// TestKubernetesPool: one server runs a local pool and a pool on a
// Kubernetes cluster at once. The cluster pool has the cluster's nodes;
// its jobs become Jobs with the right image, resources, GPUs, labels,
// node selector and Secret; a pod's success, exit code and image pull
// error reach show and why; cancel deletes the Job.
func TestKubernetesPool(t *testing.T) {
	s, cs, ns := kubeServer(t)
	ctx := context.Background()

	var pool apitypes.Pool
	waitFor(t, 20*time.Second, "pool k8s to have the cluster's nodes", func() bool {
		s.api("GET", "/api/v1/pools/k8s", nil, &pool)
		return len(pool.Nodes) == 2
	})
	if pool.Executor != "kube" || pool.Capacity.GPUs != 8 || pool.Capacity.CPUs != 16 {
		t.Errorf("pool k8s: executor %q, capacity %+v; want kube with 8 GPUs and 16 CPUs", pool.Executor, pool.Capacity)
	}
	// The cluster grows (an autoscaler's node): so does the pool.
	kubetest.Shared(t).AddNode(t, kubetest.Node{Name: ns + "-c", CPUs: "8", Memory: "32Gi", GPUs: 4,
		Labels: map[string]string{"trainyard.test/e2e": ns}})
	waitFor(t, 20*time.Second, "pool k8s to follow the cluster's new node", func() bool {
		s.api("GET", "/api/v1/pools/k8s", nil, &pool)
		return len(pool.Nodes) == 3 && pool.Capacity.GPUs == 12
	})

	// A local job and a cluster job side by side.
	local := s.submit("name: here\npool: cpu\nentrypoint: echo on this machine\n")
	s.mustCLIStdin("s3cr3t-value-42\n", "secret", "set", "WANDB_KEY")
	j := s.submit("name: train\npool: k8s\nresources: {cpus: 2, memory: 4GiB, gpus: 2}\nentrypoint: [python, train.py]\n" +
		"secrets: [WANDB_KEY]\nparams: {kwok_run_ms: \"300\"}\n")
	if got := s.waitState(local.ID, time.Minute, "succeeded", "failed"); got.State != "succeeded" {
		t.Fatalf("local job: %s (%s)", got.State, got.Reason)
	}
	var kj batchv1.Job
	waitFor(t, 30*time.Second, "the cluster job's Job", func() bool {
		jobs := kubeJobs(t, cs, ns, j.ID)
		if len(jobs) == 1 {
			kj = jobs[0]
		}
		return len(jobs) == 1
	})
	pod := kj.Spec.Template.Spec
	c := pod.Containers[0]
	if c.Image != "registry.example/train:1" {
		t.Errorf("image %q, want the executor's default", c.Image)
	}
	if !strings.Contains(strings.Join(c.Command, " "), "python train.py") {
		t.Errorf("command %q, want the job's entrypoint", c.Command)
	}
	if g := c.Resources.Limits["nvidia.com/gpu"]; g.Value() != 2 {
		t.Errorf("GPU limit %v, want 2", g.String())
	}
	if cpu := c.Resources.Requests[corev1.ResourceCPU]; cpu.MilliValue() != 2000 {
		t.Errorf("CPU request %v, want 2", cpu.String())
	}
	if m := c.Resources.Limits[corev1.ResourceMemory]; m.Value() != 4<<30 {
		t.Errorf("memory limit %v, want 4Gi", m.String())
	}
	if kj.Labels["trainyard.io/pool"] != "k8s" || kj.Labels["trainyard.io/attempt"] != "1" {
		t.Errorf("labels %v", kj.Labels)
	}
	if pod.NodeSelector["trainyard.test/e2e"] != ns {
		t.Errorf("node selector %v, want the executor's", pod.NodeSelector)
	}
	e := envOf(c)
	if e["WANDB_KEY"].ValueFrom == nil || e["WANDB_KEY"].ValueFrom.SecretKeyRef == nil || e["WANDB_KEY"].Value != "" {
		t.Errorf("WANDB_KEY %+v, want it from the attempt's Secret, not in the pod spec", e["WANDB_KEY"])
	}
	if e["TRAINYARD_JOB_ID"].Value != strconv.FormatInt(j.ID, 10) {
		t.Errorf("TRAINYARD_JOB_ID %+v", e["TRAINYARD_JOB_ID"])
	}
	got := s.waitState(j.ID, time.Minute, "succeeded", "failed")
	if got.State != "succeeded" {
		t.Fatalf("cluster job: %s (%s)", got.State, got.Reason)
	}
	if out := s.mustCLI("logs", strconv.FormatInt(j.ID, 10)); !strings.Contains(out, "step 1 loss 0.5") {
		t.Errorf("logs of the cluster job:\n%s\nwant the pod's lines", out)
	}
	waitFor(t, 30*time.Second, "the ended attempt's Secret to be deleted", func() bool {
		l, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "trainyard.io/job=" + strconv.FormatInt(j.ID, 10)})
		return err == nil && len(l.Items) == 0
	})

	// A failing pod's exit code, and an image that cannot be pulled.
	fail := s.submit("name: crash\npool: k8s\nentrypoint: [python, crash.py]\npolicy: {retries: 0}\nparams: {kwok_exit: \"3\"}\n")
	pull := s.submit("name: typo\npool: k8s\nentrypoint: [python, x.py]\npolicy: {retries: 0}\nparams: {kwok_pull: \"1\"}\n")
	got = s.waitState(fail.ID, time.Minute, "succeeded", "failed")
	if n := len(got.Attempts); got.State != "failed" || n == 0 || got.Attempts[n-1].ExitCode == nil || *got.Attempts[n-1].ExitCode != 3 {
		t.Errorf("failing pod: %s, attempts %+v; want failed with exit code 3", got.State, got.Attempts)
	}
	if out := s.mustCLI("show", strconv.FormatInt(fail.ID, 10)); !strings.Contains(out, "3") {
		t.Errorf("show of the failed job:\n%s", out)
	}
	got = s.waitState(pull.ID, time.Minute, "succeeded", "failed")
	if got.State != "failed" || !strings.Contains(got.Reason+fmt.Sprint(got.Attempts), "ImagePullFailed") {
		t.Errorf("pull error: %s %s %+v; want failed with ImagePullFailed", got.State, got.Reason, got.Attempts)
	}
	if out := s.mustCLI("why", strconv.FormatInt(pull.ID, 10)); !strings.Contains(out, "ImagePullFailed") || !strings.Contains(out, "registry.example/train:1") {
		t.Errorf("why of the pull error:\n%s\nwant the reason and the image", out)
	}

	// Cancel deletes the Job and its pods.
	block := s.submit("name: long\npool: k8s\nentrypoint: [python, long.py]\nparams: {kwok_block: \"1\"}\n")
	s.waitState(block.ID, time.Minute, "running")
	s.mustCLI("cancel", strconv.FormatInt(block.ID, 10))
	if got := s.waitState(block.ID, time.Minute, "canceled", "failed", "succeeded"); got.State != "canceled" {
		t.Errorf("canceled job: %s (%s)", got.State, got.Reason)
	}
	waitFor(t, 30*time.Second, "the canceled job's Job and pods to go", func() bool {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "trainyard.io/job=" + strconv.FormatInt(block.ID, 10)})
		return err == nil && len(pods.Items) == 0 && len(kubeJobs(t, cs, ns, block.ID)) == 0
	})
}

// TestKubernetesGangAndRestart: a 2-node job becomes an Indexed Job of 2
// with its headless Service and rank variables, and a server killed with
// SIGKILL while cluster jobs run recovers every attempt.
func TestKubernetesGangAndRestart(t *testing.T) {
	s, cs, ns := kubeServer(t)
	ctx := context.Background()
	gang := s.submit("name: ddp\npool: k8s\nresources: {nodes: 2, gpus: 4, cpus: 4, memory: 8GiB}\nentrypoint: [torchrun, train.py]\n" +
		"params: {kwok_block: \"1\"}\n")
	short := s.submit("name: short\npool: k8s\nentrypoint: [python, short.py]\nparams: {kwok_run_ms: \"4000\"}\n")
	s.waitState(gang.ID, time.Minute, "running")
	s.waitState(short.ID, time.Minute, "running")
	jobs := kubeJobs(t, cs, ns, gang.ID)
	if len(jobs) != 1 {
		t.Fatalf("%d Jobs for the gang, want 1", len(jobs))
	}
	kj := jobs[0]
	if kj.Spec.CompletionMode == nil || *kj.Spec.CompletionMode != batchv1.IndexedCompletion || *kj.Spec.Completions != 2 || *kj.Spec.Parallelism != 2 {
		t.Errorf("gang Job: mode %v completions %v parallelism %v; want Indexed, 2, 2", kj.Spec.CompletionMode, kj.Spec.Completions, kj.Spec.Parallelism)
	}
	svc, err := cs.CoreV1().Services(ns).Get(ctx, kj.Spec.Template.Spec.Subdomain, metav1.GetOptions{})
	if err != nil || svc.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Errorf("headless Service %q: %v %+v", kj.Spec.Template.Spec.Subdomain, err, svc)
	}
	e := envOf(kj.Spec.Template.Spec.Containers[0])
	if e["WORLD_SIZE"].Value != "2" || !strings.HasPrefix(e["MASTER_ADDR"].Value, kj.Name+"-0.") || e["RANK"].ValueFrom == nil {
		t.Errorf("rank environment: WORLD_SIZE %+v MASTER_ADDR %+v RANK %+v", e["WORLD_SIZE"], e["MASTER_ADDR"], e["RANK"])
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "trainyard.io/job=" + strconv.FormatInt(gang.ID, 10)})
	if err != nil || len(pods.Items) != 2 || pods.Items[0].Spec.NodeName == pods.Items[1].Spec.NodeName {
		t.Errorf("gang pods: %v, %d; want 2 on different nodes", err, len(pods.Items))
	}

	// kill -9: the short job ends while the server is down; after the
	// restart its outcome is recorded, and the gang is still running.
	s.kill9()
	waitFor(t, 30*time.Second, "the short job's pod to finish", func() bool {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "trainyard.io/job=" + strconv.FormatInt(short.ID, 10)})
		return err == nil && len(pods.Items) == 1 && pods.Items[0].Status.Phase == corev1.PodSucceeded
	})
	s.start()
	if got := s.waitState(short.ID, time.Minute, "succeeded", "failed"); got.State != "succeeded" || len(got.Attempts) != 1 {
		t.Errorf("short job after the restart: %s (%s), %d attempts; want succeeded in its first", got.State, got.Reason, len(got.Attempts))
	}
	if got := s.job(gang.ID); got.State != "running" || len(got.Attempts) != 1 {
		t.Errorf("gang after the restart: %s, %d attempts; want still running its first", got.State, len(got.Attempts))
	}
	s.mustCLI("cancel", strconv.FormatInt(gang.ID, 10))
	s.waitState(gang.ID, time.Minute, "canceled")
	waitFor(t, 30*time.Second, "the gang's Job and Service to go", func() bool {
		_, err := cs.CoreV1().Services(ns).Get(ctx, kj.Spec.Template.Spec.Subdomain, metav1.GetOptions{})
		return apierrors.IsNotFound(err) && len(kubeJobs(t, cs, ns, gang.ID)) == 0
	})
}

// TestKubernetesAgent: a pool on a cluster whose executor puts the in-job
// agent in every pod. The pods run on a test node that runs their
// command as local processes (a real kubelet cannot run here; the agent
// is where the pod spec says, as an init container would have put it):
// the job's progress, checkpoint and outputs reach the server through
// the API with the job token, as on the local executor.
func TestKubernetesAgent(t *testing.T) {
	c := kubetest.Shared(t)
	ns := c.Namespace(t)
	c.ProcessNode(t, kubetest.Node{Name: ns + "-proc", CPUs: "4", Memory: "8Gi", Labels: map[string]string{"trainyard.test/e2e": ns}})
	agentDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(agentDir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binary, filepath.Join(agentDir, "bin", "trainyard")); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, serverOpts{extra: fmt.Sprintf(`executors:
  - name: proc
    kind: kubernetes
    kubeconfig: %s
    namespace: %s
    image: registry.example/train:1
    node_selector: {trainyard.test/e2e: %s}
    agent: {image: registry.example/trainyard:1, dir: %s}
pools:
  - name: cpu
    nodes: [{name: here, cpus: 2, memory: 8GiB}]
  - name: k8s
    executor: proc
`, c.Kubeconfig, ns, ns, agentDir)})
	var pool apitypes.Pool
	waitFor(t, 20*time.Second, "pool k8s to have the cluster's node", func() bool {
		s.api("GET", "/api/v1/pools/k8s", nil, &pool)
		return len(pool.Nodes) == 1
	})
	script := `echo 'trainyard: {"step": 1, "loss": 0.9}'
echo 'trainyard: {"step": 2, "loss": 0.5}'
mkdir -p "$TRAINYARD_OUTPUT_DIR/model" "$TRAINYARD_CHECKPOINT_DIR/step-2"
echo weights > "$TRAINYARD_OUTPUT_DIR/model/final.txt"
echo ckpt > "$TRAINYARD_CHECKPOINT_DIR/step-2/w.bin"
touch "$TRAINYARD_CHECKPOINT_DIR/step-2/.complete"
ln -s /etc "$TRAINYARD_OUTPUT_DIR/escape"
echo done`
	spec, _ := json.Marshal(map[string]any{"name": "agent", "pool": "k8s", "entrypoint": []string{"/bin/sh", "-c", script},
		"resources": map[string]any{"cpus": 1, "memory": "1GiB"}})
	j := s.submit(string(spec))
	got := s.waitState(j.ID, time.Minute, "succeeded", "failed")
	if got.State != "succeeded" {
		t.Fatalf("job: %s (%s)\n%s", got.State, got.Reason, s.mustCLI("logs", strconv.FormatInt(j.ID, 10)))
	}
	id := strconv.FormatInt(j.ID, 10)
	if out := s.mustCLI("metrics", id); !strings.Contains(out, "0.5") {
		t.Errorf("metrics of the cluster job:\n%s\nwant the reported loss", out)
	}
	out := s.mustCLI("artifacts", "ls", id)
	if !strings.Contains(out, "model/final.txt") || strings.Contains(out, "escape") || strings.Contains(out, "passwd") {
		t.Errorf("artifacts of the cluster job:\n%s\nwant model/final.txt and nothing through the planted link", out)
	}
	dest := t.TempDir()
	s.mustCLI("artifacts", "get", id, "model/final.txt", "--dest", dest)
	if b, err := os.ReadFile(filepath.Join(dest, "model", "final.txt")); err != nil || strings.TrimSpace(string(b)) != "weights" {
		t.Errorf("downloaded artifact %q (%v), want weights", b, err)
	}
	if out := s.mustCLI("checkpoints", "ls", id); !strings.Contains(out, "step-2") {
		t.Errorf("checkpoints of the cluster job:\n%s\nwant step-2", out)
	}
	if out := s.mustCLI("logs", id); !strings.Contains(out, "done") {
		t.Errorf("logs:\n%s", out)
	}
}
