package kubetest

// A process kubelet: a test node whose pods are local processes. kwok
// plays nodes and pods that run nothing; a ProcessNode runs its pods'
// main containers' commands on this machine, as a kubelet would in a
// container, so that a test proves what the executor's pods do (their
// command, environment, exit codes, logs, signals) without a container
// runtime. It keeps the kubelet's contract with the control plane:
//
//   - the Node is Ready, with its allocatable resources, the address
//     127.0.0.1 and the port of its kubelet API in daemonEndpoints, and
//     without kwok's annotation (kwok manages only nodes with
//     kwok.x-k8s.io/node=fake, see Start), so kwok leaves it and its
//     pods alone;
//   - a pod bound to it (spec.nodeName) has its first container's
//     command and args run with the container's environment (value,
//     $(VAR) expansion, secretKeyRef, fieldRef) in its workingDir; its
//     status goes Running (state.running), then the container's
//     terminated state (exit code, reason Completed, Error or StartError,
//     OOMKilled when its environment sets TRAINYARD_KWOK_REASON=OOMKilled,
//     the log's tail as message under FallbackToLogsOnError) and phase
//     Succeeded or Failed;
//   - a pod being deleted gets SIGTERM to its process group, SIGKILL once
//     its grace period has passed, its terminated state recorded, then is
//     deleted with grace 0;
//   - its kubelet API (HTTPS) serves GET /containerLogs/{ns}/{pod}/{c}
//     with follow, timestamps, sinceTime, tailLines and limitBytes, which
//     the API server proxies pods/log to.
//
// A process killed by signal N exits with code 128+N, as a container
// runtime reports it.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// EnvReason, in a container's environment, is the reason its terminated
// state gives (OOMKilled: the test's stand-in for a memory limit), as in
// kwok's stages.
const EnvReason = "TRAINYARD_KWOK_REASON"

// EnvStartMS, in a container's environment, delays its start by that
// many milliseconds: the test's stand-in for pulling a large image. A
// deletion meanwhile ends the pod unstarted.
const EnvStartMS = "TRAINYARD_KWOK_START_MS"

// ProcessNode is a node whose pods run as local processes.
type ProcessNode struct {
	Name string
	// Dir holds each container's log (pods/<ns>_<pod>_<uid>/<c>.log, in
	// the CRI log format).
	Dir string

	cs     kubernetes.Interface
	ctx    context.Context
	cancel context.CancelFunc
	srv    *http.Server
	wg     sync.WaitGroup

	mu   sync.Mutex
	pods map[types.UID]*procPod
	byNS map[string]*procPod // ns/name → the newest pod of that name
}

// procPod is one pod's life on the node.
type procPod struct {
	uid       types.UID
	ns, name  string
	container string
	logPath   string
	log       *criLogFile
	deleting  chan struct{} // closed when its deletion is seen
	delOnce   sync.Once
	grace     time.Duration // set before deleting is closed
	done      chan struct{} // closed once its process has ended (or never started)
	started   bool
}

// ProcessNode registers a Ready node n (n.Pods, n.Labels, n.Taints, its
// CPUs, memory and GPUs as for AddNode) whose pods run as local
// processes, and starts its kubelet; t's cleanup kills what still runs
// and deletes the node.
func (c *Cluster) ProcessNode(t testing.TB, n Node) *ProcessNode {
	t.Helper()
	cs := c.Client(t)
	dir := filepath.Join(c.Dir, "nodes", n.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &ProcessNode{Name: n.Name, Dir: dir, cs: cs, ctx: ctx, cancel: cancel,
		pods: map[types.UID]*procPod{}, byNS: map[string]*procPod{}}

	// The kubelet API first: the node names its port.
	cert, err := selfSigned()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /containerLogs/{ns}/{pod}/{container}", p.containerLogs)
	p.srv = &http.Server{Handler: mux, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}},
		BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() { _ = p.srv.ServeTLS(ln, "", "") }()
	port := ln.Addr().(*net.TCPAddr).Port

	res, labels := n.allocatable(), n.labels("process")
	node, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: labels},
		Spec:       corev1.NodeSpec{Taints: n.Taints},
	}, metav1.CreateOptions{})
	if err != nil {
		cancel()
		t.Fatalf("create node %s: %v", n.Name, err)
	}
	now := metav1.Now()
	node.Status = corev1.NodeStatus{
		Allocatable: res, Capacity: res, Phase: corev1.NodeRunning,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "KubeletReady", Message: "the process kubelet is posting ready status",
			LastHeartbeatTime: now, LastTransitionTime: now}},
		// No Hostname address: the API server prefers it to reach a
		// kubelet, and nothing resolves the node's name here.
		Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(port)}},
		NodeInfo: corev1.NodeSystemInfo{Architecture: "amd64", OperatingSystem: "linux",
			KubeletVersion: "process", ContainerRuntimeVersion: "process://1"},
	}
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		cancel()
		t.Fatalf("node %s status: %v", n.Name, err)
	}

	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "pods", "",
		fields.OneTermEqualSelector("spec.nodeName", n.Name))
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.sync(obj) },
		UpdateFunc: func(_, obj any) { p.sync(obj) },
		DeleteFunc: func(obj any) { p.gone(obj) },
	}); err != nil {
		cancel()
		t.Fatal(err)
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		inf.RunWithContext(ctx)
	}()
	t.Cleanup(func() {
		p.close()
		_ = cs.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{})
	})
	return p
}

