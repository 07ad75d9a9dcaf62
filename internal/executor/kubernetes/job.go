package kubernetes

import (
	"encoding/json"
	"fmt"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"trainyard/internal/executor"
)

// Labels on everything the executor creates: what finds an attempt's
// objects again after a restart.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelJob       = "trainyard.io/job"
	LabelAttempt   = "trainyard.io/attempt"
	LabelProject   = "trainyard.io/project"
	LabelPool      = "trainyard.io/pool"
	managedBy      = "trainyard"

	// containerName is the job's container in its pods.
	containerName = "job"
	// masterPort is the rendezvous port of a multi-node attempt: every
	// pod has its own IP, so one fixed port serves every attempt.
	masterPort = 29500
	// completionIndex is the annotation that holds an Indexed Job pod's
	// index, its node rank.
	completionIndex = "batch.kubernetes.io/job-completion-index"
)

// objectName is the name of the attempt's Job, Service and Secret: a DNS
// label, unique per attempt.
func objectName(ref executor.Ref) string {
	return fmt.Sprintf("ty-%d-%d", ref.JobID, ref.Attempt)
}

// refOf reads the attempt a labelled object belongs to.
func refOf(labels map[string]string) (executor.Ref, bool) {
	if labels[LabelManagedBy] != managedBy {
		return executor.Ref{}, false
	}
	id, err1 := strconv.ParseInt(labels[LabelJob], 10, 64)
	n, err2 := strconv.Atoi(labels[LabelAttempt])
	if err1 != nil || err2 != nil || id <= 0 || n <= 0 {
		return executor.Ref{}, false
	}
	return executor.Ref{JobID: id, Attempt: n}, true
}

func labelsOf(l executor.Launch) map[string]string {
	m := map[string]string{
		LabelManagedBy: managedBy,
		LabelJob:       strconv.FormatInt(l.JobID, 10),
		LabelAttempt:   strconv.Itoa(l.Attempt),
	}
	if l.Project != "" {
		m[LabelProject] = l.Project
	}
	if l.Pool != "" {
		m[LabelPool] = l.Pool
	}
	return m
}

// objects is what one attempt creates: its Job, the Secret holding its
// secret variables (nil when it has none) and, for a multi-node attempt,
// the headless Service its pods find each other by.
type objects struct {
	job     *batchv1.Job
	secret  *corev1.Secret
	service *corev1.Service
}

