// Package kubernetes runs attempts on a Kubernetes cluster, one batch/v1
// Job per attempt (an Indexed Job and a headless Service for a multi-node
// attempt), and follows them through shared informers on Jobs and pods:
// one watch of each for every attempt, however many run.
//
// Trainyard keeps the queue, quotas and retries: a Job's backoffLimit is
// 0 and its pods never restart; the scheduler has already placed the
// attempt, so its pods are pinned to the nodes it chose.
package kubernetes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/local"
)

// Config configures a Kubernetes executor.
type Config struct {
	// REST reaches the API server (from a kubeconfig, or in-cluster).
	REST *rest.Config
	// Namespace holds the attempts' Jobs, pods, Services and Secrets.
	Namespace string
	// Image runs jobs whose environment names none.
	Image string
	// GPUResource is the extended resource that counts GPUs; default
	// nvidia.com/gpu.
	GPUResource string
	// NodeSelector, Tolerations and PriorityClass go on every pod; the
	// nodes NodeSelector picks are also the inventory.
	NodeSelector     map[string]string
	Tolerations      []corev1.Toleration
	PriorityClass    string
	ImagePullSecrets []string
	// Files is the read side (logs, outputs): where the executor keeps
	// what outlives the pods.
	Files executor.Files
	// FollowAfter is how long a pod's container runs before its log is
	// followed (a stream held open); one that ends sooner is read with one
	// request at its end. Following the attempt's log (Logs with Follow)
	// follows its pods at once. Default 5s.
	FollowAfter time.Duration
	// Agent, with its Image set, runs each pod's command under the in-job
	// agent (trainyard agent), which reports the attempt's progress,
	// checkpoints and outputs through the API with its job token: the
	// pod's filesystem is not the server's. Without it pods run the bare
	// command.
	Agent AgentConfig
	// Compress asks the API server to gzip its answers, watch events
	// included. Off by default: compressing every event costs the API
	// server, and decompressing it the executor, more CPU than the bytes
	// are worth unless the API server is reached over a slow link.
	Compress bool
	Log      *slog.Logger
}

// Defaults of AgentConfig.
const (
	DefaultAgentPath = "/usr/local/bin/trainyard"
	DefaultAgentDir  = "/trainyard"
)

// AgentConfig puts the trainyard binary in every pod: an init container of
// Image copies Path into an emptyDir volume mounted at Dir, and the job's
// container runs Dir/bin/trainyard agent -- COMMAND, with its outputs
// (TRAINYARD_OUTPUT_DIR) in Dir/outputs, its checkpoints
// (TRAINYARD_CHECKPOINT_DIR) in Dir/outputs/checkpoints.
type AgentConfig struct {
	// Image holds the trainyard binary (and a shell with mkdir and cp):
	// the server's own image does. Empty: no agent.
	Image string
	// Path is the binary's path in Image; default DefaultAgentPath.
	Path string
	// Dir is where the pod's emptyDir is mounted; default
	// DefaultAgentDir. It must not be a directory of the job's image.
	Dir string
	// APIURL is the server's URL as pods reach it: it replaces
	// TRAINYARD_API (the server's own view) in the pod's environment.
	// Empty: TRAINYARD_API is left as launched.
	APIURL string
}

func (a AgentConfig) path() string { return cmp.Or(a.Path, DefaultAgentPath) }
func (a AgentConfig) dir() string  { return cmp.Or(a.Dir, DefaultAgentDir) }

func (c Config) gpuResource() string {
	if c.GPUResource == "" {
		return "nvidia.com/gpu"
	}
	return c.GPUResource
}

// Executor runs attempts as Kubernetes Jobs.
type Executor struct {
	executor.Files
	cfg    Config
	client *client
	jobs   cache.SharedIndexInformer
	pods   cache.SharedIndexInformer
	nodes  cache.SharedIndexInformer
	events *executor.EventQueue
	stop   chan struct{}
	ctx    context.Context // ends with stop: the log followers'
	cancel context.CancelFunc
	log    *slog.Logger

	// nodesChanged gets a token when a node is added, changes or goes
	// (NodesChanged); one pending token is enough.
	nodesChanged chan struct{}

	mu       sync.Mutex
	attempts map[executor.Ref]*attempt
	closed   bool
}