// close kills every process still running and stops the kubelet.
func (p *ProcessNode) close() {
	p.mu.Lock()
	var all []*procPod
	for _, pp := range p.pods {
		all = append(all, pp)
	}
	p.mu.Unlock()
	for _, pp := range all {
		pp.delete(0)
	}
	p.cancel()
	_ = p.srv.Close()
	for _, pp := range all {
		<-pp.done
	}
	p.wg.Wait()
}

// sync acts on a pod bound to the node: starts it once, and stops it
// when it is being deleted.
func (p *ProcessNode) sync(obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || p.ctx.Err() != nil {
		return
	}
	p.mu.Lock()
	pp := p.pods[pod.UID]
	if pp == nil {
		if pod.DeletionTimestamp != nil || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			p.mu.Unlock()
			if pod.DeletionTimestamp != nil && (pod.DeletionGracePeriodSeconds == nil || *pod.DeletionGracePeriodSeconds != 0) {
				p.forceDelete(pod) // nothing of it runs here
			}
			return
		}
		pp = &procPod{uid: pod.UID, ns: pod.Namespace, name: pod.Name, deleting: make(chan struct{}), done: make(chan struct{})}
		p.pods[pod.UID] = pp
		p.byNS[pod.Namespace+"/"+pod.Name] = pp
		p.mu.Unlock()
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.run(pod.DeepCopy(), pp)
		}()
	} else {
		p.mu.Unlock()
	}
	if pod.DeletionTimestamp != nil {
		grace := time.Duration(0)
		if s := pod.DeletionGracePeriodSeconds; s != nil {
			grace = time.Duration(*s) * time.Second
		} else if s := pod.Spec.TerminationGracePeriodSeconds; s != nil {
			grace = time.Duration(*s) * time.Second
		}
		pp.delete(grace)
	}
}

// delete tells the pod's runner to stop it, giving it grace.
func (pp *procPod) delete(grace time.Duration) {
	pp.delOnce.Do(func() {
		pp.grace = grace
		close(pp.deleting)
	})
}

// gone: the pod has left the API server; nothing of it may run on.
func (p *ProcessNode) gone(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	p.mu.Lock()
	pp := p.pods[pod.UID]
	p.mu.Unlock()
	if pp != nil {
		pp.delete(0)
	}
}

