package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"path"
	"reflect"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/kubernetes"
	"trainyard/internal/executor/local"
	"trainyard/internal/executor/slurm"
	"trainyard/internal/service"
)

// executorConfig declares an executor beside the local one (server config
// executors, docs/operator.md): pools name it to run their jobs there.
type executorConfig struct {
	// Name is what pools name (pool create --executor NAME).
	Name string `yaml:"name"`
	// Kind is the engine: kubernetes or slurm.
	Kind string `yaml:"kind"`

	// Kubernetes (kind: kubernetes).

	// Kubeconfig is the kubeconfig file that reaches the cluster (its
	// current context, or Context); empty: the service account of the pod
	// the server runs in.
	Kubeconfig string `yaml:"kubeconfig"`
	Context    string `yaml:"context"`
	// Namespace holds the attempts' Jobs, pods, Services and Secrets.
	Namespace string `yaml:"namespace"`
	// Image runs jobs whose environment names no image.
	Image string `yaml:"image"`
	// GPUResource is the extended resource that counts GPUs (default
	// nvidia.com/gpu).
	GPUResource string `yaml:"gpu_resource"`
	// NodeSelector picks the nodes the executor offers (its pools' nodes)
	// and goes on every pod, with Tolerations and PriorityClass.
	NodeSelector     map[string]string  `yaml:"node_selector"`
	Tolerations      []tolerationConfig `yaml:"tolerations"`
	PriorityClass    string             `yaml:"priority_class"`
	ImagePullSecrets []string           `yaml:"image_pull_secrets"`
	// Compress asks the API server to gzip its answers: only worth its
	// CPU over a slow link to the cluster.
	Compress bool `yaml:"compress"`
	// Agent puts the in-job agent (this binary) in every pod, which
	// reports progress, checkpoints and outputs through the API: without
	// it they stay in the pod.
	Agent agentConfig `yaml:"agent"`

	// Slurm (kind: slurm).

	// Partition, Account and QoS go on every batch job when set;
	// Partition also picks the nodes the executor offers.
	Partition string `yaml:"partition"`
	Account   string `yaml:"account"`
	QoS       string `yaml:"qos"`
	// Shim starts the attempt supervisor on the nodes (default: the
	// trainyard-shim beside this binary, or this binary with "shim").
	Shim []string `yaml:"shim"`
	// Env is added to the environment of the Slurm commands (sbatch,
	// squeue, scancel, scontrol), e.g. SLURM_CONF=/etc/slurm/other.conf.
	Env []string `yaml:"env"`
	// NamePrefix starts the Slurm name of every job (default trainyard):
	// two servers sharing a cluster need different ones.
	NamePrefix string `yaml:"name_prefix"`
	// PollInterval is how often squeue is asked (default 1s); KillAfter
	// how long after a stop's grace a job is cancelled outright (10s).
	PollInterval domain.Duration `yaml:"poll_interval"`
	KillAfter    domain.Duration `yaml:"kill_after"`
	// MemoryLimits says the cluster enforces --mem (task/cgroup).
	MemoryLimits bool `yaml:"memory_limits"`
}

// kubernetesOnly and slurmOnly name the fields of one kind that the other
// refuses, with whether c sets them.
func (c executorConfig) kubernetesOnly() []struct {
	name string
	set  bool
} {
	return []struct {
		name string
		set  bool
	}{{"kubeconfig", c.Kubeconfig != ""}, {"context", c.Context != ""}, {"namespace", c.Namespace != ""},
		{"image", c.Image != ""}, {"gpu_resource", c.GPUResource != ""}, {"node_selector", len(c.NodeSelector) > 0},
		{"tolerations", len(c.Tolerations) > 0}, {"priority_class", c.PriorityClass != ""},
		{"image_pull_secrets", len(c.ImagePullSecrets) > 0}, {"compress", c.Compress}, {"agent", c.Agent != (agentConfig{})}}
}

