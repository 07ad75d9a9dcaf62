package kubernetes

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
)

func launch() executor.Launch {
	return executor.Launch{
		Ref: executor.Ref{JobID: 42, Attempt: 2}, Project: "vision", Pool: "a100",
		Argv:      []string{"python3", "train.py"},
		Env:       []string{"LR=0.1", "HF_TOKEN=hf_abcdef", "RANK=7", "LR=0.2", "SHORT=abc"},
		Redact:    []string{"hf_abcdef", "abc"},
		Resources: domain.Resources{CPUs: 7.5, Memory: 30 << 30, GPUs: 8, Nodes: 1},
		Placement: executor.Local("gpu-3", []int{0, 1, 2, 3, 4, 5, 6, 7}),
		Timeout:   2 * time.Hour, Grace: 30 * time.Second,
	}
}

func env(c corev1.Container) map[string]corev1.EnvVar {
	m := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		if _, dup := m[e.Name]; dup {
			panic("duplicate variable " + e.Name)
		}
		m[e.Name] = e
	}
	return m
}

func TestBuildOneNode(t *testing.T) {
	o := build(Config{Namespace: "ml", Image: "reg/train:1"}, launch())
	j := o.job
	if j.Name != "ty-42-2" || j.Namespace != "ml" || j.Labels[LabelJob] != "42" || j.Labels[LabelAttempt] != "2" || j.Labels[LabelManagedBy] != "trainyard" {
		t.Errorf("meta %s/%s %v", j.Namespace, j.Name, j.Labels)
	}
	if ref, ok := refOf(j.Spec.Template.Labels); !ok || ref != (executor.Ref{JobID: 42, Attempt: 2}) {
		t.Errorf("pods' labels %v do not name the attempt", j.Spec.Template.Labels)
	}
	if *j.Spec.BackoffLimit != 0 || *j.Spec.Completions != 1 || j.Spec.CompletionMode != nil || o.service != nil {
		t.Errorf("one node: backoff %d, completions %d, mode %v, service %v", *j.Spec.BackoffLimit, *j.Spec.Completions, j.Spec.CompletionMode, o.service)
	}
	// The executor times the run from its start; the Job's deadline,
	// from its creation, is the backstop: timeout, grace and slack.
	if got, want := *j.Spec.ActiveDeadlineSeconds, int64(2*3600+30+30*60); got != want {
		t.Errorf("activeDeadlineSeconds %d, want %d (timeout, grace, 30m for the start)", got, want)
	}
	pod := j.Spec.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever || *pod.TerminationGracePeriodSeconds != 30 || *pod.AutomountServiceAccountToken {
		t.Errorf("pod %+v", pod)
	}
	c := pod.Containers[0]
	res := c.Resources.Limits
	if res.Cpu().MilliValue() != 7500 || res.Memory().Value() != 30<<30 {
		t.Errorf("limits %v", res)
	}
	if g := res[corev1.ResourceName("nvidia.com/gpu")]; g.Value() != 8 {
		t.Errorf("gpus %v", g)
	}
	e := env(c)
	if e["LR"].Value != "0.2" {
		t.Errorf("LR = %q, want the later definition", e["LR"].Value)
	}
	if e["RANK"].Value != "0" || e["WORLD_SIZE"].Value != "1" || e["MASTER_ADDR"].Value != "localhost" {
		t.Errorf("rank env %v: the placement's, not the job's RANK=7", e)
	}
	if _, ok := e["CUDA_VISIBLE_DEVICES"]; ok {
		t.Error("CUDA_VISIBLE_DEVICES is the device plugin's to set in a pod")
	}
	if ref := e["HF_TOKEN"].ValueFrom; ref == nil || ref.SecretKeyRef.Name != "ty-42-2" || e["HF_TOKEN"].Value != "" {
		t.Errorf("HF_TOKEN = %+v, want it from the Secret", e["HF_TOKEN"])
	}
	if e["SHORT"].Value != "abc" {
		t.Errorf("a value under 4 bytes is not treated as a secret (as in logs): %+v", e["SHORT"])
	}
	if o.secret == nil || string(o.secret.Data["HF_TOKEN"]) != "hf_abcdef" || len(o.secret.Data) != 1 {
		t.Errorf("secret %+v", o.secret)
	}
	if b, _ := j.Marshal(); strings.Contains(string(b), "hf_abcdef") {
		t.Error("the secret's value is in the Job")
	}
	terms := pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || terms[0].MatchExpressions[0].Values[0] != "gpu-3" || pod.Affinity.PodAntiAffinity != nil {
		t.Errorf("affinity %+v, want the placed node only", pod.Affinity)
	}
}

