package kubernetes_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/executor/kubernetes"
	"trainyard/internal/executor/kubernetes/kubetest"
	"trainyard/internal/executor/local"
	"trainyard/internal/logs"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

// world is one test's cluster view: a namespace of its own, two kwok
// nodes with GPUs (labelled pool=test) and an executor on them.
type world struct {
	c  *kubetest.Cluster
	ns string
	ex *kubernetes.Executor
	h  *executortest.Harness
}

var nodeSeq atomic.Int64

func newWorld(t *testing.T, mod func(*kubernetes.Config)) *world {
	t.Helper()
	c := kubetest.Shared(t)
	w := &world{c: c, ns: c.Namespace(t)}
	pool := w.ns // nodes of this test only
	for range 2 {
		c.AddNode(t, kubetest.Node{Name: "node-" + strconv.FormatInt(nodeSeq.Add(1), 10), CPUs: "16", Memory: "64Gi", GPUs: 4,
			Labels: map[string]string{"trainyard.io/test-pool": pool}})
	}
	cfg := kubernetes.Config{REST: c.Config, Namespace: w.ns, Image: "example.com/trainer:1",
		NodeSelector: map[string]string{"trainyard.io/test-pool": pool}}
	if mod != nil {
		mod(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ex, err := kubernetes.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ex.Close() })
	w.ex = ex
	w.h = executortest.NewHarness(t, ex)
	return w
}

// launch launches a one-node, 1-CPU attempt whose kwok pod behaves as env
// says (see kubetest/stages.yaml).
func (w *world) launch(t *testing.T, env []string, mod func(*executor.Launch)) executor.Launch {
	t.Helper()
	return w.h.Launch(t, []string{"python3", "train.py"}, func(l *executor.Launch) {
		l.Env = append(l.Env, env...)
		l.Resources = domain.Resources{CPUs: 1, Memory: 1 << 30, Nodes: 1}
		if mod != nil {
			mod(l)
		}
	})
}

func (w *world) job(t *testing.T, ref executor.Ref) *batchv1.Job {
	t.Helper()
	j, err := w.c.Client(t).BatchV1().Jobs(w.ns).Get(context.Background(), name(ref), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get Job of %s: %v", ref, err)
	}
	return j
}

func name(ref executor.Ref) string {
	return "ty-" + strconv.FormatInt(ref.JobID, 10) + "-" + strconv.Itoa(ref.Attempt)
}

func checkExit(t *testing.T, ev executor.Event, state domain.AttemptState, reason domain.Reason, code *int) {
	t.Helper()
	if ev.State != state || ev.Reason != reason {
		t.Errorf("exited %s/%s (%q), want %s/%s", ev.State, ev.Reason, ev.Message, state, reason)
	}
	if (code == nil) != (ev.ExitCode == nil) || (code != nil && *code != *ev.ExitCode) {
		t.Errorf("exit code %v, want %v (%q)", ev.ExitCode, code, ev.Message)
	}
	if ev.Message == "" {
		t.Error("the Exited event has no message")
	}
}

func intp(n int) *int { return &n }