// run is one pod's life: start its main container's process, report it
// running, wait for it to end or for the pod's deletion, report the
// terminated state and, once deleted, delete the pod for good.
func (p *ProcessNode) run(pod *corev1.Pod, pp *procPod) {
	defer close(pp.done)
	if len(pod.Spec.Containers) == 0 {
		return
	}
	c := pod.Spec.Containers[0]
	pp.container = c.Name
	podDir := filepath.Join(p.Dir, "pods", pod.Namespace+"_"+pod.Name+"_"+string(pod.UID))
	pp.logPath = filepath.Join(podDir, c.Name+".log")

	var cmd *exec.Cmd
	var startErr error
	env, err := p.environment(pod, c)
	if err != nil {
		startErr = fmt.Errorf("CreateContainerConfigError: %w", err)
	}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, EnvStartMS+"="); ok {
			ms, _ := strconv.Atoi(v)
			select {
			case <-time.After(time.Duration(ms) * time.Millisecond):
			case <-pp.deleting:
				p.forceDelete(pod)
				return
			case <-p.ctx.Done():
				return
			}
		}
	}
	started := metav1.Now()
	if startErr == nil {
		if err := os.MkdirAll(podDir, 0o755); err != nil {
			startErr = err
		}
	}
	if startErr == nil {
		pp.log, startErr = createCRILog(pp.logPath)
	}
	if startErr == nil {
		cmd, startErr = p.start(c, env, pp.log)
	}
	if startErr != nil {
		if pp.log != nil {
			pp.log.close()
		}
		p.terminated(pod, c, corev1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError",
			Message: startErr.Error(), StartedAt: started, FinishedAt: metav1.Now()})
		<-pp.deleting
		p.forceDelete(pod)
		return
	}
	p.mu.Lock()
	pp.started = true
	p.mu.Unlock()
	exited := make(chan *os.ProcessState, 1)
	go func() {
		_ = cmd.Wait()
		exited <- cmd.ProcessState
	}()
	p.running(pod, c, started, cmd.Process.Pid)

	var ps *os.ProcessState
	select {
	case ps = <-exited:
	case <-pp.deleting:
		pgid := cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case ps = <-exited:
		case <-time.After(pp.grace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			ps = <-exited
		}
	}
	// Whatever it left in its group goes with it, as with its container.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	pp.log.close()

	code := ps.ExitCode()
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	reason := "Completed"
	if code != 0 {
		reason = "Error"
	}
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, EnvReason+"="); ok && v != "" {
			reason = v
		}
	}
	term := corev1.ContainerStateTerminated{ExitCode: int32(code), Reason: reason, StartedAt: started,
		FinishedAt: metav1.Now(), ContainerID: "process://" + strconv.Itoa(cmd.Process.Pid)}
	if code != 0 && c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError {
		term.Message = logTail(pp.logPath, 80, 2048)
	}
	p.terminated(pod, c, term)
	<-pp.deleting
	p.forceDelete(pod)
}

// environment resolves container c's environment as the kubelet does:
// in order, each value with $(VAR) references to those before it
// expanded, secretKeyRef from the pod's namespace, fieldRef from the pod.
// A container runtime adds HOSTNAME (the pod's name) and, unless set,
// PATH.
func (p *ProcessNode) environment(pod *corev1.Pod, c corev1.Container) ([]string, error) {
	vals := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	lookup := func(k string) (string, bool) { v, ok := vals[k]; return v, ok }
	secrets := map[string]*corev1.Secret{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			set(e.Name, expand(e.Value, lookup))
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, ok := secrets[ref.Name]
			if !ok {
				var err error
				s, err = p.cs.CoreV1().Secrets(pod.Namespace).Get(p.ctx, ref.Name, metav1.GetOptions{})
				if err != nil {
					if ref.Optional != nil && *ref.Optional && apierrors.IsNotFound(err) {
						continue
					}
					return nil, fmt.Errorf("secret %q: %w", ref.Name, err)
				}
				secrets[ref.Name] = s
			}
			v, ok := s.Data[ref.Key]
			if !ok {
				if ref.Optional != nil && *ref.Optional {
					continue
				}
				return nil, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, pod.Namespace, ref.Name)
			}
			set(e.Name, string(v))
		case e.ValueFrom.FieldRef != nil:
			v, err := fieldValue(pod, e.ValueFrom.FieldRef.FieldPath)
			if err != nil {
				return nil, err
			}
			set(e.Name, v)
		default:
			return nil, fmt.Errorf("variable %s: the process kubelet resolves value, secretKeyRef and fieldRef only", e.Name)
		}
	}
	if _, ok := vals["HOSTNAME"]; !ok {
		set("HOSTNAME", pod.Name)
	}
	if _, ok := vals["PATH"]; !ok {
		set("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+vals[k])
	}
	return env, nil
}

// fieldValue is the downward API's value of path for pod.
func fieldValue(pod *corev1.Pod, path string) (string, error) {
	if rest, ok := strings.CutPrefix(path, "metadata.annotations["); ok {
		return pod.Annotations[strings.Trim(strings.TrimSuffix(rest, "]"), `'"`)], nil
	}
	if rest, ok := strings.CutPrefix(path, "metadata.labels["); ok {
		return pod.Labels[strings.Trim(strings.TrimSuffix(rest, "]"), `'"`)], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.podIP":
		return "127.0.0.1", nil
	}
	return "", fmt.Errorf("field path %q: not supported by the process kubelet", path)
}

