package deploy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/executor/kubernetes"
	"trainyard/internal/executor/kubernetes/kubetest"
)

func TestMain(m *testing.M) { kubetest.Main(m) }

var chart = filepath.Join("helm", "trainyard")

// helm runs the helm binary named by TRAINYARD_TEST_HELM (.ci/kube.sh
// builds it); without it the test is skipped, except in CI, where it
// fails.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := os.Getenv("TRAINYARD_TEST_HELM")
	if bin == "" {
		msg := "TRAINYARD_TEST_HELM is not set: build helm with `eval \"$(bash .ci/kube.sh)\"`"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	err := cmd.Run()
	return out.String(), err
}

// checkConfig runs `trainyard server --check-config` on a rendered
// server config: the server must start with it.
func checkConfig(t *testing.T, conf string) {
	t.Helper()
	dir := t.TempDir()
	file := filepath.Join(dir, "server.yaml")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "trainyard")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/trainyard").CombinedOutput(); err != nil {
		t.Fatalf("build trainyard: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "server", "--check-config", file).CombinedOutput(); err != nil {
		t.Errorf("the chart's server config:\n%s\ntrainyard server --check-config: %v\n%s", conf, err, out)
	}
}

var withPostgres = []string{"--set", "replicas=3", "--set", "store.postgres.existingSecret=trainyard-db", "--set", "persistence.accessModes={ReadWriteMany}"}

func TestHelmLint(t *testing.T) {
	for _, set := range [][]string{nil, withPostgres, {"--set", "ingress.enabled=true", "--set", "config.log_retention=90d"}} {
		out, err := helm(t, append([]string{"lint", "--strict", chart}, set...)...)
		if err != nil {
			t.Errorf("helm lint %v: %v\n%s", set, err, out)
		}
	}
}

// Several replicas need the shared PostgreSQL store: the chart refuses
// them on SQLite, saying what to set.
func TestHelmRefusesReplicasOnSQLite(t *testing.T) {
	out, err := helm(t, "template", "ty", chart, "--set", "replicas=2")
	if err == nil || !strings.Contains(out, "store.postgres.existingSecret") {
		t.Errorf("err %v, output %s", err, out)
	}
}

// rendered renders the chart into namespace ns with helm's extra args and
// returns its objects, each with the client that creates it on c.
func rendered(t *testing.T, c *kubetest.Cluster, ns string, args ...string) []renderedObject {
	t.Helper()
	out, err := helm(t, append([]string{"template", "ty", chart, "--namespace", ns}, args...)...)
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, out)
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	dec := yaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	var objs []renderedObject
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode the rendered chart: %v", err)
		}
		if obj.Object == nil {
			continue
		}
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
		var r dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == "namespace" {
			r = dyn.Resource(m.Resource).Namespace(ns)
		}
		objs = append(objs, renderedObject{obj: obj, client: r})
	}
	return objs
}

type renderedObject struct {
	obj    unstructured.Unstructured
	client dynamic.ResourceInterface
}

// TestHelmChartApplies renders the chart and creates every object on the
// test API server as a server-side dry run: the API server validates and
// defaults each one (schemas, RBAC rules, references) and stores nothing.
func TestHelmChartApplies(t *testing.T) {
	for _, set := range [][]string{nil, append([]string{"--set", "ingress.enabled=true", "--set", "config.log_retention=90d"}, withPostgres...)} {
		c := kubetest.Shared(t)
		ns := c.Namespace(t)
		kinds := map[string]int{}
		for _, o := range rendered(t, c, ns, set...) {
			obj, gvk := o.obj, o.obj.GroupVersionKind()
			if _, err := o.client.Create(context.Background(), &obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}); err != nil {
				t.Errorf("%s %s does not apply: %v", gvk.Kind, obj.GetName(), err)
			}
			kinds[gvk.Kind]++
			if gvk.Kind == "ConfigMap" {
				conf, _, _ := unstructured.NestedString(obj.Object, "data", "server.yaml")
				checkConfig(t, conf)
			}
		}
		for _, k := range []string{"Deployment", "Service", "ServiceAccount", "ConfigMap", "Secret", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"} {
			if kinds[k] == 0 {
				t.Errorf("%v: the chart renders no %s (%v)", set, k, kinds)
			}
		}
		if len(set) > 0 && kinds["Ingress"] != 1 {
			t.Errorf("ingress.enabled rendered %d Ingresses", kinds["Ingress"])
		}
	}
}