func TestAttemptSucceeds(t *testing.T) {
	w := newWorld(t, nil)
	l := w.launch(t, []string{"TRAINYARD_KWOK_RUN_MS=300"}, nil)
	started := w.h.Wait(t, l.Ref, executor.Started)
	if started.PID <= 0 {
		t.Errorf("Started.PID = %d", started.PID)
	}
	checkExit(t, w.h.Wait(t, l.Ref, executor.Exited), domain.AttemptSucceeded, domain.ReasonCompleted, intp(0))
	if err := w.ex.Release(context.Background(), l.Ref); err != nil {
		t.Fatal(err)
	}
	_, err := w.c.Client(t).BatchV1().Jobs(w.ns).Get(context.Background(), name(l.Ref), metav1.GetOptions{})
	if err == nil {
		// Foreground deletion: it may linger while its pods go.
		if err := kubetest.WaitFor(context.Background(), 30*time.Second, "the Job to go", func(ctx context.Context) (bool, error) {
			_, err := w.c.Client(t).BatchV1().Jobs(w.ns).Get(ctx, name(l.Ref), metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestExitCodesAndOOM(t *testing.T) {
	w := newWorld(t, nil)
	code := w.launch(t, []string{"TRAINYARD_KWOK_EXIT=3"}, nil)
	oom := w.launch(t, []string{"TRAINYARD_KWOK_EXIT=137", "TRAINYARD_KWOK_REASON=OOMKilled"}, nil)
	ev := w.h.Wait(t, code.Ref, executor.Exited)
	checkExit(t, ev, domain.AttemptFailed, domain.ReasonExitCode, intp(3))
	if !strings.Contains(ev.Message, "3") {
		t.Errorf("message %q does not name the exit code", ev.Message)
	}
	checkExit(t, w.h.Wait(t, oom.Ref, executor.Exited), domain.AttemptFailed, domain.ReasonOOMKilled, intp(137))
}

func TestStopDeletesTheJobAndItsPods(t *testing.T) {
	w := newWorld(t, nil)
	l := w.launch(t, []string{"TRAINYARD_KWOK_BLOCK=1"}, nil)
	w.h.Wait(t, l.Ref, executor.Started)
	if err := w.ex.Stop(context.Background(), l.Ref, executor.StopRequest{Reason: domain.ReasonPreempted, Message: "preempted for job 12"}); err != nil {
		t.Fatal(err)
	}
	ev := w.h.Wait(t, l.Ref, executor.Exited)
	checkExit(t, ev, domain.AttemptCanceled, domain.ReasonPreempted, nil)
	if ev.Message != "preempted for job 12" {
		t.Errorf("message %q", ev.Message)
	}
	pods, err := w.c.Client(t).CoreV1().Pods(w.ns).List(context.Background(), metav1.ListOptions{LabelSelector: kubernetes.LabelJob + "=" + strconv.FormatInt(l.JobID, 10)})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Errorf("%d pods left after the stop", len(pods.Items))
	}
	// Stopping again, or an ended attempt, is no error.
	if err := w.ex.Stop(context.Background(), l.Ref, executor.StopRequest{}); err != nil {
		t.Errorf("second stop: %v", err)
	}
}

func TestImagePullFailureEndsTheAttempt(t *testing.T) {
	w := newWorld(t, func(c *kubernetes.Config) { c.Image = "example.com/no-such-image:v0" })
	l := w.launch(t, []string{"TRAINYARD_KWOK_PULL=1"}, nil)
	ev := w.h.Wait(t, l.Ref, executor.Exited)
	checkExit(t, ev, domain.AttemptFailed, kubernetes.ReasonImagePullFailed, nil)
	if !strings.Contains(ev.Message, "example.com/no-such-image:v0") {
		t.Errorf("message %q does not name the image", ev.Message)
	}
	if evs := w.h.Events(l.Ref); slices.ContainsFunc(evs, func(e executor.Event) bool { return e.Kind == executor.Started }) {
		t.Error("an attempt whose image never came was reported started")
	}
	if err := kubetest.WaitFor(context.Background(), 30*time.Second, "the Job to be deleted", func(ctx context.Context) (bool, error) {
		j, err := w.c.Client(t).BatchV1().Jobs(w.ns).Get(ctx, name(l.Ref), metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && j.DeletionTimestamp != nil), nil
	}); err != nil {
		t.Fatal(err)
	}
}

func TestTheJobCarriesTheSpec(t *testing.T) {
	w := newWorld(t, func(c *kubernetes.Config) {
		c.PriorityClass = ""
		c.ImagePullSecrets = []string{"registry-cred"}
		c.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	})
	inv, err := w.ex.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Nodes) != 2 || inv.Nodes[0].CPUs != 16 || inv.Nodes[0].Memory != 64<<30 || len(inv.Nodes[0].GPUs) != 4 {
		t.Fatalf("inventory %+v, want 2 nodes of 16 CPUs, 64 GiB, 4 GPUs", inv)
	}
	node := inv.Nodes[1].Name
	l := w.launch(t, []string{"TRAINYARD_KWOK_BLOCK=1", "WANDB_API_KEY=s3cr3t-value", "LR=0.1"}, func(l *executor.Launch) {
		l.Project, l.Pool = "vision", "gpu"
		l.Resources = domain.Resources{GPUs: 2, CPUs: 3.5, Memory: 8 << 30, Nodes: 1}
		l.Placement = executor.Local(node, []int{0, 1})
		l.Redact = []string{"s3cr3t-value"}
		l.Timeout = time.Hour
	})
	w.h.Wait(t, l.Ref, executor.Started)
	j := w.job(t, l.Ref)
	if got := j.Labels[kubernetes.LabelProject] + "/" + j.Labels[kubernetes.LabelPool]; got != "vision/gpu" {
		t.Errorf("labels %v", j.Labels)
	}
	// The deadline is the backstop: timeout, grace (the harness's 5s) and 30m.
	deadline := int64(-1)
	if j.Spec.ActiveDeadlineSeconds != nil {
		deadline = *j.Spec.ActiveDeadlineSeconds
	}
	if *j.Spec.BackoffLimit != 0 || deadline != 3600+5+30*60 {
		t.Errorf("backoffLimit %d, activeDeadlineSeconds %d", *j.Spec.BackoffLimit, deadline)
	}
	pod := j.Spec.Template.Spec
	c := pod.Containers[0]
	if c.Image != "example.com/trainer:1" || strings.Join(c.Command, " ") != "python3 train.py" {
		t.Errorf("image %s, command %v", c.Image, c.Command)
	}
	req := c.Resources.Requests
	if req.Cpu().MilliValue() != 3500 || req.Memory().Value() != 8<<30 {
		t.Errorf("requests %v", req)
	}
	if g := req[corev1.ResourceName("nvidia.com/gpu")]; g.Value() != 2 {
		t.Errorf("GPU request %v", g)
	}
	if !slices.Equal(pod.ImagePullSecrets, []corev1.LocalObjectReference{{Name: "registry-cred"}}) || len(pod.Tolerations) != 1 {
		t.Errorf("pull secrets %v, tolerations %v", pod.ImagePullSecrets, pod.Tolerations)
	}
	// The secret's value is in the attempt's Secret, not in the Job.
	spec, _ := j.Marshal()
	if strings.Contains(string(spec), "s3cr3t-value") {
		t.Error("the secret's value is in the Job's spec")
	}
	var secretRef, lr bool
	for _, e := range c.Env {
		secretRef = secretRef || (e.Name == "WANDB_API_KEY" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef.Name == name(l.Ref))
		lr = lr || (e.Name == "LR" && e.Value == "0.1")
	}
	if !secretRef || !lr {
		t.Errorf("env %v: want WANDB_API_KEY from the Secret and LR=0.1", c.Env)
	}
	s, err := w.c.Client(t).CoreV1().Secrets(w.ns).Get(context.Background(), name(l.Ref), metav1.GetOptions{})
	if err != nil || string(s.Data["WANDB_API_KEY"]) != "s3cr3t-value" {
		t.Fatalf("the attempt's Secret: %v", err)
	}
	// Placed where Trainyard's scheduler put it.
	pods, err := w.c.Client(t).CoreV1().Pods(w.ns).List(context.Background(), metav1.ListOptions{LabelSelector: kubernetes.LabelJob + "=" + strconv.FormatInt(l.JobID, 10)})
	if err != nil || len(pods.Items) != 1 || pods.Items[0].Spec.NodeName != node {
		t.Fatalf("pods %v (%v), want one on %s", pods, err, node)
	}
	if err := w.ex.Stop(context.Background(), l.Ref, executor.StopRequest{}); err != nil {
		t.Fatal(err)
	}
	w.h.Wait(t, l.Ref, executor.Exited)
	if err := w.ex.Release(context.Background(), l.Ref); err != nil {
		t.Fatal(err)
	}
	if _, err := w.c.Client(t).CoreV1().Secrets(w.ns).Get(context.Background(), name(l.Ref), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Secret is still there after Release: %v", err)
	}
}

func TestMultiNodeIsAnIndexedJobWithAService(t *testing.T) {
	w := newWorld(t, nil)
	l := w.launch(t, []string{"TRAINYARD_KWOK_RUN_MS=500"}, func(l *executor.Launch) {
		l.Resources = domain.Resources{CPUs: 8, Memory: 1 << 30, GPUs: 4, Nodes: 2}
	})
	w.h.Wait(t, l.Ref, executor.Started)
	j := w.job(t, l.Ref)
	if *j.Spec.Completions != 2 || *j.Spec.Parallelism != 2 || j.Spec.CompletionMode == nil || *j.Spec.CompletionMode != batchv1.IndexedCompletion {
		t.Errorf("completions %d, parallelism %d, mode %v", *j.Spec.Completions, *j.Spec.Parallelism, j.Spec.CompletionMode)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range j.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e
	}
	if env["WORLD_SIZE"].Value != "2" || env["MASTER_ADDR"].Value != name(l.Ref)+"-0."+name(l.Ref) ||
		env["RANK"].ValueFrom == nil || !strings.Contains(env["RANK"].ValueFrom.FieldRef.FieldPath, "job-completion-index") {
		t.Errorf("rank environment %v", env)
	}
	if _, err := w.c.Client(t).CoreV1().Services(w.ns).Get(context.Background(), name(l.Ref), metav1.GetOptions{}); err != nil {
		t.Errorf("the headless Service: %v", err)
	}
	checkExit(t, w.h.Wait(t, l.Ref, executor.Exited), domain.AttemptSucceeded, domain.ReasonCompleted, intp(0))
	pods, err := w.c.Client(t).CoreV1().Pods(w.ns).List(context.Background(), metav1.ListOptions{LabelSelector: kubernetes.LabelJob + "=" + strconv.FormatInt(l.JobID, 10)})
	if err != nil || len(pods.Items) != 2 || pods.Items[0].Spec.NodeName == pods.Items[1].Spec.NodeName {
		t.Fatalf("want 2 pods on 2 nodes, got %d (%v)", len(pods.Items), err)
	}
	b, err := os.ReadFile(l.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"stdout [rank 0] hello from the pod\n", "stdout [rank 1] hello from the pod\n"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the attempt's log lacks %q:\n%s", want, b)
		}
	}
}

// TestANewExecutorAdoptsRunningAttempts is a server restart: the first
// executor goes away with one attempt running and another about to end;
// the second, launched with the same attempts, reports both again.
func TestANewExecutorAdoptsRunningAttempts(t *testing.T) {
	w := newWorld(t, nil)
	running := w.launch(t, []string{"TRAINYARD_KWOK_BLOCK=1"}, nil)
	ending := w.launch(t, []string{"TRAINYARD_KWOK_RUN_MS=200"}, nil)
	w.h.Wait(t, running.Ref, executor.Started)
	w.h.Wait(t, ending.Ref, executor.Started)
	_ = w.ex.Close()

	cfg := kubernetes.Config{REST: w.c.Config, Namespace: w.ns, Image: "example.com/trainer:1"}
	ex, err := kubernetes.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ex.Close() })
	h := executortest.NewHarness(t, ex)
	for _, l := range []executor.Launch{running, ending} {
		if err := ex.Launch(context.Background(), l); err != nil {
			t.Fatal(err)
		}
	}
	h.Wait(t, running.Ref, executor.Started)
	checkExit(t, h.Wait(t, ending.Ref, executor.Exited), domain.AttemptSucceeded, domain.ReasonCompleted, intp(0))
	if n := len(h.Events(running.Ref)); n != 1 {
		t.Errorf("the running attempt has %d events, want Started only", n)
	}
	if err := ex.Stop(context.Background(), running.Ref, executor.StopRequest{}); err != nil {
		t.Fatal(err)
	}
	checkExit(t, h.Wait(t, running.Ref, executor.Exited), domain.AttemptCanceled, domain.ReasonCanceledByUser, nil)
}

