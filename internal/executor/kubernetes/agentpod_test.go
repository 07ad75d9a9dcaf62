package kubernetes

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"trainyard/internal/executor"
)

// agentLaunch is launch() with the environment the control loop gives a
// job: its server-side output paths, the server's URL and its token.
func agentLaunch() executor.Launch {
	l := launch()
	l.Argv = []string{"python3", "train.py", "--lr=$(LR)"}
	l.Env = append(l.Env, "TRAINYARD_JOB_ID=42", "TRAINYARD_ATTEMPT=2",
		"TRAINYARD_OUTPUT_DIR=/var/lib/trainyard/outputs/42", "TRAINYARD_CHECKPOINT_DIR=/var/lib/trainyard/outputs/42/checkpoints",
		"TRAINYARD_API=http://127.0.0.1:7070", "TRAINYARD_JOB_TOKEN=tyj_secret-token")
	l.Redact = append(l.Redact, "tyj_secret-token")
	return l
}

// TestBuildWithoutAgent: no Agent.Image, no change: the bare command, no
// volume, no init container, the launch's paths.
func TestBuildWithoutAgent(t *testing.T) {
	l := agentLaunch()
	pod := build(Config{Namespace: "ml", Image: "reg/train:1", Agent: AgentConfig{APIURL: "http://trainyard.ml:7070"}}, l).job.Spec.Template.Spec
	c := pod.Containers[0]
	if want := []string{"python3", "train.py", "--lr=$$(LR)"}; !slices.Equal(c.Command, want) {
		t.Errorf("command %q, want %q", c.Command, want)
	}
	if len(pod.InitContainers) != 0 || len(pod.Volumes) != 0 || len(c.VolumeMounts) != 0 {
		t.Errorf("init %v volumes %v mounts %v, want none", pod.InitContainers, pod.Volumes, c.VolumeMounts)
	}
	e := env(c)
	if e["TRAINYARD_OUTPUT_DIR"].Value != "/var/lib/trainyard/outputs/42" || e["TRAINYARD_API"].Value != "http://127.0.0.1:7070" {
		t.Errorf("env %v, want the launch's", e)
	}
	bare := build(Config{Namespace: "ml", Image: "reg/train:1"}, l).job
	with := build(Config{Namespace: "ml", Image: "reg/train:1", Agent: AgentConfig{APIURL: "http://x", Path: "/p", Dir: "/d"}}, l).job
	if !reflect.DeepEqual(bare, with) {
		t.Error("an AgentConfig without Image changes the Job")
	}
}

func TestBuildWithAgent(t *testing.T) {
	l := agentLaunch()
	cfg := Config{Namespace: "ml", Image: "reg/train:1", Agent: AgentConfig{Image: "reg/trainyard:v1.2", APIURL: "http://trainyard.ml:7070"}}
	o := build(cfg, l)
	pod := o.job.Spec.Template.Spec
	c := pod.Containers[0]
	if want := []string{"/trainyard/bin/trainyard", "agent", "--", "python3", "train.py", "--lr=$$(LR)"}; !slices.Equal(c.Command, want) {
		t.Errorf("command %q, want %q", c.Command, want)
	}
	if c.Image != "reg/train:1" {
		t.Errorf("the job's container runs %q, want the job's image", c.Image)
	}
	e := env(c)
	for k, want := range map[string]string{
		"TRAINYARD_OUTPUT_DIR":     "/trainyard/outputs",
		"TRAINYARD_CHECKPOINT_DIR": "/trainyard/outputs/checkpoints",
		"TRAINYARD_API":            "http://trainyard.ml:7070",
		"TRAINYARD_JOB_ID":         "42",
		"TRAINYARD_ATTEMPT":        "2",
	} {
		if e[k].Value != want {
			t.Errorf("%s = %q, want %q", k, e[k].Value, want)
		}
	}
	if ref := e["TRAINYARD_JOB_TOKEN"].ValueFrom; ref == nil || ref.SecretKeyRef == nil || string(o.secret.Data["TRAINYARD_JOB_TOKEN"]) != "tyj_secret-token" {
		t.Errorf("TRAINYARD_JOB_TOKEN = %+v, want it from the Secret", e["TRAINYARD_JOB_TOKEN"])
	}
	if len(pod.Volumes) != 1 || pod.Volumes[0].Name != agentVolume || pod.Volumes[0].EmptyDir == nil {
		t.Fatalf("volumes %+v, want one emptyDir", pod.Volumes)
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].Name != agentVolume || c.VolumeMounts[0].MountPath != "/trainyard" || c.VolumeMounts[0].ReadOnly {
		t.Errorf("mounts %+v", c.VolumeMounts)
	}
	if len(pod.InitContainers) != 1 {
		t.Fatalf("init containers %+v, want one", pod.InitContainers)
	}
	ic := pod.InitContainers[0]
	if ic.Image != "reg/trainyard:v1.2" || !reflect.DeepEqual(ic.VolumeMounts, c.VolumeMounts) {
		t.Errorf("init container %+v", ic)
	}
	if m := ic.Resources.Limits[corev1.ResourceMemory]; m.IsZero() || !reflect.DeepEqual(ic.Resources.Requests, ic.Resources.Limits) {
		t.Errorf("init container resources %+v, want small requests equal to limits (quotas that require both)", ic.Resources)
	}
	// The kubelet turns $$ back into $: the shell gets the paths as $0, $1.
	if want := []string{"/bin/sh", "-c", `mkdir -p "$$0/bin" && cp "$$1" "$$0/bin/trainyard"`, "/trainyard", DefaultAgentPath}; !slices.Equal(ic.Command, want) {
		t.Errorf("init command %q, want %q", ic.Command, want)
	}
	if b, _ := o.job.Marshal(); strings.Contains(string(b), "tyj_secret-token") {
		t.Error("the job token is in the Job")
	}
	// The launch is not changed (its Env is the caller's).
	if e := l.Env[len(l.Env)-1]; e != "TRAINYARD_JOB_TOKEN=tyj_secret-token" {
		t.Errorf("the launch's environment changed: last %q", e)
	}

	// Path and Dir configured; no APIURL: TRAINYARD_API as launched.
	cfg.Agent = AgentConfig{Image: "reg/trainyard:v1.2", Path: "/opt/ty/trainyard", Dir: "/run/ty"}
	pod = build(cfg, l).job.Spec.Template.Spec
	c, ic = pod.Containers[0], pod.InitContainers[0]
	if c.Command[0] != "/run/ty/bin/trainyard" || ic.Command[3] != "/run/ty" || ic.Command[4] != "/opt/ty/trainyard" || c.VolumeMounts[0].MountPath != "/run/ty" {
		t.Errorf("command %q, init %q, mount %q", c.Command, ic.Command, c.VolumeMounts[0].MountPath)
	}
	e = env(c)
	if e["TRAINYARD_API"].Value != "http://127.0.0.1:7070" || e["TRAINYARD_OUTPUT_DIR"].Value != "/run/ty/outputs" {
		t.Errorf("env %v", e)
	}

	// Every pod of a multi-node attempt has its agent.
	l.Resources.Nodes = 2
	spec := build(cfg, l).job.Spec.Template.Spec
	if len(spec.InitContainers) != 1 || spec.Containers[0].Command[1] != "agent" {
		t.Errorf("multi-node pod %+v", spec)
	}
}
