// Package kubetest runs a real Kubernetes control plane for tests: etcd,
// kube-apiserver, kube-controller-manager (its Job controller makes a
// Job's pods) and kube-scheduler (which binds them), with kwok playing
// the nodes and the pods' lives (stages.yaml says how a test steers a
// pod). A test that needs its pods to really run adds process nodes
// instead (ProcessNode), whose pods run as local processes. The binaries
// come from .ci/kube.sh, named by TRAINYARD_TEST_KUBE_BIN.
//
// Starting one takes a few seconds, so a test package shares one
// (Shared) and stops it in TestMain (Stop).
package kubetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	_ "embed"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
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
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// EnvBin names the directory of the engine's binaries.
const EnvBin = "TRAINYARD_TEST_KUBE_BIN"

//go:embed stages.yaml
var stages []byte

// PodLog is the file, below the cluster's directory, that kwok serves as
// every pod's log (its "job" container's), in the CRI log format; it
// holds PodLogLines. It has a directory of its own, as a container's log
// has on a kubelet: a follower of the log (follow=true) watches the
// file's directory and wakes at every write there, and the daemons write
// their own logs into the cluster's directory all the time.
const PodLog = "pod-log/job.log"

// PodLogLines are the lines of every pod's log.
var PodLogLines = []string{"hello from the pod", "step 1 loss 0.5"}

// criLog writes lines as a container runtime logs them.
func criLog(lines []string) string {
	var b strings.Builder
	t := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i, l := range lines {
		fmt.Fprintf(&b, "%s stdout F %s\n", t.Add(time.Duration(i)*time.Millisecond).Format(time.RFC3339Nano), l)
	}
	return b.String()
}

// podLogs is the kwok configuration that serves file as every pod's log.
func podLogs(file string) string {
	return `---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: every-pod
spec:
  logs:
  - containers: [job]
    logsFile: ` + file + `
    follow: false
`
}

// Cluster is a running control plane.
type Cluster struct {
	// Dir holds the cluster's state, configuration and daemon logs.
	Dir string
	// Kubeconfig is a kubeconfig file for the cluster's administrator;
	// Config the same for client-go.
	Kubeconfig string
	Config     *rest.Config
	Server     string // the API server's URL
	Token      string // the administrator's bearer token

	procs []*exec.Cmd
}

var shared struct {
	once sync.Once
	c    *Cluster
	err  error
}

// Shared returns the package's cluster, starting it on first use. Without
// TRAINYARD_TEST_KUBE_BIN the test is skipped, except in CI (CI=true),
// where it fails: a test whose engine is missing must not pass there.
func Shared(t testing.TB) *Cluster {
	t.Helper()
	bin := os.Getenv(EnvBin)
	if bin == "" {
		msg := EnvBin + " is not set: build the engine with `eval \"$(bash .ci/kube.sh)\"` (about 30 minutes the first time)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "trainyard-kube-")
		if err != nil {
			shared.err = err
			return
		}
		shared.c, shared.err = Start(bin, dir)
	})
	if shared.err != nil {
		t.Fatalf("start Kubernetes: %v", shared.err)
	}
	return shared.c
}

// Main runs a test package's tests, then stops the shared cluster: call
// it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	Stop()
	os.Exit(code)
}

// Stop stops the shared cluster, if one was started, and removes its
// directory (kept, and named, with TRAINYARD_TEST_KUBE_KEEP=1: the
// daemons' logs are there); TestMain calls it after the tests.
func Stop() {
	if shared.c == nil {
		return
	}
	shared.c.Stop()
	if os.Getenv("TRAINYARD_TEST_KUBE_KEEP") == "1" {
		fmt.Fprintln(os.Stderr, "kubetest: kept", shared.c.Dir)
		return
	}
	_ = os.RemoveAll(shared.c.Dir)
}