// attempt is what the executor remembers of an attempt it launched.
type attempt struct {
	started   bool // Started sent
	startedAt time.Time
	done      bool // Exited or Lost decided (sent once its log is written)
	seen      bool // its Job has been in the cache
	checking  bool // confirmLost is asking whether its Job is gone
	stopping  *executor.StopRequest
	log       *attemptLog

	// timeout and grace are the launch's; deadline, once the attempt has
	// started, stops it when its timeout has passed (see timedOut).
	timeout, grace time.Duration
	deadline       *time.Timer

	// unwarned says, for the attempt's log, why the warning its launch
	// asks for (Launch.Warn) will not come: only the in-job agent sends
	// it. Admission refuses such jobs; this is for one admitted before
	// its pool's executor lost the agent.
	unwarned string
}

var _ executor.Executor = (*Executor)(nil)

// byAttempt indexes Jobs and pods by the attempt they belong to.
const byAttempt = "attempt"

func attemptKey(ref executor.Ref) string { return ref.String() }

func indexAttempt(obj any) ([]string, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, nil
	}
	if ref, ok := refOf(m.GetLabels()); ok {
		return []string{attemptKey(ref)}, nil
	}
	return nil, nil
}

// New starts the executor's informers and returns once their caches
// hold the cluster's current state.
func New(ctx context.Context, cfg Config) (*Executor, error) {
	if cfg.REST == nil {
		return nil, errors.New("kubernetes executor: no API server configured (Config.REST)")
	}
	if cfg.Namespace == "" {
		return nil, errors.New("kubernetes executor: no namespace configured")
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	client, err := newClient(cfg.REST, cfg.Compress)
	if err != nil {
		return nil, fmt.Errorf("kubernetes executor: %w", err)
	}
	e := &Executor{
		Files:    cfg.Files,
		cfg:      cfg,
		client:   client,
		stop:     make(chan struct{}),
		log:      cfg.Log,
		attempts: map[executor.Ref]*attempt{},
	}
	e.events = executor.NewEventQueue(e.stop)
	e.nodesChanged = make(chan struct{}, 1)
	e.ctx, e.cancel = context.WithCancel(context.Background())
	go e.events.Run()
	managed := labels.SelectorFromSet(labels.Set{LabelManagedBy: managedBy}).String()
	byRef := cache.Indexers{byAttempt: indexAttempt}
	e.jobs = client.informer(client.jobs(), cfg.Namespace, managed, &batchv1.Job{}, &batchv1.JobList{}, byRef)
	e.pods = client.informer(client.pods(), cfg.Namespace, managed, &corev1.Pod{}, &corev1.PodList{}, byRef)
	e.nodes = client.informer(client.nodes(), "", labels.SelectorFromSet(cfg.NodeSelector).String(), &corev1.Node{}, &corev1.NodeList{}, cache.Indexers{})
	for _, inf := range []cache.SharedIndexInformer{e.jobs, e.pods} {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    e.changed,
			UpdateFunc: func(_, obj any) { e.changed(obj) },
			DeleteFunc: e.changed,
		}); err != nil {
			return nil, err
		}
	}
	nodeChanged := func(any) {
		select {
		case e.nodesChanged <- struct{}{}:
		default:
		}
	}
	if _, err := e.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    nodeChanged,
		UpdateFunc: func(old, obj any) { nodeChanged(obj) },
		DeleteFunc: nodeChanged,
	}); err != nil {
		return nil, err
	}
	for _, inf := range []cache.SharedIndexInformer{e.jobs, e.pods, e.nodes} {
		go inf.RunWithContext(e.ctx)
	}
	for _, inf := range []cache.SharedIndexInformer{e.jobs, e.pods, e.nodes} {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			close(e.stop)
			e.cancel()
			return nil, fmt.Errorf("kubernetes executor: the API server's Jobs, pods and nodes could not be listed: %w", context.Cause(ctx))
		}
	}
	return e, nil
}