func TestBuildMultiNode(t *testing.T) {
	l := launch()
	l.Resources.Nodes = 4
	l.Placement = executor.Placement{}
	l.Redact = nil
	o := build(Config{Namespace: "ml", Image: "reg/train:1", GPUResource: "amd.com/gpu"}, l)
	j := o.job
	if *j.Spec.Completions != 4 || *j.Spec.Parallelism != 4 || *j.Spec.CompletionMode != batchv1.IndexedCompletion {
		t.Errorf("completions %d parallelism %d mode %v", *j.Spec.Completions, *j.Spec.Parallelism, *j.Spec.CompletionMode)
	}
	if o.service == nil || o.service.Spec.ClusterIP != corev1.ClusterIPNone || j.Spec.Template.Spec.Subdomain != o.service.Name {
		t.Fatalf("service %+v, subdomain %q", o.service, j.Spec.Template.Spec.Subdomain)
	}
	if o.secret != nil {
		t.Error("a Secret without secrets")
	}
	e := env(j.Spec.Template.Spec.Containers[0])
	if e["WORLD_SIZE"].Value != "4" || e["MASTER_ADDR"].Value != "ty-42-2-0.ty-42-2" || e["MASTER_PORT"].Value != "29500" {
		t.Errorf("env %v", e)
	}
	if f := e["RANK"].ValueFrom; f == nil || f.FieldRef.FieldPath != "metadata.annotations['batch.kubernetes.io/job-completion-index']" {
		t.Errorf("RANK %+v", e["RANK"])
	}
	if img := j.Spec.Template.Spec.Containers[0].Image; img != "reg/train:1" {
		t.Errorf("image %q, want the executor's default for a job whose environment names none", img)
	}
	l.Image = "reg/env@sha256:0123"
	if img := build(Config{Namespace: "ml", Image: "reg/train:1"}, l).job.Spec.Template.Spec.Containers[0].Image; img != l.Image {
		t.Errorf("image %q, want the environment's %q", img, l.Image)
	}
	if g := j.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceName("amd.com/gpu")]; g.Value() != 8 {
		t.Errorf("GPUs per pod under the pool's resource name: %v", g)
	}
	anti := j.Spec.Template.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	if len(anti) != 1 || anti[0].TopologyKey != corev1.LabelHostname {
		t.Errorf("anti-affinity %+v: one pod per node", anti)
	}
}

func pod(name string, phase corev1.PodPhase, cs corev1.ContainerStatus) *corev1.Pod {
	cs.Name = containerName
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{cs}}}
}

func failedJob(reason string) *batchv1.Job {
	return &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{
		{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: reason, Message: "Job was active longer than specified deadline"}}}}
}

