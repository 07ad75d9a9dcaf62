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
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
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
	Log   *slog.Logger
}

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
	events chan executor.Event
	stop   chan struct{}
	ctx    context.Context // ends with stop: the log followers'
	cancel context.CancelFunc
	log    *slog.Logger

	mu       sync.Mutex
	attempts map[executor.Ref]*attempt
	pending  []executor.Event // to deliver, in order (pump)
	wake     chan struct{}    // pending has grown
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
	client, err := newClient(cfg.REST)
	if err != nil {
		return nil, fmt.Errorf("kubernetes executor: %w", err)
	}
	e := &Executor{
		Files:    cfg.Files,
		cfg:      cfg,
		client:   client,
		events:   make(chan executor.Event, 1024),
		stop:     make(chan struct{}),
		log:      cfg.Log,
		attempts: map[executor.Ref]*attempt{},
		wake:     make(chan struct{}, 1),
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	go e.pump()
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
	defer e.mu.Unlock()
	if !e.closed {
		e.closed = true
		close(e.stop)
		e.cancel()
	}
	return nil
}

// Capabilities: multi-node gangs, containers, memory and CPU limits
// (enforced by the kubelet, OOM reported), GPUs of the configured kind.
func (e *Executor) Capabilities() executor.Capabilities {
	return executor.Capabilities{MultiNode: true, Containers: true, MemoryLimits: true, CPULimits: true,
		GPUKinds: []string{"nvidia"}}
}

// Events delivers the attempts' observations.
func (e *Executor) Events() <-chan executor.Event { return e.events }

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
	o := build(e.cfg, l)
	a := &attempt{log: newAttemptLog(e.ctx, l)}
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
	e.mu.Unlock()
	if a != nil {
		a.log.cancel()
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
	if err := e.deleteJob(ctx, ref, req.Grace); err != nil {
		return fmt.Errorf("stop %s: %w", ref, err)
	}
	e.reconcile(ref)
	return nil
}

// deleteJob deletes the attempt's Job in the foreground (its pods first),
// with grace (zero: each pod's own grace period).
func (e *Executor) deleteJob(ctx context.Context, ref executor.Ref, grace time.Duration) error {
	fg := metav1.DeletePropagationForeground
	opts := metav1.DeleteOptions{PropagationPolicy: &fg}
	if grace > 0 {
		s := int64(math.Ceil(grace.Seconds()))
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

// Inventory lists the nodes the pool's node selector picks, with what
// they can allocate; nodes that are not Ready or are cordoned are left
// out.
func (e *Executor) Inventory(ctx context.Context) (executor.Inventory, error) {
	var inv executor.Inventory
	for _, obj := range e.nodes.GetStore().List() {
		n, ok := obj.(*corev1.Node)
		if !ok || n.Spec.Unschedulable || !ready(n) {
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
	var job *batchv1.Job
	objs, _ := e.jobs.GetIndexer().ByIndex(byAttempt, attemptKey(ref))
	for _, obj := range objs {
		if j, ok := obj.(*batchv1.Job); ok {
			job = j
		}
	}
	var pods []*corev1.Pod
	objs, _ = e.pods.GetIndexer().ByIndex(byAttempt, attemptKey(ref))
	for _, obj := range objs {
		if p, ok := obj.(*corev1.Pod); ok {
			pods = append(pods, p)
		}
	}
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
	}
	for _, p := range pods {
		a.log.follow(e.client, p)
	}
	var exit *executor.Event
	switch {
	case o.ended:
		exit = &o.exit
	case a.stopping != nil && (job == nil || job.DeletionTimestamp != nil) && len(pods) == 0:
		exit = &executor.Event{State: domain.AttemptCanceled, Reason: a.stopping.Reason, Message: stopMessage(*a.stopping)}
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
		if ev.At.IsZero() {
			ev.At = time.Now()
		}
		a.done = true
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

// emit queues ev for delivery; e.mu is held. Events go out in the order
// they were queued, and queuing never blocks on a slow reader.
func (e *Executor) emit(ev executor.Event) {
	e.pending = append(e.pending, ev)
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// pump delivers queued events until the executor is closed.
func (e *Executor) pump() {
	for {
		select {
		case <-e.stop:
			return
		case <-e.wake:
		}
		e.mu.Lock()
		batch := e.pending
		e.pending = nil
		e.mu.Unlock()
		for _, ev := range batch {
			select {
			case e.events <- ev:
			case <-e.stop:
				return
			}
		}
	}
}

func stopMessage(r executor.StopRequest) string {
	if r.Message != "" {
		return r.Message
	}
	return "stopped (" + string(r.Reason) + ")"
}