// Start starts a control plane from the binaries in bin, keeping its
// state in dir, and returns once the API server answers and the
// controllers are up.
func Start(bin, dir string) (*Cluster, error) {
	c := &Cluster{Dir: dir}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	etcdPort, peerPort, apiPort, kwokPort := ports[0], ports[1], ports[2], ports[3]
	c.Server = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	c.Token = randomHex(16)

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	files := map[string][]byte{
		"sa.key":      keyPEM,
		"tokens.csv":  []byte(c.Token + ",admin,admin,system:masters\n"),
		"kubeconfig":  []byte(kubeconfig(c.Server, c.Token)),
		"stages.yaml": append(append([]byte(nil), stages...), podLogs(filepath.Join(dir, PodLog))...),
		PodLog:        []byte(criLog(PodLogLines)),
	}
	if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(PodLog)), 0o700); err != nil {
		return nil, err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	path := func(name string) string { return filepath.Join(dir, name) }

	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	if err := c.start(bin, "etcd",
		"--data-dir", path("etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", "http://127.0.0.1:"+strconv.Itoa(peerPort),
		"--initial-advertise-peer-urls", "http://127.0.0.1:"+strconv.Itoa(peerPort),
		"--initial-cluster", "default=http://127.0.0.1:"+strconv.Itoa(peerPort),
		"--unsafe-no-fsync", "--log-level", "warn"); err != nil {
		return nil, err
	}
	if err := c.start(bin, "kube-apiserver",
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", strconv.Itoa(apiPort),
		"--cert-dir", path("certs"),
		"--token-auth-file", path("tokens.csv"),
		"--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", path("sa.key"),
		"--service-account-signing-key-file", path("sa.key"),
		"--service-cluster-ip-range", "10.96.0.0/16",
		"--endpoint-reconciler-type", "none",
		"--disable-admission-plugins", "ServiceAccount,TaintNodesByCondition"); err != nil {
		return nil, err
	}
	c.Config = &rest.Config{Host: c.Server, BearerToken: c.Token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 500, Burst: 1000}
	if err := c.waitReady(90 * time.Second); err != nil {
		return nil, err
	}
	if err := c.start(bin, "kube-controller-manager",
		"--kubeconfig", c.Kubeconfig, "--leader-elect=false", "--secure-port", "0",
		"--controllers", "job-controller,garbage-collector-controller,ttl-after-finished-controller,namespace-controller",
		"--concurrent-job-syncs", "20", "--kube-api-qps", "500", "--kube-api-burst", "1000"); err != nil {
		return nil, err
	}
	if err := c.start(bin, "kube-scheduler",
		"--kubeconfig", c.Kubeconfig, "--leader-elect=false", "--secure-port", "0",
		"--kube-api-qps", "500", "--kube-api-burst", "1000"); err != nil {
		return nil, err
	}
	if err := c.start(bin, "kwok",
		"--kubeconfig", c.Kubeconfig, "--config", path("stages.yaml"),
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake",
		// kwok serves the nodes' kubelet API (pod logs) on kwokPort, which
		// the API server reaches at the nodes' address, 127.0.0.1.
		"--server-address", "127.0.0.1:"+strconv.Itoa(kwokPort),
		"--node-ip", "127.0.0.1", "--node-port", strconv.Itoa(kwokPort),
		"--cidr", "10.244.0.0/16"); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// start runs bin/name with args, its output to dir/name.log.
func (c *Cluster) start(bin, name string, args ...string) error {
	log, err := os.Create(filepath.Join(c.Dir, name+".log"))
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	c.procs = append(c.procs, cmd)
	return nil
}

// waitReady polls the API server's /readyz.
func (c *Cluster) waitReady(limit time.Duration) error {
	cl := &http.Client{Timeout: 2 * time.Second, Transport: insecureTransport()}
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		if err := c.exited(); err != nil {
			return err
		}
		req, _ := http.NewRequest("GET", c.Server+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+c.Token)
		resp, err := cl.Do(req)
		if err == nil {
			var b bytes.Buffer
			_, _ = b.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, lastLines(b.String(), 5))
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("the API server is not ready after %s (%s); its log: %s", limit, last, c.LogTail("kube-apiserver", 20))
}

// exited reports a daemon that has already exited, with its log's tail.
func (c *Cluster) exited() error {
	for _, p := range c.procs {
		var ws syscall.WaitStatus
		pid, _ := syscall.Wait4(p.Process.Pid, &ws, syscall.WNOHANG, nil)
		if pid == p.Process.Pid {
			name := filepath.Base(p.Path)
			p.Process = nil
			return fmt.Errorf("%s exited (%v): %s", name, ws, c.LogTail(name, 20))
		}
	}
	return nil
}

// LogTail returns the last n lines of a daemon's log.
func (c *Cluster) LogTail(name string, n int) string {
	b, err := os.ReadFile(filepath.Join(c.Dir, name+".log"))
	if err != nil {
		return err.Error()
	}
	return lastLines(string(b), n)
}

// Stop kills every daemon, the last started first, and waits for them.
func (c *Cluster) Stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		if p.Process == nil {
			continue
		}
		_ = syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
		_ = p.Wait()
	}
	c.procs = nil
}

