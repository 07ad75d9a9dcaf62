package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// profileTemplate runs the same job for every profile; only the variables
// differ.
const profileTemplate = `description: e2e profiles
vars:
  profile: {default: dev, allowed: [dev, prod]}
  steps: {default: "1"}
  cpus: {default: "0.5"}
name: e2e-tmpl-${profile}
entrypoint: [sh, -c, 'echo "profile=$1 steps=$2 home=$${HOME:+set}"', sh, "${profile}", "${steps}"]
resources: {cpus: "${cpus}", memory: 64MiB}
params: {steps: "${steps}"}
labels: {profile: "${profile}"}
`

func TestTemplateProfiles(t *testing.T) {
	s := startServer(t, serverOpts{})
	file := filepath.Join(s.dir, "profiles.tmpl.yaml")
	if err := os.WriteFile(file, []byte(profileTemplate), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := s.mustCLI("template", "create", "profiles", "-f", file); strings.TrimSpace(out) != "profiles@1" {
		t.Fatalf("template create printed %q, want profiles@1", out)
	}
	_, errOut, code := s.cli("template", "create", "profiles", "-f", file)
	if code != 0 || !strings.Contains(errOut, "no new version") {
		t.Errorf("identical create: exit %d, stderr %q", code, errOut)
	}

	devID := mustID(t, s.mustCLI("submit", "--template", "profiles"))
	prodID := mustID(t, s.mustCLI("submit", "--template", "profiles", "--set", "profile=prod", "--set", "steps=3",
		"--set", "cpus=1", "--set", "labels.team=e2e"))
	dev := s.waitState(devID, time.Minute, "succeeded", "failed")
	prod := s.waitState(prodID, time.Minute, "succeeded", "failed")
	if dev.State != "succeeded" || prod.State != "succeeded" {
		t.Fatalf("dev %s, prod %s; want both succeeded", dev.State, prod.State)
	}
	if log := s.mustCLI("logs", strconv.FormatInt(prodID, 10)); !strings.Contains(log, "profile=prod steps=3 home=set") {
		t.Errorf("prod log = %q, want the substituted arguments and the shell's own ${HOME}", log)
	}

	// The two specs differ exactly where the variables (and the one
	// override) say.
	var ds, ps map[string]any
	if err := json.Unmarshal(dev.Spec, &ds); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(prod.Spec, &ps); err != nil {
		t.Fatal(err)
	}
	// resources: only cpus comes from a variable.
	dr, pr := ds["resources"].(map[string]any), ps["resources"].(map[string]any)
	if dr["cpus"] != 0.5 || pr["cpus"] != 1.0 {
		t.Errorf("cpus: dev %v, prod %v; want 0.5 and 1", dr["cpus"], pr["cpus"])
	}
	delete(dr, "cpus")
	delete(pr, "cpus")
	if !reflect.DeepEqual(dr, pr) {
		t.Errorf("resources differ beyond cpus: dev %v, prod %v", dr, pr)
	}
	cmd := `echo "profile=$1 steps=$2 home=${HOME:+set}"`
	want := map[string][2]any{
		"name":       {"e2e-tmpl-dev", "e2e-tmpl-prod"},
		"entrypoint": {[]any{"sh", "-c", cmd, "sh", "dev", "1"}, []any{"sh", "-c", cmd, "sh", "prod", "3"}},
		"params":     {map[string]any{"steps": "1"}, map[string]any{"steps": "3"}},
		"labels": {map[string]any{"profile": "dev", "trainyard.template": "profiles@1"},
			map[string]any{"profile": "prod", "team": "e2e", "trainyard.template": "profiles@1"}},
	}
	for k := range ds {
		if _, ok := want[k]; !ok && !reflect.DeepEqual(ds[k], ps[k]) {
			t.Errorf("spec field %s differs though no variable sets it: dev %v, prod %v", k, ds[k], ps[k])
		}
	}
	for k, w := range want {
		if !reflect.DeepEqual(ds[k], w[0]) || !reflect.DeepEqual(ps[k], w[1]) {
			t.Errorf("%s: dev %#v, prod %#v; want %#v and %#v", k, ds[k], ps[k], w[0], w[1])
		}
	}

	// Secrets cannot be placed in a template.
	bad := filepath.Join(s.dir, "bad.tmpl.yaml")
	if err := os.WriteFile(bad, []byte("name: leak\nentrypoint: [env]\nenv_vars:\n  HF_TOKEN: hf_live_0123456789\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := s.cli("template", "create", "leak", "-f", bad)
	if code != 2 || !strings.Contains(errOut, "env_vars.HF_TOKEN (line 4)") || !strings.Contains(errOut, "trainyard secret set HF_TOKEN") ||
		!strings.Contains(errOut, "secrets: [HF_TOKEN]") || strings.Contains(errOut+out, "hf_live_0123456789") {
		t.Errorf("credential literal: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	if out := s.mustCLI("template", "ls", "-o", "json"); strings.Contains(out, "leak") {
		t.Errorf("the refused template was stored: %s", out)
	}
}

func mustID(t *testing.T, out string) int64 {
	t.Helper()
	id, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatalf("submit printed %q, want a job id", out)
	}
	return id
}