// TestHelmRBACSufficesForTheExecutor creates the chart's ServiceAccount
// and RBAC objects for real, then runs the Kubernetes executor as that
// ServiceAccount (impersonated): it reads the nodes, launches a job with
// a secret and a multi-node gang (Jobs, Secrets, a Service), stops one
// (its pods deleted with the stop's grace) and releases both. Without the
// chart's rights the same executor cannot start: the API server enforces
// RBAC, so the test would catch a missing rule.
func TestHelmRBACSufficesForTheExecutor(t *testing.T) {
	c := kubetest.Shared(t)
	ns := c.Namespace(t)
	ctx := context.Background()
	sa := ""
	for _, o := range rendered(t, c, ns) {
		obj := o.obj
		switch obj.GetKind() {
		case "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding":
		default:
			continue
		}
		if obj.GetKind() == "ServiceAccount" {
			sa = obj.GetName()
		}
		if _, err := o.client.Create(ctx, &obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
		if obj.GetNamespace() == "" && (obj.GetKind() == "ClusterRole" || obj.GetKind() == "ClusterRoleBinding") {
			name := obj.GetName()
			t.Cleanup(func() { _ = o.client.Delete(context.Background(), name, metav1.DeleteOptions{}) })
		}
	}
	if sa == "" {
		t.Fatal("the chart renders no ServiceAccount")
	}
	sel := map[string]string{"trainyard.io/test-pool": ns}
	for _, n := range []string{"a", "b"} {
		c.AddNode(t, kubetest.Node{Name: ns + "-" + n, CPUs: "8", Memory: "32Gi", GPUs: 2, Labels: sel})
	}
	as := func(user string) *rest.Config {
		cfg := rest.CopyConfig(c.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		return cfg
	}
	start := func(cfg *rest.Config) (*kubernetes.Executor, error) {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return kubernetes.New(sctx, kubernetes.Config{REST: cfg, Namespace: ns, Image: "example.com/trainer:1", NodeSelector: sel})
	}
	if ex, err := start(as("system:serviceaccount:" + ns + ":nobody")); err == nil {
		ex.Close()
		t.Fatal("an executor without the chart's rights started: the test API server does not enforce RBAC, so this test proves nothing")
	}
	ex, err := start(as("system:serviceaccount:" + ns + ":" + sa))
	if err != nil {
		t.Fatalf("the executor cannot start with the chart's rights: %v", err)
	}
	t.Cleanup(func() { _ = ex.Close() })
	if inv, err := ex.Inventory(ctx); err != nil || len(inv.Nodes) != 2 {
		t.Errorf("inventory with the chart's rights: %+v, %v; want 2 nodes", inv, err)
	}
	h := executortest.NewHarness(t, ex)
	single := h.Launch(t, []string{"python3", "train.py"}, func(l *executor.Launch) {
		l.Env = append(l.Env, "WANDB_API_KEY=s3cr3t-value", "TRAINYARD_KWOK_BLOCK=1")
		l.Redact = []string{"s3cr3t-value"}
		l.Resources = domain.Resources{CPUs: 1, Memory: 1 << 30, Nodes: 1}
	})
	gang := h.Launch(t, []string{"torchrun", "train.py"}, func(l *executor.Launch) {
		l.Env = append(l.Env, "TRAINYARD_KWOK_RUN_MS=200")
		l.Resources = domain.Resources{CPUs: 1, Memory: 1 << 30, Nodes: 2}
		l.Placement = executor.Placement{Nodes: []executor.PlacedNode{{Name: ns + "-a"}, {Name: ns + "-b"}}}
	})
	h.Wait(t, single.Ref, executor.Started)
	if ev := h.Wait(t, gang.Ref, executor.Exited); ev.State != domain.AttemptSucceeded {
		t.Errorf("gang: %s %s (%s)", ev.State, ev.Reason, ev.Message)
	}
	if err := ex.Stop(ctx, single.Ref, executor.StopRequest{Grace: time.Second}); err != nil {
		t.Fatalf("stop with the chart's rights: %v", err)
	}
	if ev := h.Wait(t, single.Ref, executor.Exited); ev.State != domain.AttemptCanceled {
		t.Errorf("stopped: %s %s (%s)", ev.State, ev.Reason, ev.Message)
	}
	for _, ref := range []executor.Ref{single.Ref, gang.Ref} {
		if err := ex.Release(ctx, ref); err != nil {
			t.Errorf("release %s with the chart's rights: %v", ref, err)
		}
	}
}