// build returns the objects of attempt l in namespace cfg.Namespace.
//
// One pod per node: resources.nodes pods, each with the attempt's whole
// per-node request. A multi-node attempt is an Indexed Job whose pods
// take their rank from their completion index and find rank 0 at
// <job>-0.<service>, with a pod anti-affinity that keeps them on separate
// nodes. Retries are Trainyard's: backoffLimit 0 and restartPolicy Never.
// A variable whose value is one of l.Redact goes through the Secret, so
// that no secret is in the Job's spec.
func build(cfg Config, l executor.Launch) objects {
	name := objectName(l.Ref)
	labels := labelsOf(l)
	nodes := max(l.Resources.Nodes, 1)
	meta := metav1.ObjectMeta{Name: name, Namespace: cfg.Namespace, Labels: labels}

	argv, vars := l.Argv, l.Env
	if cfg.Agent.Image != "" {
		argv, vars = agentCommand(cfg.Agent, l)
	}
	env, secret := splitEnv(vars, l.Redact, name)
	var o objects
	if len(secret) > 0 {
		o.secret = &corev1.Secret{ObjectMeta: meta, Type: corev1.SecretTypeOpaque, Data: secret}
	}
	env = append(env, placementEnv(l, name, nodes)...)

	res := corev1.ResourceList{}
	if l.Resources.CPUs > 0 {
		res[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(l.Resources.CPUs*1000+0.5), resource.DecimalSI)
	}
	if l.Resources.Memory > 0 {
		res[corev1.ResourceMemory] = *resource.NewQuantity(int64(l.Resources.Memory), resource.BinarySI)
	}
	if l.Resources.GPUs > 0 {
		res[corev1.ResourceName(cfg.gpuResource())] = *resource.NewQuantity(int64(l.Resources.GPUs), resource.DecimalSI)
	}
	grace := seconds(l.Grace)
	if l.Grace <= 0 {
		grace = int64(defaultGrace / time.Second)
	}
	image := l.Image // the job's environment's, else the executor's default
	if image == "" {
		image = cfg.Image
	}
	no := false
	pod := corev1.PodSpec{
		RestartPolicy:                 corev1.RestartPolicyNever,
		AutomountServiceAccountToken:  &no,
		EnableServiceLinks:            &no,
		TerminationGracePeriodSeconds: &grace,
		NodeSelector:                  cfg.NodeSelector,
		Tolerations:                   cfg.Tolerations,
		PriorityClassName:             cfg.PriorityClass,
		Affinity:                      affinity(l, labels, nodes),
		Containers: []corev1.Container{{
			Name:    containerName,
			Image:   image,
			Command: escapeAll(argv),
			Env:     env,
			// A failed job's terminated state carries its log's tail
			// (what a command not found says).
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			Resources:                corev1.ResourceRequirements{Requests: res, Limits: res},
		}},
	}
	if cfg.Agent.Image != "" {
		addAgent(&pod, cfg.Agent)
	}
	for _, s := range cfg.ImagePullSecrets {
		pod.ImagePullSecrets = append(pod.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	n := int32(nodes)
	zero := int32(0)
	spec := batchv1.JobSpec{
		Parallelism:  &n,
		Completions:  &n,
		BackoffLimit: &zero,
		Template:     corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: pod},
	}
	if l.Timeout > 0 {
		// The executor stops the attempt once its timeout has passed
		// since its start (Executor.timedOut). The Job's own deadline,
		// counted from its creation, is the backstop should no executor
		// run then: the timeout, the grace, and backstopSlack for placing
		// the pods and pulling the image.
		d := seconds(l.Timeout+backstopSlack) + grace
		spec.ActiveDeadlineSeconds = &d
	}
	if nodes > 1 {
		mode := batchv1.IndexedCompletion
		spec.CompletionMode = &mode
		spec.Template.Spec.Subdomain = name
		o.service = &corev1.Service{ObjectMeta: meta, Spec: corev1.ServiceSpec{
			ClusterIP:                corev1.ClusterIPNone,
			Selector:                 map[string]string{LabelManagedBy: managedBy, LabelJob: labels[LabelJob], LabelAttempt: labels[LabelAttempt]},
			PublishNotReadyAddresses: true,
		}}
	}
	o.job = &batchv1.Job{ObjectMeta: meta, Spec: spec}
	return o
}

// seconds is d in whole seconds, as Kubernetes counts grace periods and
// deadlines, rounded up: a grace period is never rounded down to an
// immediate kill.
func seconds(d time.Duration) int64 { return int64(math.Ceil(d.Seconds())) }

// defaultGrace is the grace period of a launch that gives none.
const defaultGrace = 10 * time.Second

// backstopSlack is what a Job's deadline gives beyond the attempt's
// timeout and grace (see build).
const backstopSlack = 30 * time.Minute

// agentVolume is the emptyDir that carries the trainyard binary and the
// job's outputs; agentInit the init container that puts the binary there.
const (
	agentVolume = "trainyard"
	agentInit   = "trainyard-agent"
)

// agentResumeEnv names the variable that hands the agent the checkpoints
// the attempt may resume from (Launch.Resume), as a JSON array of
// {"name", "sha256"} objects, the one to prefer first. The agent
// (internal/agent) downloads the first it can verify into the emptyDir
// and sets TRAINYARD_RESUME_FROM for the job: the pod's checkpoint
// directory starts empty.
const agentResumeEnv = "TRAINYARD_AGENT_RESUME"

// agentWarnEnv hands the agent the launch's advance warning (Launch.Warn)
// as SIGNAL@AFTER, AFTER a Go duration from the agent's start: the agent
// sends it to the job's processes; the executor stops the attempt at its
// timeout (Executor.timedOut).
const agentWarnEnv = "TRAINYARD_AGENT_WARN"

// resumeCandidate is one element of agentResumeEnv's value.
type resumeCandidate struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256,omitempty"`
}