// expand replaces $(VAR) in s as the kubelet does: a defined VAR by its
// value, $$ by $, anything else left as it is.
func expand(s string, lookup func(string) (string, bool)) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// start starts c's command and args (expanded with env) in its own
// process group, in its workingDir (created if missing, as a runtime
// does), its stdout and stderr into log.
func (p *ProcessNode) start(c corev1.Container, env []string, log *criLogFile) (*exec.Cmd, error) {
	vals := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vals[k] = v
	}
	lookup := func(k string) (string, bool) { v, ok := vals[k]; return v, ok }
	var argv []string
	for _, a := range append(append([]string(nil), c.Command...), c.Args...) {
		argv = append(argv, expand(a, lookup))
	}
	if len(argv) == 0 {
		return nil, errors.New("the container has no command: the process kubelet has no image entrypoint to run")
	}
	path := argv[0]
	if !strings.Contains(path, "/") {
		// Looked up in the container's PATH, as a runtime does.
		found := ""
		for _, d := range filepath.SplitList(vals["PATH"]) {
			if st, err := os.Stat(filepath.Join(d, path)); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
				found = filepath.Join(d, path)
				break
			}
		}
		if found == "" {
			return nil, fmt.Errorf("exec: %q: executable file not found in $PATH", path)
		}
		path = found
	}
	cmd := &exec.Cmd{Path: path, Args: argv, Env: env, Dir: c.WorkingDir,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}}
	if cmd.Dir == "" {
		cmd.Dir = "/"
	} else if err := os.MkdirAll(cmd.Dir, 0o755); err != nil {
		return nil, err
	}
	// Pipes of its own, not StdoutPipe's, which Wait closes before what
	// the process wrote last is read.
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, err
	}
	log.copy("stdout", outR)
	log.copy("stderr", errR)
	return cmd, nil
}

// running reports pod's main container running, started at started.
func (p *ProcessNode) running(pod *corev1.Pod, c corev1.Container, started metav1.Time, pid int) {
	p.updateStatus(pod, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		s.HostIP, s.PodIP = "127.0.0.1", "127.0.0.1"
		s.HostIPs, s.PodIPs = []corev1.HostIP{{IP: "127.0.0.1"}}, []corev1.PodIP{{IP: "127.0.0.1"}}
		if s.StartTime == nil {
			s.StartTime = &started
		}
		yes := true
		s.Conditions = conditions(started, corev1.ConditionTrue)
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image, ImageID: c.Image,
			ContainerID: "process://" + strconv.Itoa(pid), Ready: true, Started: &yes,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}}}
	})
}

// terminated reports pod's main container ended as t, the pod's phase
// following from its exit code (restartPolicy Never).
func (p *ProcessNode) terminated(pod *corev1.Pod, c corev1.Container, t corev1.ContainerStateTerminated) {
	p.updateStatus(pod, func(s *corev1.PodStatus) {
		s.Phase = corev1.PodSucceeded
		if t.ExitCode != 0 {
			s.Phase = corev1.PodFailed
		}
		s.HostIP, s.PodIP = "127.0.0.1", "127.0.0.1"
		s.HostIPs, s.PodIPs = []corev1.HostIP{{IP: "127.0.0.1"}}, []corev1.PodIP{{IP: "127.0.0.1"}}
		if s.StartTime == nil {
			s.StartTime = &t.StartedAt
		}
		no := false
		s.Conditions = conditions(t.FinishedAt, corev1.ConditionFalse)
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: c.Name, Image: c.Image, ImageID: c.Image,
			ContainerID: t.ContainerID, Ready: false, Started: &no,
			State: corev1.ContainerState{Terminated: &t}}}
	})
}

func conditions(at metav1.Time, ready corev1.ConditionStatus) []corev1.PodCondition {
	return []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: at},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: at},
		{Type: corev1.ContainersReady, Status: ready, LastTransitionTime: at},
		{Type: corev1.PodReady, Status: ready, LastTransitionTime: at},
	}
}

