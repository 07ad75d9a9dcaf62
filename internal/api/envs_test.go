package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/client"
)

func TestEnvEndpoints(t *testing.T) {
	e := newEnv(t)
	def := apitypes.RegisterEnv{Name: "pytorch-2.4", Image: "reg/pytorch:2.4", PathPrefix: []string{"/opt/torch/bin"},
		Vars: map[string]string{"OMP_NUM_THREADS": "8"}, Check: []string{"python3", "-c", "import torch"}}
	code, b := e.do("POST", "/api/v1/envs", e.token, def)
	var env apitypes.Env
	if json.Unmarshal(b, &env); code != 201 || env.Ref != "pytorch-2.4@1" || env.Created == nil || !*env.Created ||
		!strings.HasPrefix(env.Digest, "sha256:") || env.CreatedBy != "user:admin" {
		t.Fatalf("register: %d %s", code, b)
	}
	if code, b = e.do("POST", "/api/v1/envs", e.token, def); code != 200 || !strings.Contains(string(b), `"created":false`) {
		t.Errorf("same definition again: %d %s, want 200 with created false", code, b)
	}
	def.Image = "reg/pytorch:2.4.1"
	if code, b = e.do("POST", "/api/v1/envs", e.token, def); code != 201 || !strings.Contains(string(b), `"ref":"pytorch-2.4@2"`) {
		t.Fatalf("new definition: %d %s, want version 2", code, b)
	}
	code, b = e.do("POST", "/api/v1/envs", e.token, apitypes.RegisterEnv{Name: "x", PathPrefix: []string{"rel"}})
	if code != 400 || decodeErr(t, b).Fields[0].Path != "path_prefix[0]" {
		t.Errorf("invalid definition: %d %s", code, b)
	}

	var list apitypes.EnvList
	if code, b = e.do("GET", "/api/v1/envs/pytorch-2.4", e.token, nil); json.Unmarshal(b, &list) != nil || code != 200 || len(list.Envs) != 2 {
		t.Fatalf("GET envs/{name}: %d %s", code, b)
	}
	if code, b = e.do("GET", "/api/v1/envs/pytorch-2.4/1", e.token, nil); code != 200 || !strings.Contains(string(b), `"image":"reg/pytorch:2.4"`) {
		t.Errorf("GET envs/{name}/1: %d %s", code, b)
	}
	for path, want := range map[string]int{
		"/api/v1/envs/pytorch-2.4/9":   404,
		"/api/v1/envs/nope":            404,
		"/api/v1/envs/pytorch-2.4/one": 400,
	} {
		if code, b := e.do("GET", path, e.token, nil); code != want {
			t.Errorf("GET %s: %d %s, want %d", path, code, b, want)
		}
	}

	// Deprecate through the client, then submit: refused with the reason.
	c := client.New(e.srv.URL, e.token)
	dep, err := c.DeprecateEnv(context.Background(), "pytorch-2.4", 1, "CVE in base image")
	if err != nil || len(dep) != 1 || !dep[0].Deprecated || dep[0].DeprecatedReason != "CVE in base image" || dep[0].DeprecatedAt == nil {
		t.Fatalf("DeprecateEnv = %+v, %v", dep, err)
	}
	code, j := e.submit("name: old\nentrypoint: [\"true\"]\nenv: pytorch-2.4@1\n")
	if code != 400 {
		t.Fatalf("submit with a deprecated env: %d %+v", code, j)
	}
	_, b = e.do("POST", "/api/v1/jobs", e.token, apitypes.SubmitRequest{Spec: json.RawMessage(`"name: old\nentrypoint: [\"true\"]\nenv: pytorch-2.4@1\n"`)})
	body := decodeErr(t, b)
	if len(body.Fields) != 1 || body.Fields[0].Path != "env" ||
		body.Fields[0].Message != "environment pytorch-2.4@1 is deprecated (reason: CVE in base image); use pytorch-2.4@2, or see trainyard env ls" {
		t.Errorf("refusal = %+v", body)
	}
	code, j = e.submit("name: new\nentrypoint: [\"true\"]\nenv: pytorch-2.4@2\n")
	if code != 201 {
		t.Fatalf("submit with pytorch-2.4@2: %d", code)
	}
	if code, b := e.do("GET", "/api/v1/jobs/"+strconv.FormatInt(j.ID, 10), e.token, nil); code != 200 || !strings.Contains(string(b), `"env":"pytorch-2.4@2"`) {
		t.Errorf("the job's snapshot: %d %s; want env pytorch-2.4@2", code, b)
	}
	all, err := c.DeprecateEnv(context.Background(), "pytorch-2.4", 0, "retired")
	if err != nil || len(all) != 2 || all[0].DeprecatedReason != "CVE in base image" || all[1].DeprecatedReason != "retired" {
		t.Errorf("DeprecateEnv(all) = %+v, %v", all, err)
	}
	if envs, err := c.ListEnvs(context.Background(), ""); err != nil || len(envs) != 2 {
		t.Errorf("ListEnvs = %+v, %v", envs, err)
	}
	if _, err := c.GetEnv(context.Background(), "pytorch-2.4", 7); err == nil || !strings.Contains(err.Error(), "has no version 7; the latest is pytorch-2.4@2") {
		t.Errorf("GetEnv of a missing version: %v", err)
	}
	var ce *client.APIError
	if _, err := client.New(e.srv.URL, "").ListEnvs(context.Background(), ""); !errors.As(err, &ce) {
		t.Errorf("ListEnvs without a token: %v, want an API error", err)
	}
}