// agentCommand is the job container's command and environment under the
// agent: Dir/bin/trainyard agent -- argv, its outputs and checkpoints in
// the emptyDir (replacing the server's paths the launch carries), the API
// at the URL pods reach, and the checkpoints to resume from
// (agentResumeEnv). TRAINYARD_RESUME_FROM is the agent's to set: a value
// the launch carries is dropped.
func agentCommand(a AgentConfig, l executor.Launch) (argv, env []string) {
	dir := a.dir()
	argv = append([]string{path.Join(dir, "bin", "trainyard"), "agent", "--"}, l.Argv...)
	out := path.Join(dir, "outputs")
	env = slices.DeleteFunc(slices.Clone(l.Env), func(kv string) bool {
		return strings.HasPrefix(kv, "TRAINYARD_RESUME_FROM=") || strings.HasPrefix(kv, agentResumeEnv+"=") || strings.HasPrefix(kv, agentWarnEnv+"=")
	})
	// A later definition wins (splitEnv).
	env = append(env, "TRAINYARD_OUTPUT_DIR="+out, "TRAINYARD_CHECKPOINT_DIR="+path.Join(out, "checkpoints"))
	if a.APIURL != "" {
		env = append(env, "TRAINYARD_API="+a.APIURL)
	}
	if len(l.Resume) > 0 {
		cands := make([]resumeCandidate, len(l.Resume))
		for i, r := range l.Resume {
			cands[i] = resumeCandidate{Name: r.Name, SHA256: r.SHA256}
		}
		b, err := json.Marshal(cands)
		if err != nil {
			panic(fmt.Sprintf("marshal the resume candidates: %v", err)) // strings only: cannot fail
		}
		env = append(env, agentResumeEnv+"="+string(b))
	}
	if w := l.Warn; w.Signal != "" && l.Timeout > 0 && w.Before > 0 && w.Before < l.Timeout {
		env = append(env, agentWarnEnv+"="+w.Signal+"@"+(l.Timeout-w.Before).String())
	}
	return argv, env
}

// addAgent adds to pod the emptyDir mounted at a.Dir in every container
// and the init container that copies the trainyard binary of a.Image
// into it, as Dir/bin/trainyard.
func addAgent(pod *corev1.PodSpec, a AgentConfig) {
	dir := a.dir()
	mount := corev1.VolumeMount{Name: agentVolume, MountPath: dir}
	pod.Volumes = append(pod.Volumes, corev1.Volume{Name: agentVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	for i := range pod.Containers {
		pod.Containers[i].VolumeMounts = append(pod.Containers[i].VolumeMounts, mount)
	}
	pod.InitContainers = append(pod.InitContainers, corev1.Container{
		Name:  agentInit,
		Image: a.Image,
		// The paths as the shell's arguments, never parsed by it.
		Command:                  escapeAll([]string{"/bin/sh", "-c", `mkdir -p "$0/bin" && cp "$1" "$0/bin/trainyard"`, dir, a.path()}),
		VolumeMounts:             []corev1.VolumeMount{mount},
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		// Small, and both set: a namespace whose quota requires them on
		// every container still admits the pod, and the pod's request
		// stays the job's (the larger of the init and the app containers).
		Resources: corev1.ResourceRequirements{Requests: agentInitResources, Limits: agentInitResources},
	})
}

// agentInitResources are what copying the agent takes.
var agentInitResources = corev1.ResourceList{
	corev1.ResourceCPU:    resource.MustParse("100m"),
	corev1.ResourceMemory: resource.MustParse("128Mi"),
}

// splitEnv separates the variables whose value is a secret (one of
// redact; values under 4 bytes are never treated as secrets, as in the
// logs) into the Secret's data, referenced by name, from the others. A
// later definition of a name wins, as in a process's environment.
func splitEnv(vars, redact []string, secretName string) ([]corev1.EnvVar, map[string][]byte) {
	secrets := map[string]bool{}
	for _, v := range redact {
		if len(v) >= 4 {
			secrets[v] = true
		}
	}
	last := map[string]int{}
	for i, kv := range vars {
		k, _, _ := strings.Cut(kv, "=")
		last[k] = i
	}
	var env []corev1.EnvVar
	var data map[string][]byte
	for i, kv := range vars {
		k, v, _ := strings.Cut(kv, "=")
		if k == "" || last[k] != i || placementVar(k) {
			continue
		}
		if !secrets[v] {
			env = append(env, corev1.EnvVar{Name: k, Value: escape(v)})
			continue
		}
		if data == nil {
			data = map[string][]byte{}
		}
		data[k] = []byte(v)
		env = append(env, corev1.EnvVar{Name: k, ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: secretName}, Key: k},
		}})
	}
	return env, data
}