// updateStatus writes pod's status through the status subresource,
// reading it again on a conflict; a pod already gone is left.
func (p *ProcessNode) updateStatus(pod *corev1.Pod, mod func(*corev1.PodStatus)) {
	pods := p.cs.CoreV1().Pods(pod.Namespace)
	for attempt := 0; p.ctx.Err() == nil; attempt++ {
		cur, err := pods.Get(p.ctx, pod.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && cur.UID != pod.UID) {
			return
		}
		if err == nil {
			mod(&cur.Status)
			_, err = pods.UpdateStatus(p.ctx, cur, metav1.UpdateOptions{})
			if err == nil || apierrors.IsNotFound(err) {
				return
			}
		}
		if attempt > 100 {
			fmt.Fprintf(os.Stderr, "kubetest: process node %s: status of pod %s/%s: %v\n", p.Name, pod.Namespace, pod.Name, err)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// forceDelete deletes pod with grace 0, as a kubelet does once its
// containers have stopped.
func (p *ProcessNode) forceDelete(pod *corev1.Pod) {
	zero := int64(0)
	uid := pod.UID
	err := p.cs.CoreV1().Pods(pod.Namespace).Delete(p.ctx, pod.Name,
		metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) && p.ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "kubetest: process node %s: delete pod %s/%s: %v\n", p.Name, pod.Namespace, pod.Name, err)
	}
}

// containerLogs serves a container's log as the kubelet does:
// GET /containerLogs/{ns}/{pod}/{container}?follow&timestamps&sinceTime&tailLines&limitBytes.
func (p *ProcessNode) containerLogs(w http.ResponseWriter, r *http.Request) {
	ns, name, container := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container")
	p.mu.Lock()
	pp := p.byNS[ns+"/"+name]
	started := pp != nil && pp.started
	p.mu.Unlock()
	switch {
	case pp == nil:
		http.Error(w, fmt.Sprintf("pod %s/%s not found on node %s", ns, name, p.Name), http.StatusNotFound)
		return
	case !started:
		http.Error(w, fmt.Sprintf("container %q in pod %q is waiting to start", container, name), http.StatusBadRequest)
		return
	case container != pp.container:
		http.Error(w, fmt.Sprintf("container %s is not valid for pod %s", container, name), http.StatusBadRequest)
		return
	}
	q := r.URL.Query()
	follow := q.Get("follow") == "true"
	stamps := q.Get("timestamps") == "true"
	var since time.Time
	if s := q.Get("sinceTime"); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			http.Error(w, "sinceTime: "+err.Error(), http.StatusBadRequest)
			return
		}
		since = t
	}
	if s := q.Get("sinceSeconds"); s != "" {
		n, _ := strconv.Atoi(s)
		since = time.Now().Add(-time.Duration(n) * time.Second)
	}
	tail := -1
	if s := q.Get("tailLines"); s != "" {
		tail, _ = strconv.Atoi(s)
	}
	limit := int64(-1)
	if s := q.Get("limitBytes"); s != "" {
		limit, _ = strconv.ParseInt(s, 10, 64)
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	out := &limitWriter{w: w, n: limit}
	pp.log.serve(r.Context(), out, flusher, follow, stamps, since, tail, pp.done)
}

type limitWriter struct {
	w io.Writer
	n int64 // < 0: no limit
}

var errLimit = errors.New("limitBytes reached")

func (l *limitWriter) Write(b []byte) (int, error) {
	if l.n < 0 {
		return l.w.Write(b)
	}
	if l.n == 0 {
		return 0, errLimit
	}
	if int64(len(b)) > l.n {
		b = b[:l.n]
	}
	n, err := l.w.Write(b)
	l.n -= int64(n)
	return n, err
}

// criLogFile is a container's log, in the CRI format: one record a line,
// "<RFC 3339 time> <stream> <F|P> <text>", P for the first parts of a
// line longer than the reader's buffer. Records are timed and appended
// under one lock, so their times never go back.
type criLogFile struct {
	path string
	mu   sync.Mutex
	f    *os.File
	wg   sync.WaitGroup
	// grew is closed and replaced on every append (and at close).
	grew   chan struct{}
	closed bool
}

func createCRILog(path string) (*criLogFile, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &criLogFile{path: path, f: f, grew: make(chan struct{})}, nil
}

