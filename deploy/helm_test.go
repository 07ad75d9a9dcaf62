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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

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

// TestHelmChartApplies renders the chart and creates every object on the
// test API server as a server-side dry run: the API server validates and
// defaults each one (schemas, RBAC rules, references) and stores nothing.
func TestHelmChartApplies(t *testing.T) {
	for _, set := range [][]string{nil, append([]string{"--set", "ingress.enabled=true", "--set", "config.log_retention=90d"}, withPostgres...)} {
		c := kubetest.Shared(t)
		ns := c.Namespace(t)
		out, err := helm(t, append([]string{"template", "ty", chart, "--namespace", ns}, set...)...)
		if err != nil {
			t.Fatalf("helm template %v: %v\n%s", set, err, out)
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
		kinds := map[string]int{}
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
			if _, err := r.Create(context.Background(), &obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}); err != nil {
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