func (c executorConfig) slurmOnly() []struct {
	name string
	set  bool
} {
	return []struct {
		name string
		set  bool
	}{{"partition", c.Partition != ""}, {"account", c.Account != ""}, {"qos", c.QoS != ""}, {"shim", len(c.Shim) > 0},
		{"env", len(c.Env) > 0}, {"name_prefix", c.NamePrefix != ""}, {"poll_interval", c.PollInterval != 0},
		{"kill_after", c.KillAfter != 0}, {"memory_limits", c.MemoryLimits}}
}

// agentConfig is where pods get the in-job agent and reach the server.
type agentConfig struct {
	// Image holds the trainyard binary and a shell: the server's image.
	Image string `yaml:"image"`
	// Path is the binary's path in Image (default /usr/local/bin/trainyard).
	Path string `yaml:"path"`
	// Dir is where each pod gets the agent and its outputs (default
	// /trainyard): a directory the job's image does not use.
	Dir string `yaml:"dir"`
	// APIURL is the server's URL as pods reach it, e.g.
	// http://trainyard.trainyard.svc:7070; default the server's own,
	// which only pods on its machine reach.
	APIURL string `yaml:"api_url"`
}

// tolerationConfig is a pod toleration, as in a pod spec.
type tolerationConfig struct {
	Key      string `yaml:"key"`
	Operator string `yaml:"operator"` // Equal (default) or Exists
	Value    string `yaml:"value"`
	Effect   string `yaml:"effect"` // NoSchedule, PreferNoSchedule, NoExecute, or empty: all
}

// The kinds of executor besides the local one.
const (
	executorKubernetes = "kubernetes"
	executorSlurm      = "slurm"
)

// validateExecutors reports every problem with the executors block.
func validateExecutors(cfgs []executorConfig) []error {
	var errs []error
	add := func(i int, field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("server config executors[%d].%s: %s", i, field, fmt.Sprintf(format, args...)))
	}
	seen := map[string]int{}
	for i, c := range cfgs {
		switch {
		case c.Name == "":
			add(i, "name", "missing; name the executor as pools will (e.g. gpu-cluster)")
		case c.Name == service.ExecutorLocal:
			add(i, "name", "%q is the built-in local executor; choose another name", c.Name)
		default:
			if err := service.ValidName(c.Name); err != nil {
				add(i, "name", "%v", err)
			}
			if j, dup := seen[c.Name]; dup {
				add(i, "name", "%q is already declared at executors[%d]", c.Name, j)
			}
			seen[c.Name] = i
		}
		switch c.Kind {
		case "":
			add(i, "kind", "missing; say which engine it is: %s or %s", executorKubernetes, executorSlurm)
			continue
		case executorKubernetes:
			for _, f := range c.slurmOnly() {
				if f.set {
					add(i, f.name, "is for kind %s; a %s executor does not use it, so leave it out", executorSlurm, executorKubernetes)
				}
			}
		case executorSlurm:
			validateSlurm(i, c, add)
			continue
		default:
			add(i, "kind", "%q is not a kind of executor; use %s or %s", c.Kind, executorKubernetes, executorSlurm)
			continue
		}
		if c.Namespace == "" {
			add(i, "namespace", "missing; name the namespace the jobs' pods run in")
		}
		if c.Image == "" {
			add(i, "image", "missing; name the image that runs jobs whose environment names none (e.g. python:3.12)")
		}
		if a := c.Agent; a.Image != "" {
			if u, err := url.Parse(a.APIURL); a.APIURL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
				add(i, "agent.api_url", "%q is not an http(s) URL; give one such as http://trainyard.trainyard.svc:7070", a.APIURL)
			}
			for _, f := range []struct{ name, path string }{{"agent.path", a.Path}, {"agent.dir", a.Dir}} {
				if f.path != "" && !path.IsAbs(f.path) {
					add(i, f.name, "%q is not an absolute path", f.path)
				}
			}
		} else if c.Agent != (agentConfig{}) {
			add(i, "agent.image", "missing; name the image holding the trainyard binary (the server's own), or leave agent out")
		}
		for j, t := range c.Tolerations {
			if t.Operator != "" && t.Operator != "Equal" && t.Operator != "Exists" {
				add(i, fmt.Sprintf("tolerations[%d].operator", j), "%q is not an operator; use Equal or Exists", t.Operator)
			}
			switch t.Effect {
			case "", "NoSchedule", "PreferNoSchedule", "NoExecute":
			default:
				add(i, fmt.Sprintf("tolerations[%d].effect", j), "%q is not an effect; use NoSchedule, PreferNoSchedule or NoExecute (or leave it out: all)", t.Effect)
			}
		}
	}
	return errs
}