// copy appends the lines read from r as stream's records, and closes r
// at its end.
func (l *criLogFile) copy(stream string, r io.ReadCloser) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer r.Close()
		br := bufio.NewReaderSize(r, 16<<10)
		for {
			line, err := br.ReadSlice('\n')
			if len(line) > 0 {
				// As containerd tags them: P for a line cut at the buffer's
				// size, F for the rest, the last line without a newline
				// included (the kubelet serves it with one).
				tag := "F"
				if errors.Is(err, bufio.ErrBufferFull) {
					tag = "P"
				}
				l.append(stream, tag, bytes.TrimSuffix(line, []byte("\n")))
			}
			if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
				return
			}
		}
	}()
}

func (l *criLogFile) append(stream, tag string, text []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rec := make([]byte, 0, len(text)+64)
	rec = time.Now().UTC().AppendFormat(rec, time.RFC3339Nano)
	rec = append(rec, ' ')
	rec = append(rec, stream...)
	rec = append(rec, ' ')
	rec = append(rec, tag...)
	rec = append(rec, ' ')
	rec = append(rec, text...)
	rec = append(rec, '\n')
	_, _ = l.f.Write(rec)
	close(l.grew)
	l.grew = make(chan struct{})
}

// close waits for the copies to reach the end of their pipes (the
// process and what it left behind have ended) and closes the file.
func (l *criLogFile) close() {
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		_ = l.f.Close()
		close(l.grew)
	}
}

// serve writes the log's records to w as the kubelet's API does; when
// following, it waits for more until the container has ended (done) and
// every record is written, or ctx ends.
func (l *criLogFile) serve(ctx context.Context, w io.Writer, fl http.Flusher, follow, stamps bool, since time.Time, tail int, done <-chan struct{}) {
	f, err := os.Open(l.path)
	if err != nil {
		return
	}
	defer f.Close()
	write := func(rec []byte) bool {
		ts, rest, _ := bytes.Cut(rec, []byte(" "))
		_, rest, _ = bytes.Cut(rest, []byte(" ")) // the stream
		tag, text, _ := bytes.Cut(rest, []byte(" "))
		t, err := time.Parse(time.RFC3339Nano, string(ts))
		if err != nil || (!since.IsZero() && t.Before(since)) {
			return true
		}
		var b []byte
		if stamps {
			b = append(append(b, ts...), ' ')
		}
		b = append(b, text...)
		if string(tag) == "F" {
			b = append(b, '\n')
		}
		_, err = w.Write(b)
		return err == nil
	}
	br := bufio.NewReader(f)
	var pending []byte
	// readAll writes the complete records now in the file; first, with
	// tail, only its last ones.
	first := true
	readAll := func() bool {
		var recs [][]byte
		for {
			chunk, err := br.ReadBytes('\n')
			pending = append(pending, chunk...)
			if err != nil {
				break
			}
			recs = append(recs, bytes.TrimSuffix(pending, []byte("\n")))
			pending = nil
		}
		if first && tail >= 0 && len(recs) > tail {
			recs = recs[len(recs)-tail:]
		}
		first = false
		for _, rec := range recs {
			if !write(rec) {
				return false
			}
		}
		if fl != nil {
			fl.Flush()
		}
		return true
	}
	for {
		l.mu.Lock()
		grew, closed := l.grew, l.closed
		l.mu.Unlock()
		if !readAll() || !follow {
			return
		}
		if closed {
			readAll()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-grew:
		case <-done:
		}
	}
}

// logTail is the end of the container's log, as the kubelet gives it as
// the terminated state's message under FallbackToLogsOnError: its last
// lines (the text, no times) up to max bytes.
func logTail(path string, lines, max int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	recs := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(recs) > lines {
		recs = recs[len(recs)-lines:]
	}
	var out strings.Builder
	for _, rec := range recs {
		parts := strings.SplitN(rec, " ", 4)
		if len(parts) < 4 {
			continue
		}
		out.WriteString(parts[3])
		if parts[2] == "F" {
			out.WriteByte('\n')
		}
	}
	s := out.String()
	if len(s) > max {
		s = s[len(s)-max:]
	}
	return s
}

// selfSigned is the kubelet API's serving certificate: the API server's
// kubelet client has no CA configured, so it does not verify it (see
// Start).
func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "process-kubelet"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