// Close stops the informers. Attempts keep running in the cluster; a new
// executor adopts them when the server launches them again.
func (e *Executor) Close() error {
	e.mu.Lock()
	var logs []*attemptLog
	if !e.closed {
		e.closed = true
		close(e.stop)
		e.cancel()
		for _, a := range e.attempts {
			a.stopDeadline()
			logs = append(logs, a.log)
		}
	}
	e.mu.Unlock()
	// Nothing more is written to the attempts' logs once it returns: the
	// next executor follows their pods from where the logs end.
	for _, l := range logs {
		l.stop()
	}
	return nil
}

// Capabilities: multi-node gangs, containers, memory and CPU limits
// (enforced by the kubelet, OOM reported), GPUs of the configured kind;
// the warning before a timeout only with the in-job agent, which sends
// it (Kubernetes has no way to signal a container's processes).
func (e *Executor) Capabilities() executor.Capabilities {
	return executor.Capabilities{MultiNode: true, Containers: true, MemoryLimits: true, CPULimits: true,
		Warn: e.cfg.Agent.Image != "", GPUKinds: []string{"nvidia"}}
}

// Events delivers the attempts' observations.
func (e *Executor) Events() <-chan executor.Event { return e.events.Events() }

// Waiting says why the attempt's pods are not running yet, in words,
// when Kubernetes says (a pod it cannot place); "" otherwise.
func (e *Executor) Waiting(ref executor.Ref) string {
	job, pods := e.objects(ref)
	o := observe(job, pods)
	if o.started || o.ended {
		return ""
	}
	return o.waiting
}

// NodesChanged signals that a node was added, changed or removed, so that
// Inventory may differ: a cluster that autoscales grows and shrinks its
// pools. Node heartbeats signal too; compare inventories before acting.
func (e *Executor) NodesChanged() <-chan struct{} { return e.nodesChanged }

// Launch creates the attempt's objects; those that exist already are
// kept (the attempt is adopted), and its state is reported again.
func (e *Executor) Launch(ctx context.Context, l executor.Launch) error {
	if len(l.Argv) == 0 {
		return fmt.Errorf("launch %s: no entrypoint", l.Ref)
	}
	for _, d := range []string{l.Dir, filepath.Dir(l.LogPath)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("launch %s: %w", l.Ref, err)
		}
	}
	// An attempt whose outcome is recorded has ended (and may have been
	// released, its Job deleted): report it again, never run it again.
	if ev, started, ok, err := local.Outcome(l.Dir); err != nil {
		return fmt.Errorf("launch %s: %w", l.Ref, err)
	} else if ok {
		e.mu.Lock()
		if !started.IsZero() {
			e.emit(executor.Event{Ref: l.Ref, Kind: executor.Started, At: started, PID: 1})
		}
		ev.Ref = l.Ref
		e.emit(ev)
		e.mu.Unlock()
		return nil
	}
	// One pod per node placed: a placement over more nodes than the
	// request names is run on all of them.
	l.Resources.Nodes = max(l.Resources.Nodes, len(l.Placement.Nodes))
	o := build(e.cfg, l)
	a := &attempt{log: newAttemptLog(e.ctx, l, cmp.Or(e.cfg.FollowAfter, followAfter)), timeout: l.Timeout, grace: l.Grace}
	if l.Warn.Signal != "" && e.cfg.Agent.Image == "" {
		a.unwarned = fmt.Sprintf("no SIG%s will come %s before the timeout (policy.warn): this pool's Kubernetes executor runs jobs without the in-job agent, which sends it; set the executor's agent.image",
			strings.TrimPrefix(l.Warn.Signal, "SIG"), domain.FormatDuration(l.Warn.Before))
	}
	e.mu.Lock()
	old := e.attempts[l.Ref]
	e.attempts[l.Ref] = a
	e.mu.Unlock()
	if old != nil {
		old.log.stop() // a relaunch: follow its pods again, from where the log ends
	}

	ns := e.cfg.Namespace
	create := func(k kind, obj runtime.Object, name string) error {
		err := e.client.create(ctx, k, ns, obj)
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		e.forget(l.Ref)
		// Leave nothing behind of an attempt that never started.
		cleanup, cancel := context.WithTimeout(e.ctx, 30*time.Second)
		defer cancel()
		_ = e.Release(cleanup, l.Ref)
		return fmt.Errorf("launch %s: create %s %s/%s: %w", l.Ref, k.plural, ns, name, err)
	}
	if o.secret != nil {
		if err := create(e.client.secrets(), o.secret, o.secret.Name); err != nil {
			return err
		}
	}
	if o.service != nil {
		if err := create(e.client.services(), o.service, o.service.Name); err != nil {
			return err
		}
	}
	if err := create(e.client.jobs(), o.job, o.job.Name); err != nil {
		return err
	}
	e.reconcile(l.Ref)
	return nil
}