// validateSlurm reports the problems of a slurm executor (executors[i])
// through add.
func validateSlurm(i int, c executorConfig, add func(i int, field, format string, args ...any)) {
	for _, f := range c.kubernetesOnly() {
		if f.set {
			add(i, f.name, "is for kind %s; a %s executor does not use it, so leave it out", executorKubernetes, executorSlurm)
		}
	}
	for j, w := range c.Shim {
		if w == "" {
			add(i, fmt.Sprintf("shim[%d]", j), "is empty; give the supervisor's command, e.g. [/usr/local/bin/trainyard-shim]")
		}
	}
	if len(c.Shim) > 0 && c.Shim[0] != "" && !path.IsAbs(c.Shim[0]) {
		add(i, "shim[0]", "%q is not an absolute path; give the supervisor's path as the nodes see it (the batch step has no PATH of the server's)", c.Shim[0])
	}
	for j, kv := range c.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			add(i, fmt.Sprintf("env[%d]", j), "%q is not NAME=value; give e.g. SLURM_CONF=/etc/slurm/slurm.conf", kv)
		}
	}
	if c.NamePrefix != "" {
		if err := service.ValidName(c.NamePrefix); err != nil {
			add(i, "name_prefix", "%v", err)
		}
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"poll_interval", c.PollInterval.D()}, {"kill_after", c.KillAfter.D()}} {
		if f.d < 0 {
			add(i, f.name, "%s is negative; give a positive duration such as 5s, or leave it out for the default", f.d)
		}
	}
	if c.PollInterval != 0 && c.PollInterval.D() < 100*time.Millisecond {
		add(i, "poll_interval", "%s is too short: every poll runs squeue on the controller; give 100ms or more (default 1s)", c.PollInterval.D())
	}
}

// slurmIsolation refuses a slurm executor on a server that isolates jobs
// (isolation auto or required, as root): Slurm runs a batch job as the
// user that submitted it, the server's, so the cluster's jobs would run
// as root, not as their projects' users.
func slurmIsolation(isolated bool, cfgs []executorConfig) error {
	if !isolated {
		return nil
	}
	for _, c := range cfgs {
		if c.Kind == executorSlurm {
			return fmt.Errorf("server config executors: %s is a slurm executor, whose jobs run as the Unix user the server submits them as, "+
				"here root, while isolation runs each project's jobs as its own user: run the server as an unprivileged user "+
				"that the cluster knows (isolation then does not apply), or set isolation: off to accept that every job runs as the server's user", c.Name)
		}
	}
	return nil
}

// executorNames lists the declared executors' names.
func executorNames(cfgs []executorConfig) []string {
	var names []string
	for _, c := range cfgs {
		if c.Name != "" && c.Name != service.ExecutorLocal && !slices.Contains(names, c.Name) {
			names = append(names, c.Name)
		}
	}
	return names
}

// clusterEngine is what the server needs of an executor beside the local
// one (kubernetes.Executor, slurm.Executor): to run attempts, to say why
// one waits (why), to list the attempts it runs that no attempt of this
// server owns (reapStrays), and to stop.
type clusterEngine interface {
	executor.Executor
	Waiting(ref executor.Ref) string
	Strays(minAge time.Duration) []executor.Ref
	Close() error
}