// escape keeps s as it is in a container's command or a variable's
// value: the kubelet expands $(VAR) there, and $$ to $.
func escape(s string) string { return strings.ReplaceAll(s, "$", "$$") }

func escapeAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = escape(s)
	}
	return out
}

// placementVar reports the variables the executor sets from the
// placement itself (executor.Placement.Env); the device plugin sets
// CUDA_VISIBLE_DEVICES in a pod.
func placementVar(k string) bool {
	switch k {
	case "CUDA_VISIBLE_DEVICES", "WORLD_SIZE", "RANK", "NODE_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT":
		return true
	}
	return false
}

// placementEnv is the rank environment of a pod (executor.Placement.Env
// without CUDA_VISIBLE_DEVICES, which the GPU device plugin sets): a
// multi-node attempt's pods read their rank from their completion index.
func placementEnv(l executor.Launch, name string, nodes int) []corev1.EnvVar {
	env := []corev1.EnvVar{
		{Name: "WORLD_SIZE", Value: strconv.Itoa(nodes)},
		{Name: "LOCAL_RANK", Value: "0"},
		{Name: "LOCAL_WORLD_SIZE", Value: "1"},
		{Name: "MASTER_PORT", Value: strconv.Itoa(masterPort)},
	}
	if nodes == 1 {
		return append(env,
			corev1.EnvVar{Name: "RANK", Value: "0"},
			corev1.EnvVar{Name: "NODE_RANK", Value: "0"},
			corev1.EnvVar{Name: "MASTER_ADDR", Value: "localhost"})
	}
	index := &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.annotations['" + completionIndex + "']"}}
	return append(env,
		corev1.EnvVar{Name: "RANK", ValueFrom: index},
		corev1.EnvVar{Name: "NODE_RANK", ValueFrom: index},
		// Pod 0 of an Indexed Job is <job>-0, and the headless Service
		// named like the Job publishes it as <job>-0.<job>.
		corev1.EnvVar{Name: "MASTER_ADDR", Value: name + "-0." + name})
}

// affinity pins the attempt's pods to the nodes Trainyard's scheduler
// placed it on (when the placement names them) and, for a multi-node
// attempt, one pod per node.
func affinity(l executor.Launch, labels map[string]string, nodes int) *corev1.Affinity {
	var placed []string
	for _, n := range l.Placement.Nodes {
		if n.Name != "" && !slices.Contains(placed, n.Name) {
			placed = append(placed, n.Name)
		}
	}
	var a corev1.Affinity
	if len(placed) > 0 {
		a.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: placed,
			}}}},
		}}
	}
	if nodes > 1 {
		a.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{LabelJob: labels[LabelJob], LabelAttempt: labels[LabelAttempt]}},
			TopologyKey:   corev1.LabelHostname,
		}}}
	}
	if a.NodeAffinity == nil && a.PodAntiAffinity == nil {
		return nil
	}
	return &a
}