// forget drops what the executor remembers of an attempt, stopping its
// log followers.
func (e *Executor) forget(ref executor.Ref) {
	e.mu.Lock()
	a := e.attempts[ref]
	delete(e.attempts, ref)
	if a != nil {
		a.stopDeadline()
	}
	e.mu.Unlock()
	if a != nil {
		a.log.cancel()
	}
}

// Logs reads the attempt's log (Config.Files), as Following says when
// it follows the log.
func (e *Executor) Logs(ctx context.Context, ref executor.Ref, q executor.LogQuery, w io.Writer) error {
	if q.Follow {
		e.Following(ref)
	}
	return e.Files.Logs(ctx, ref, q, w)
}

// Following has the attempt's running pods' logs followed at once, not
// after FollowAfter, and those of its pods that start later as they
// start: someone follows the attempt's log and watches its lines arrive.
func (e *Executor) Following(ref executor.Ref) {
	e.mu.Lock()
	a := e.attempts[ref]
	e.mu.Unlock()
	if a != nil {
		a.log.goLive()
	}
}

// Stop deletes the attempt's Job and its pods, giving them grace to
// stop: the kubelet sends SIGTERM, then SIGKILL once it has passed. The
// Exited event follows once the pods are gone.
func (e *Executor) Stop(ctx context.Context, ref executor.Ref, req executor.StopRequest) error {
	if req.Reason == "" {
		req.Reason = domain.ReasonCanceledByUser
	}
	e.mu.Lock()
	a := e.attempts[ref]
	if a != nil && a.stopping == nil && !a.done {
		a.stopping = &req
	}
	e.mu.Unlock()
	if a != nil {
		a.log.followNow(true) // before the pods go
	}
	if err := e.deleteJob(ctx, ref, req.Grace); err != nil {
		return fmt.Errorf("stop %s: %w", ref, err)
	}
	if req.Grace > 0 {
		// The garbage collector deletes the Job's pods with their own
		// grace period (the launch's); the stop's is given to them here.
		if err := e.deletePods(ctx, ref, req.Grace); err != nil {
			return fmt.Errorf("stop %s: %w", ref, err)
		}
	}
	e.reconcile(ref)
	return nil
}

// deletePods deletes the attempt's pods with grace.
func (e *Executor) deletePods(ctx context.Context, ref executor.Ref, grace time.Duration) error {
	s := seconds(grace)
	sel := labels.SelectorFromSet(labels.Set{LabelManagedBy: managedBy,
		LabelJob: strconv.FormatInt(ref.JobID, 10), LabelAttempt: strconv.Itoa(ref.Attempt)}).String()
	err := e.client.core.Delete().Namespace(e.cfg.Namespace).Resource("pods").
		VersionedParams(&metav1.ListOptions{LabelSelector: sel}, e.client.params).
		Body(&metav1.DeleteOptions{GracePeriodSeconds: &s}).Do(ctx).Error()
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete the pods of %s: %w", ref, err)
	}
	return nil
}

