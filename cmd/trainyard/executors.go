package main

import (
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
	"trainyard/internal/service"
)

// executorConfig declares an executor beside the local one (server config
// executors, docs/operator.md): pools name it to run their jobs there.
type executorConfig struct {
	// Name is what pools name (pool create --executor NAME).
	Name string `yaml:"name"`
	// Kind is the engine: kubernetes.
	Kind string `yaml:"kind"`
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

// executorKubernetes is the one kind of executor besides the local one.
const executorKubernetes = "kubernetes"

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
		if c.Kind == "" {
			add(i, "kind", "missing; say which engine it is: %s", executorKubernetes)
			continue
		}
		if c.Kind != executorKubernetes {
			add(i, "kind", "%q is not a kind of executor; use %s", c.Kind, executorKubernetes)
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

// clusterExecutor is a started executor beside the local one.
type clusterExecutor struct {
	name string
	ex   *kubernetes.Executor
}

// startExecutors starts every declared executor, each reading what
// outlives attempts (logs) through files, within timeout. On error it
// closes those it started.
func startExecutors(ctx context.Context, cfgs []executorConfig, files executor.Files, log *slog.Logger, timeout time.Duration) ([]clusterExecutor, error) {
	var out []clusterExecutor
	for _, c := range cfgs {
		if c.Agent.Image != "" && c.Agent.APIURL == "" {
			log.Warn("executor agent.api_url is not set: pods report to the server's own URL, which pods on other machines cannot reach", "executor", c.Name)
		}
		rest, err := kubernetes.RESTConfig(c.Kubeconfig, c.Context)
		if err == nil {
			sctx, cancel := context.WithTimeout(ctx, timeout)
			var ex *kubernetes.Executor
			ex, err = kubernetes.New(sctx, kubernetes.Config{REST: rest, Namespace: c.Namespace, Image: c.Image,
				GPUResource: c.GPUResource, NodeSelector: c.NodeSelector, Tolerations: tolerations(c.Tolerations),
				PriorityClass: c.PriorityClass, ImagePullSecrets: c.ImagePullSecrets, Files: files, Compress: c.Compress,
				Agent: kubernetes.AgentConfig{Image: c.Agent.Image, Path: c.Agent.Path, Dir: c.Agent.Dir, APIURL: c.Agent.APIURL},
				Log:   log.With("executor", c.Name)})
			cancel()
			if err == nil {
				out = append(out, clusterExecutor{name: c.Name, ex: ex})
				continue
			}
		}
		for _, s := range out {
			s.ex.Close()
		}
		return nil, fmt.Errorf("start executor %s (kubernetes, namespace %s): %w", c.Name, c.Namespace, err)
	}
	return out, nil
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
// changes their capacity within moments. Bursts of node updates
// (heartbeats) are coalesced; pools whose nodes did not change are not
// written.
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
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.ex.NodesChanged():
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
// attempt of this server owns (kubernetes.Executor.Strays).
type strayer interface {
	Strays(minAge time.Duration) []executor.Ref
	Release(ctx context.Context, ref executor.Ref) error
}

// reapStrays removes, on every tick until ctx ends, the Jobs on a cluster
// that no active attempt owns: attempts that ended or were lost while no
// server watched, jobs deleted since, a release a crash interrupted. Jobs
// of active attempts are left to the control loop, which adopts them.
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
				log.Warn("cannot remove a Kubernetes Job that no active attempt owns", "executor", name, "attempt", ref.String(), "err", err)
				continue
			}
			log.Info("removed a Kubernetes Job that no active attempt owns", "executor", name, "attempt", ref.String())
		}
	}
}