func TestObserve(t *testing.T) {
	terminated := func(code int32, reason string) corev1.ContainerStatus {
		return corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason}}}
	}
	running := corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	for _, c := range []struct {
		name    string
		job     *batchv1.Job
		pods    []*corev1.Pod
		started bool
		ended   bool
		state   domain.AttemptState
		reason  domain.Reason
		code    int
	}{
		{name: "running", pods: []*corev1.Pod{pod("p", corev1.PodRunning, running)}, started: true},
		{name: "complete", job: &batchv1.Job{Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}}}},
			pods: []*corev1.Pod{pod("p", corev1.PodSucceeded, terminated(0, "Completed"))}, started: true, ended: true,
			state: domain.AttemptSucceeded, reason: domain.ReasonCompleted},
		{name: "exit code", job: failedJob(batchv1.JobReasonBackoffLimitExceeded),
			pods:    []*corev1.Pod{pod("p0", corev1.PodSucceeded, terminated(0, "Completed")), pod("p1", corev1.PodFailed, terminated(2, "Error"))},
			started: true, ended: true, state: domain.AttemptFailed, reason: domain.ReasonExitCode, code: 2},
		{name: "oom", job: failedJob(batchv1.JobReasonBackoffLimitExceeded), pods: []*corev1.Pod{pod("p", corev1.PodFailed, terminated(137, "OOMKilled"))},
			started: true, ended: true, state: domain.AttemptFailed, reason: domain.ReasonOOMKilled, code: 137},
		{name: "deadline", job: failedJob(batchv1.JobReasonDeadlineExceeded), ended: true, state: domain.AttemptTimedOut, reason: domain.ReasonTimeout, code: -1},
		{name: "evicted", job: failedJob(batchv1.JobReasonBackoffLimitExceeded),
			pods:  []*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: memory."}}},
			ended: true, state: domain.AttemptFailed, reason: ReasonEvicted, code: -1},
		{name: "pull", pods: []*corev1.Pod{pod("p", corev1.PodPending, corev1.ContainerStatus{Image: "reg/x:1",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}})},
			state: domain.AttemptFailed, reason: ReasonImagePullFailed, code: -1},
		{name: "agent image pull", pods: []*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: corev1.PodStatus{Phase: corev1.PodPending,
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "trainyard-agent", Image: "reg/trainyard:typo",
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull"}}}}}}},
			state: domain.AttemptFailed, reason: ReasonImagePullFailed, code: -1},
		{name: "agent setup", job: failedJob(batchv1.JobReasonBackoffLimitExceeded),
			pods: []*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Status: corev1.PodStatus{Phase: corev1.PodFailed,
				InitContainerStatuses: []corev1.ContainerStatus{{Name: "trainyard-agent",
					State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "cp: cannot stat '/usr/bin/trainyard'"}}}}}}},
			ended: true, state: domain.AttemptFailed, reason: ReasonAgentSetupFailed, code: -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := observe(c.job, c.pods)
			if c.reason == ReasonImagePullFailed && !o.pullFail {
				t.Error("a pull failure not marked as one")
			}
			if o.started != c.started || o.ended != c.ended {
				t.Fatalf("started %v ended %v, want %v %v", o.started, o.ended, c.started, c.ended)
			}
			if c.state == "" {
				return
			}
			if o.exit.State != c.state || o.exit.Reason != c.reason || o.exit.Message == "" {
				t.Errorf("exit %s/%s %q, want %s/%s", o.exit.State, o.exit.Reason, o.exit.Message, c.state, c.reason)
			}
			if (c.code < 0) != (o.exit.ExitCode == nil) || (o.exit.ExitCode != nil && *o.exit.ExitCode != c.code) {
				t.Errorf("exit code %v, want %d", o.exit.ExitCode, c.code)
			}
		})
	}
}

// TestStartIsTheFirstContainers: a gang's attempt started when its first
// pod's container did, whichever order the pods are listed in and
// whether the others still run or have ended, so that its timeout, timed
// from its start, is not stretched by a pod placed late, nor by a server
// that restarted after every pod was running.
func TestStartIsTheFirstContainers(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(t0.Add(d)) }
	runningAt := func(d time.Duration) corev1.ContainerStatus {
		return corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at(d)}}}
	}
	ended := corev1.ContainerStatus{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{StartedAt: at(time.Second), FinishedAt: at(time.Minute)}}}
	pending := corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
	for _, pods := range [][]*corev1.Pod{
		{pod("p1", corev1.PodRunning, runningAt(30*time.Second)), pod("p0", corev1.PodSucceeded, ended)},
		{pod("p0", corev1.PodSucceeded, ended), pod("p2", corev1.PodPending, pending), pod("p1", corev1.PodRunning, runningAt(30*time.Second))},
	} {
		o := observe(nil, pods)
		if !o.started || !o.at.Equal(t0.Add(time.Second)) {
			t.Errorf("started %v at %v, want at %v (the first container's start)", o.started, o.at, t0.Add(time.Second))
		}
	}
}

func TestUnschedulableSaysWhy(t *testing.T) {
	p := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}}}}
	o := observe(nil, []*corev1.Pod{p})
	if o.started || o.ended || !strings.Contains(o.waiting, "Insufficient nvidia.com/gpu") {
		t.Errorf("%+v", o)
	}
}