// deleteJob deletes the attempt's Job in the foreground (its pods first),
// with grace (zero: each pod's own grace period).
func (e *Executor) deleteJob(ctx context.Context, ref executor.Ref, grace time.Duration) error {
	fg := metav1.DeletePropagationForeground
	opts := metav1.DeleteOptions{PropagationPolicy: &fg}
	if grace > 0 {
		s := seconds(grace)
		opts.GracePeriodSeconds = &s
	}
	err := e.client.delete(ctx, e.client.jobs(), e.cfg.Namespace, objectName(ref), opts)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// Release deletes what is left of an ended attempt: its Job and pods, its
// Secret and Service.
func (e *Executor) Release(ctx context.Context, ref executor.Ref) error {
	e.mu.Lock()
	a := e.attempts[ref]
	e.mu.Unlock()
	if a != nil && !a.done {
		return fmt.Errorf("release %s: it has not ended; stop it first: %w", ref, domain.ErrConflict)
	}
	ns, name := e.cfg.Namespace, objectName(ref)
	if err := e.deleteJob(ctx, ref, 0); err != nil {
		return fmt.Errorf("release %s: delete Job %s/%s: %w", ref, ns, name, err)
	}
	if err := e.client.delete(ctx, e.client.secrets(), ns, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("release %s: delete Secret %s/%s: %w", ref, ns, name, err)
	}
	if err := e.client.delete(ctx, e.client.services(), ns, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("release %s: delete Service %s/%s: %w", ref, ns, name, err)
	}
	e.forget(ref)
	return nil
}

// Strays lists the attempts whose Jobs are in the namespace but that this
// executor neither launched nor reattached to, created more than minAge
// ago: Jobs of attempts that ended while no server watched, or that a
// server crashed before releasing. The caller releases those its store
// no longer counts as active (Release deletes them).
func (e *Executor) Strays(minAge time.Duration) []executor.Ref {
	cutoff := time.Now().Add(-minAge)
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []executor.Ref
	for _, obj := range e.jobs.GetStore().List() {
		j, ok := obj.(*batchv1.Job)
		if !ok || j.DeletionTimestamp != nil || j.CreationTimestamp.Time.After(cutoff) {
			continue
		}
		if ref, ok := refOf(j.Labels); ok && e.attempts[ref] == nil {
			out = append(out, ref)
		}
	}
	slices.SortFunc(out, func(a, b executor.Ref) int {
		return cmp.Or(cmp.Compare(a.JobID, b.JobID), cmp.Compare(a.Attempt, b.Attempt))
	})
	return out
}

// Inventory lists the nodes the pool's node selector picks, with what
// they can allocate; nodes that are not Ready, are cordoned, or carry a
// taint the executor's tolerations do not tolerate (its pods could not
// go there) are left out.
func (e *Executor) Inventory(ctx context.Context) (executor.Inventory, error) {
	var inv executor.Inventory
	for _, obj := range e.nodes.GetStore().List() {
		n, ok := obj.(*corev1.Node)
		if !ok || n.Spec.Unschedulable || !ready(n) || !tolerated(n.Spec.Taints, e.cfg.Tolerations) {
			continue
		}
		alloc := n.Status.Allocatable
		node := executor.Node{Name: n.Name, CPUs: float64(alloc.Cpu().MilliValue()) / 1000,
			Memory: domain.ByteSize(alloc.Memory().Value())}
		if q, ok := alloc[corev1.ResourceName(e.cfg.gpuResource())]; ok {
			for i := range int(q.Value()) {
				node.GPUs = append(node.GPUs, i)
			}
		}
		inv.Nodes = append(inv.Nodes, node)
	}
	slices.SortFunc(inv.Nodes, func(a, b executor.Node) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return inv, nil
}

// objects returns the attempt's Job (nil: none) and pods from the caches.
func (e *Executor) objects(ref executor.Ref) (job *batchv1.Job, pods []*corev1.Pod) {
	objs, _ := e.jobs.GetIndexer().ByIndex(byAttempt, attemptKey(ref))
	for _, obj := range objs {
		if j, ok := obj.(*batchv1.Job); ok {
			job = j
		}
	}
	objs, _ = e.pods.GetIndexer().ByIndex(byAttempt, attemptKey(ref))
	for _, obj := range objs {
		if p, ok := obj.(*corev1.Pod); ok {
			pods = append(pods, p)
		}
	}
	return job, pods
}

// tolerated says whether pods with tolerations can be placed on a node
// with taints: every NoSchedule and NoExecute taint is tolerated.
func tolerated(taints []corev1.Taint, tolerations []corev1.Toleration) bool {
	for _, t := range taints {
		if t.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		if !slices.ContainsFunc(tolerations, func(tol corev1.Toleration) bool { return tolerates(tol, t) }) {
			return false
		}
	}
	return true
}

// tolerates is Kubernetes' rule for one toleration and one taint.
func tolerates(tol corev1.Toleration, t corev1.Taint) bool {
	if tol.Effect != "" && tol.Effect != t.Effect {
		return false
	}
	if tol.Key != "" && tol.Key != t.Key {
		return false
	}
	switch tol.Operator {
	case corev1.TolerationOpExists:
		return true
	case "", corev1.TolerationOpEqual:
		return tol.Key != "" && tol.Value == t.Value
	}
	return false
}

func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// changed is the informers' handler: an object of an attempt changed.
func (e *Executor) changed(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	if ref, ok := refOf(m.GetLabels()); ok {
		e.reconcile(ref)
	}
}

// reconcile compares what the caches say of an attempt with what has been
// reported, and reports the difference: Started once a container runs,
// Exited once the Job has ended, or its pods are gone after a stop, or
// its image cannot be pulled (the Job is then deleted).
func (e *Executor) reconcile(ref executor.Ref) {
	job, pods := e.objects(ref)
	o := observe(job, pods)

	var deleteForPull bool
	e.mu.Lock()
	defer e.mu.Unlock()
	a := e.attempts[ref]
	if a == nil || a.done {
		return
	}
	a.seen = a.seen || job != nil
	if o.started && !a.started {
		a.started = true
		a.startedAt = o.at
		if a.startedAt.IsZero() {
			a.startedAt = time.Now()
		}
		// A container's main process is PID 1 in its own namespace.
		e.emit(executor.Event{Ref: ref, Kind: executor.Started, At: a.startedAt, PID: 1})
		if a.log.last.IsZero() {
			// A new log starts with where the attempt runs; the status's
			// start time (whole seconds) is never after its first line.
			a.log.system(a.startedAt, "started "+startedWhere(pods))
			if a.unwarned != "" {
				a.log.system(a.startedAt, a.unwarned)
			}
		}
		if a.timeout > 0 {
			// The timeout counts from the start, as on the other
			// executors, not from the Job's creation: placing the pods
			// and pulling the image are not the attempt's run time. A
			// start time in whole seconds counts from the end of its
			// second (or now, if sooner): never too early.
			left := time.Until(endTime(a.startedAt, time.Now()).Add(a.timeout))
			a.deadline = time.AfterFunc(max(left, 0), func() { e.timedOut(ref, a) })
		}
	}
	for _, p := range pods {
		a.log.follow(e.client, p)
	}
	// The Job controller still judges a Job being deleted: pods that end on
	// the stop's SIGTERM make it Complete (exit code 0) or Failed. An
	// outcome from after the stop is the stop's: canceled.
	byStop := a.stopping != nil && o.ended && job != nil && job.DeletionTimestamp != nil &&
		!o.exit.At.Before(job.DeletionTimestamp.Time)
	var exit *executor.Event
	switch {
	case o.ended && !byStop:
		exit = &o.exit
	case a.stopping != nil && (job == nil || job.DeletionTimestamp != nil) && len(pods) == 0:
		exit = &executor.Event{State: domain.AttemptCanceled, Reason: a.stopping.Reason, Message: stopMessage(*a.stopping)}
		if a.stopping.Reason == domain.ReasonTimeout {
			exit.State = domain.AttemptTimedOut
		}
	case o.pullFail:
		exit = &o.exit
		deleteForPull = true
	case a.seen && job == nil && a.stopping == nil && !a.checking:
		// Its Job is gone from the cache without an outcome. Ask the API
		// server before calling it lost: a cache can miss an object
		// for a moment while its watch is re-established.
		a.checking = true
		go e.confirmLost(ref, a)
	}
	if exit != nil {
		ev := *exit
		ev.Ref, ev.Kind = ref, executor.Exited
		ev.At = endTime(ev.At, time.Now())
		a.done = true
		a.stopDeadline()
		go e.finish(a, ev)
	}
	if deleteForPull {
		go func() {
			if err := e.deleteJob(e.ctx, ref, time.Second); err != nil {
				e.log.Warn("delete the Job of an attempt whose image cannot be pulled", "attempt", ref.String(), "err", err)
			}
		}()
	}
}

// timedOut stops attempt a, its timeout having passed since it started,
// as a stop does (SIGTERM, SIGKILL after the launch's grace), and ends it
// timed out. The Job's own deadline (see build) is the backstop should
// no executor be running then.
func (e *Executor) timedOut(ref executor.Ref, a *attempt) {
	e.mu.Lock()
	// After Close the attempt is the next executor's to time.
	current := !e.closed && e.attempts[ref] == a && !a.done && a.stopping == nil
	e.mu.Unlock()
	if !current {
		return
	}
	grace := cmp.Or(a.grace, defaultGrace)
	given := time.Duration(seconds(grace)) * time.Second // what the kubelet gets
	req := executor.StopRequest{Reason: domain.ReasonTimeout, Grace: grace,
		Message: "exceeded its timeout of " + domain.FormatDuration(a.timeout) + "; its pods were deleted with a grace period of " + domain.FormatDuration(given)}
	if err := e.Stop(e.ctx, ref, req); err != nil && e.ctx.Err() == nil {
		e.log.Warn("stop an attempt past its timeout", "attempt", ref.String(), "err", err)
	}
}

// stopDeadline drops the timeout's timer; e.mu is held.
func (a *attempt) stopDeadline() {
	if a.deadline != nil {
		a.deadline.Stop()
	}
}

// confirmLost reports the attempt lost if the API server says its Job
// is gone (someone deleted it outside Trainyard), else looks again.
func (e *Executor) confirmLost(ref executor.Ref, a *attempt) {
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	there, err := e.client.exists(ctx, e.client.jobs(), e.cfg.Namespace, objectName(ref))
	e.mu.Lock()
	a.checking = false
	lost := err == nil && !there && !a.done && a.stopping == nil && e.attempts[ref] == a
	if lost {
		a.done = true
		a.stopDeadline()
	}
	e.mu.Unlock()
	if lost {
		e.finish(a, executor.Event{Ref: ref, Kind: executor.Lost, At: time.Now(),
			Message: "its Kubernetes Job " + e.cfg.Namespace + "/" + objectName(ref) + " was deleted outside Trainyard"})
		return
	}
	if err != nil {
		e.log.Warn("cannot tell whether an attempt's Job is gone", "attempt", ref.String(), "err", err)
	}
	// Look again once the cache has had time to catch up.
	select {
	case <-e.ctx.Done():
		return
	case <-time.After(time.Second):
	}
	e.reconcile(ref)
}

// finish ends an attempt's log (its followers have read their pods' logs
// to the end, or logGrace has passed), records its outcome beside it, and
// reports ev: a reader of the log sees every line before the end.
func (e *Executor) finish(a *attempt, ev executor.Event) {
	a.log.finish(ev)
	if ev.Kind == executor.Exited {
		if err := local.RecordOutcome(a.log.dir, ev, a.startedAt); err != nil {
			e.log.Warn("record the outcome of an attempt", "attempt", ev.Ref.String(), "err", err)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.emit(ev)
}

// emit queues ev for delivery; e.mu is held, so that events go out in
// the order the attempts' state changed.
func (e *Executor) emit(ev executor.Event) { e.events.Push(ev) }

// endTime is when an attempt ended, from at, the time a Job's condition
// gives (whole seconds; zero: none), seen at now: the end of that
// second, or now if sooner, so that it is not before the last line of
// its log, which the kubelet timed to the nanosecond.
func endTime(at, now time.Time) time.Time {
	if at.IsZero() {
		return now
	}
	if at.Nanosecond() == 0 {
		if end := at.Add(time.Second - time.Nanosecond); end.Before(now) {
			return end
		}
		return now
	}
	return at
}

// startedWhere names the pods of an attempt and their nodes.
func startedWhere(pods []*corev1.Pod) string {
	var on []string
	for _, p := range pods {
		if containerStarted(p) {
			on = append(on, "pod "+p.Name+" on node "+p.Spec.NodeName)
		}
	}
	slices.Sort(on)
	if len(on) == 0 {
		return "in Kubernetes"
	}
	return "as " + strings.Join(on, ", ")
}

func stopMessage(r executor.StopRequest) string {
	if r.Message != "" {
		return r.Message
	}
	return "stopped (" + string(r.Reason) + ")"
}