func TestTimeoutEndsTheAttempt(t *testing.T) {
	w := newWorld(t, nil)
	l := w.launch(t, []string{"TRAINYARD_KWOK_BLOCK=1"}, func(l *executor.Launch) { l.Timeout = time.Second })
	w.h.Wait(t, l.Ref, executor.Started)
	ev := w.h.Wait(t, l.Ref, executor.Exited)
	checkExit(t, ev, domain.AttemptTimedOut, domain.ReasonTimeout, nil)
}

// TestPodLogsOutliveThePod: the pod's log is copied into the attempt's
// log (secrets redacted) before the outcome is reported, the outcome is
// recorded beside it, and launching the attempt again once it is released
// reports that outcome instead of running it again.
func TestPodLogsOutliveThePod(t *testing.T) {
	w := newWorld(t, nil)
	l := w.launch(t, []string{"TRAINYARD_KWOK_RUN_MS=200"}, func(l *executor.Launch) { l.Redact = []string{"hello"} })
	checkExit(t, w.h.Wait(t, l.Ref, executor.Exited), domain.AttemptSucceeded, domain.ReasonCompleted, intp(0))
	b, err := os.ReadFile(l.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	log := string(b)
	for _, want := range []string{"stdout [redacted] from the pod\n", "stdout step 1 loss 0.5\n", "system exited with code 0\n"} {
		if !strings.Contains(log, want) {
			t.Errorf("the attempt's log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "hello") {
		t.Errorf("the secret is in the log:\n%s", log)
	}
	if err := w.ex.Release(context.Background(), l.Ref); err != nil {
		t.Fatal(err)
	}
	if err := kubetest.WaitFor(context.Background(), 30*time.Second, "the Job to go", func(ctx context.Context) (bool, error) {
		_, err := w.c.Client(t).BatchV1().Jobs(w.ns).Get(ctx, name(l.Ref), metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatal(err)
	}

	ex, err := kubernetes.New(context.Background(), kubernetes.Config{REST: w.c.Config, Namespace: w.ns, Image: "example.com/trainer:1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ex.Close() })
	h := executortest.NewHarness(t, ex)
	if err := ex.Launch(context.Background(), l); err != nil {
		t.Fatal(err)
	}
	h.Wait(t, l.Ref, executor.Started)
	checkExit(t, h.Wait(t, l.Ref, executor.Exited), domain.AttemptSucceeded, domain.ReasonCompleted, intp(0))
	if _, err := w.c.Client(t).BatchV1().Jobs(w.ns).Get(context.Background(), name(l.Ref), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("launching an ended attempt again created its Job again (%v)", err)
	}
}

// TestFollowingALogFollowsThePods: once someone follows an attempt's log,
// its running pod's lines reach the attempt's log while the pod runs,
// without waiting for FollowAfter (here an hour).
func TestFollowingALogFollowsThePods(t *testing.T) {
	runs := logs.Layout{Root: t.TempDir()}
	w := newWorld(t, func(c *kubernetes.Config) {
		c.FollowAfter = time.Hour
		c.Files = local.NewReader(runs.Root)
	})
	l := w.launch(t, []string{"TRAINYARD_KWOK_BLOCK=1"}, func(l *executor.Launch) {
		l.Dir = runs.AttemptDir(l.JobID, l.Attempt)
		l.LogPath = runs.LogPath(l.JobID, l.Attempt)
	})
	w.h.Wait(t, l.Ref, executor.Started)

	ctx, cancel := context.WithTimeout(context.Background(), executortest.WaitTimeout)
	defer cancel()
	r, pw := io.Pipe()
	go func() { pw.CloseWithError(w.ex.Logs(ctx, l.Ref, executor.LogQuery{Follow: true}, pw)) }()
	sc := bufio.NewScanner(r)
	var got []string
	for sc.Scan() {
		if got = append(got, sc.Text()); sc.Text() == kubetest.PodLogLines[0] {
			break
		}
	}
	if len(got) == 0 || got[len(got)-1] != kubetest.PodLogLines[0] {
		t.Fatalf("following the running pod's log gave %q (%v), want its line %q before it ends", got, sc.Err(), kubetest.PodLogLines[0])
	}
	cancel()
	r.Close()
	if err := w.ex.Stop(context.Background(), l.Ref, executor.StopRequest{}); err != nil {
		t.Fatal(err)
	}
	w.h.Wait(t, l.Ref, executor.Exited)
}