// nodeWatcher is a cluster executor that signals when its nodes change
// (kubernetes.Executor); the others are polled (nodePoll).
type nodeWatcher interface {
	NodesChanged() <-chan struct{}
}

var (
	_ clusterEngine = (*kubernetes.Executor)(nil)
	_ nodeWatcher   = (*kubernetes.Executor)(nil)
	_ clusterEngine = (*slurm.Executor)(nil)
)

// nodePoll is how often the nodes of a cluster executor that does not
// signal their changes (Slurm) are read again.
var nodePoll = 30 * time.Second

// clusterExecutor is a started executor beside the local one.
type clusterExecutor struct {
	name string
	kind string // executorKubernetes or executorSlurm
	ex   clusterEngine
}

// startExecutors starts every declared executor, each reading what
// outlives attempts (logs) through files, within timeout. self is this
// binary, whose supervisor a slurm executor runs unless it names one. On
// error it closes those it started.
func startExecutors(ctx context.Context, cfgs []executorConfig, files executor.Files, self string, log *slog.Logger, timeout time.Duration) ([]clusterExecutor, error) {
	var out []clusterExecutor
	for _, c := range cfgs {
		sctx, cancel := context.WithTimeout(ctx, timeout)
		ex, where, err := startExecutor(sctx, c, files, self, log)
		cancel()
		if err == nil {
			out = append(out, clusterExecutor{name: c.Name, kind: c.Kind, ex: ex})
			continue
		}
		for _, s := range out {
			s.ex.Close()
		}
		return nil, fmt.Errorf("start executor %s (%s, %s): %w", c.Name, c.Kind, where, err)
	}
	return out, nil
}

// startExecutor starts one declared executor; where says, for an error,
// what it reached for.
func startExecutor(ctx context.Context, c executorConfig, files executor.Files, self string, log *slog.Logger) (clusterEngine, string, error) {
	log = log.With("executor", c.Name)
	if c.Kind == executorSlurm {
		shim := c.Shim
		if len(shim) == 0 {
			var why string
			if shim, why = local.FindShim(self); why != "" {
				log.Info("slurm executor supervisor: " + why)
			}
		}
		where := "partition " + cmp.Or(c.Partition, "(the cluster's default)")
		ex, err := slurm.New(ctx, slurm.Config{ShimCommand: shim, Env: c.Env, Partition: c.Partition, Account: c.Account,
			QoS: c.QoS, NamePrefix: c.NamePrefix, PollInterval: c.PollInterval.D(), KillAfter: c.KillAfter.D(),
			MemoryLimits: c.MemoryLimits, Files: files, Log: log})
		if err != nil {
			return nil, where, fmt.Errorf("%w (check that sbatch, squeue, scancel and scontrol are in PATH, that munge runs, and the executor's env, e.g. SLURM_CONF)", err)
		}
		return ex, where, nil
	}
	where := "namespace " + c.Namespace
	if c.Agent.Image != "" && c.Agent.APIURL == "" {
		log.Warn("executor agent.api_url is not set: pods report to the server's own URL, which pods on other machines cannot reach")
	}
	rest, err := kubernetes.RESTConfig(c.Kubeconfig, c.Context)
	if err != nil {
		return nil, where, err
	}
	ex, err := kubernetes.New(ctx, kubernetes.Config{REST: rest, Namespace: c.Namespace, Image: c.Image,
		GPUResource: c.GPUResource, NodeSelector: c.NodeSelector, Tolerations: tolerations(c.Tolerations),
		PriorityClass: c.PriorityClass, ImagePullSecrets: c.ImagePullSecrets, Files: files, Compress: c.Compress,
		Agent: kubernetes.AgentConfig{Image: c.Agent.Image, Path: c.Agent.Path, Dir: c.Agent.Dir, APIURL: c.Agent.APIURL},
		Log:   log})
	if err != nil {
		return nil, where, err
	}
	return ex, where, nil
}