// The executor links neither client-go's clientset nor its informer
// factory: both register every API group at process start, in every
// process that links the executor (client.go).
func TestLinksNoClientset(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "k8s.io/client-go/kubernetes" || pkg == "k8s.io/client-go/informers" || pkg == "k8s.io/client-go/kubernetes/scheme" {
			t.Errorf("the executor links %s", pkg)
		}
	}
}

// TestBuildAgentResume: the launch's resume candidates reach the agent in
// the main container's environment, in order, names and digests, and no
// stale TRAINYARD_RESUME_FROM or candidate list the launch carries does:
// the agent sets the one and reads only the executor's other.
func TestBuildAgentResume(t *testing.T) {
	cfg := Config{Namespace: "ml", Image: "reg/train:1", Agent: AgentConfig{Image: "reg/trainyard:1", APIURL: "http://trainyard.ml:7070"}}
	l := launch()
	l.Env = append(l.Env, "TRAINYARD_RESUME_FROM=/stale", `TRAINYARD_AGENT_RESUME=[{"name":"planted"}]`)
	l.Resume = []executor.ResumeFrom{{Name: "step-300", SHA256: "aa11"}, {Name: "model $best.pt", SHA256: "bb22"}, {Name: "legacy"}}
	c := build(cfg, l).job.Spec.Template.Spec.Containers[0]
	e := env(c)
	if _, ok := e["TRAINYARD_RESUME_FROM"]; ok {
		t.Errorf("TRAINYARD_RESUME_FROM = %+v reaches the pod; the agent sets it", e["TRAINYARD_RESUME_FROM"])
	}
	// Values go through the kubelet's $(VAR) expansion: $ is escaped.
	want := `[{"name":"step-300","sha256":"aa11"},{"name":"model $$best.pt","sha256":"bb22"},{"name":"legacy"}]`
	if got := e["TRAINYARD_AGENT_RESUME"]; got.Value != want || got.ValueFrom != nil {
		t.Errorf("TRAINYARD_AGENT_RESUME = %+v, want %s", got, want)
	}

	// No candidates: no variable, whatever the launch carries.
	l.Resume = nil
	e = env(build(cfg, l).job.Spec.Template.Spec.Containers[0])
	if v, ok := e["TRAINYARD_AGENT_RESUME"]; ok {
		t.Errorf("TRAINYARD_AGENT_RESUME = %+v without candidates", v)
	}
	// Without the agent nothing reads it: not set.
	l = launch()
	l.Resume = []executor.ResumeFrom{{Name: "step-300", SHA256: "aa11"}}
	e = env(build(Config{Namespace: "ml", Image: "reg/train:1"}, l).job.Spec.Template.Spec.Containers[0])
	if v, ok := e["TRAINYARD_AGENT_RESUME"]; ok {
		t.Errorf("TRAINYARD_AGENT_RESUME = %+v without the agent", v)
	}
}

// TestBuildAgentWarn: the launch's advance warning reaches the agent as
// SIGNAL@AFTER, AFTER counted from the start; a launch without one, or
// a pod without the agent, carries none, whatever the launch's
// environment says.
func TestBuildAgentWarn(t *testing.T) {
	cfg := Config{Namespace: "ml", Image: "reg/train:1", Agent: AgentConfig{Image: "reg/trainyard:1", APIURL: "http://trainyard.ml:7070"}}
	l := launch() // a timeout of 2h
	l.Env = append(l.Env, agentWarnEnv+"=KILL@0s")
	l.Warn = executor.Warn{Signal: "USR1", Before: 5 * time.Minute}
	if got := env(build(cfg, l).job.Spec.Template.Spec.Containers[0])[agentWarnEnv]; got.Value != "USR1@1h55m0s" {
		t.Errorf("%s = %+v, want USR1@1h55m0s", agentWarnEnv, got)
	}
	l.Warn = executor.Warn{}
	if got, ok := env(build(cfg, l).job.Spec.Template.Spec.Containers[0])[agentWarnEnv]; ok {
		t.Errorf("%s = %+v without a warning", agentWarnEnv, got)
	}
	l.Warn = executor.Warn{Signal: "USR1", Before: 5 * time.Minute}
	l.Env = launch().Env
	if got, ok := env(build(Config{Namespace: "ml", Image: "reg/train:1"}, l).job.Spec.Template.Spec.Containers[0])[agentWarnEnv]; ok {
		t.Errorf("%s = %+v without the agent", agentWarnEnv, got)
	}
}