func kubeconfig(server, token string) string {
	return `apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: ` + server + `
    insecure-skip-tls-verify: true
users:
- name: admin
  user:
    token: ` + token + `
contexts:
- name: test
  context: {cluster: test, user: admin}
current-context: test
`
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// WaitFor polls cond every 20 ms until it returns true, an error, or
// limit passes.
func WaitFor(ctx context.Context, limit time.Duration, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		done, err := cond(ctx)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("timed out waiting for " + what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func insecureTransport() *http.Transport {
	return &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
}

// Client returns a clientset for the cluster's administrator.
func (c *Cluster) Client(t testing.TB) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// Node is a kwok node to add: its name, labels, taints and allocatable
// resources (gpus under resource name GPUResource, default
// nvidia.com/gpu).
type Node struct {
	Name        string
	CPUs        string // a quantity: "16", "500m"
	Memory      string // "64Gi"
	GPUs        int
	GPUResource string
	Pods        string // how many pods it takes; default 110
	Labels      map[string]string
	Taints      []corev1.Taint
}

// allocatable is what the node offers: its CPUs, memory, pods and GPUs.
func (n Node) allocatable() corev1.ResourceList {
	pods := n.Pods
	if pods == "" {
		pods = "110"
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(n.CPUs),
		corev1.ResourceMemory: resource.MustParse(n.Memory),
		corev1.ResourcePods:   resource.MustParse(pods),
	}
	if n.GPUs > 0 {
		name := n.GPUResource
		if name == "" {
			name = "nvidia.com/gpu"
		}
		res[corev1.ResourceName(name)] = *resource.NewQuantity(int64(n.GPUs), resource.DecimalSI)
	}
	return res
}

// labels are the node's labels, with its hostname and type.
func (n Node) labels(typ string) map[string]string {
	labels := map[string]string{"kubernetes.io/hostname": n.Name, "type": typ}
	for k, v := range n.Labels {
		labels[k] = v
	}
	return labels
}

// AddNode creates a kwok node and waits until it is Ready; t's cleanup
// deletes it.
func (c *Cluster) AddNode(t testing.TB, n Node) {
	t.Helper()
	ctx := context.Background()
	cs := c.Client(t)
	res, labels := n.allocatable(), n.labels("kwok")
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: labels,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
		Spec:   corev1.NodeSpec{Taints: n.Taints},
		Status: corev1.NodeStatus{Allocatable: res, Capacity: res},
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node %s: %v", n.Name, err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{}) })
	err := WaitFor(ctx, 30*time.Second, "node "+n.Name+" to be Ready", func(ctx context.Context) (bool, error) {
		got, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v; kwok's log: %s", err, c.LogTail("kwok", 20))
	}
}

// Namespace creates a namespace of its own for a test and returns its
// name; t's cleanup deletes it.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	cs := c.Client(t)
	ns, err := cs.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })
	return ns.Name
}