func tolerations(in []tolerationConfig) []corev1.Toleration {
	var out []corev1.Toleration
	for _, t := range in {
		out = append(out, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOperator(t.Operator),
			Value: t.Value, Effect: corev1.TaintEffect(t.Effect)})
	}
	return out
}

// nodesOf returns what an executor offers as pool nodes.
func nodesOf(ctx context.Context, ex executor.Executor) ([]domain.Node, error) {
	inv, err := ex.Inventory(ctx)
	if err != nil {
		return nil, err
	}
	nodes := make([]domain.Node, 0, len(inv.Nodes))
	for _, n := range inv.Nodes {
		nodes = append(nodes, domain.Node{Name: n.Name, CPUs: n.CPUs, Memory: n.Memory, GPUs: slices.Clone(n.GPUs)})
	}
	return nodes, nil
}

// followNodes keeps the pools on a cluster executor in step with its
// nodes until ctx ends: a node added, drained or removed (autoscaling)
// changes their capacity within moments where the executor signals it
// (Kubernetes), within nodePoll where it is polled (Slurm). Bursts of
// node updates (heartbeats) are coalesced; pools whose nodes did not
// change are not written.
func followNodes(ctx context.Context, svc *service.Service, c clusterExecutor, log *slog.Logger) {
	// Most node updates are heartbeats that change nothing a pool holds:
	// the store is read only when the cluster's offer differs from the
	// one last synced (pools created since took the offer themselves).
	var last []domain.Node
	synced := false
	update := func() {
		nodes, err := nodesOf(ctx, c.ex)
		if err == nil && synced && reflect.DeepEqual(nodes, last) {
			return
		}
		changed, err := svc.Pools.SyncPoolNodes(ctx, c.name)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("cannot update the pools of an executor from its nodes", "executor", c.name, "err", err)
		case len(changed) > 0:
			log.Info("pools follow their cluster's nodes", "executor", c.name, "pools", strings.Join(changed, ","))
		}
		last, synced = nodes, err == nil
	}
	update()
	var changed <-chan struct{} // nil: never
	var tick <-chan time.Time
	if w, ok := c.ex.(nodeWatcher); ok {
		changed = w.NodesChanged()
	} else {
		t := time.NewTicker(nodePoll)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			update()
		case <-changed:
			update()
			select { // coalesce a burst
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// strayAge is how old a Job no attempt of this server owns must be before
// it is removed: younger, it may be a launch another replica is making.
const strayAge = time.Minute

// jobGetter reads a job from the store.
type jobGetter interface {
	GetJob(ctx context.Context, id int64) (domain.Job, error)
}

// strayer is a cluster executor that lists the attempts it runs that no
// attempt of this server owns (kubernetes.Executor.Strays,
// slurm.Executor.Strays).
type strayer interface {
	Strays(minAge time.Duration) []executor.Ref
	Release(ctx context.Context, ref executor.Ref) error
}

// reapStrays removes, on every tick until ctx ends, the jobs on a cluster
// (Kubernetes Jobs, Slurm batch jobs) that no active attempt owns:
// attempts that ended or were lost while no server watched, jobs deleted
// since, a release a crash interrupted. Jobs of active attempts are left
// to the control loop, which adopts them.
func reapStrays(ctx context.Context, st jobGetter, name string, ex strayer, log *slog.Logger, ticks <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticks:
		}
		for _, ref := range ex.Strays(strayAge) {
			job, err := st.GetJob(ctx, ref.JobID)
			switch {
			case errors.Is(err, domain.ErrNotFound):
			case err != nil:
				continue // the next tick tries again
			case job.State.Active() && job.Attempts == ref.Attempt:
				continue // the control loop adopts it
			}
			if err := ex.Release(ctx, ref); err != nil {
				log.Warn("cannot remove a cluster job (Kubernetes Job, Slurm batch job) that no active attempt owns", "executor", name, "attempt", ref.String(), "err", err)
				continue
			}
			log.Info("removed a cluster job (Kubernetes Job, Slurm batch job) that no active attempt owns", "executor", name, "attempt", ref.String())
		}
	}
}
