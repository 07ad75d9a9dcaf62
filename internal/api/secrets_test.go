package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trainyard/internal/api"
	"trainyard/internal/api/apitypes"
	"trainyard/internal/client"
	"trainyard/internal/secrets"
	"trainyard/internal/service"
	"trainyard/internal/store/sqlite"
)

const apiSecret = "api-s3cret-value-42"

// newSecretEnv is newEnv with a master key, so secrets can be stored.
func newSecretEnv(t *testing.T) *env {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	key, _ := secrets.NewKey(bytes.Repeat([]byte{1}, secrets.KeySize))
	svc := service.New(service.Config{Store: st, ArtifactsRoot: filepath.Join(dir, "artifacts"), Keyring: secrets.NewKeyring(key)})
	token, err := svc.Identity.Bootstrap(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler(api.Config{Service: svc, Ready: st.Ping}))
	t.Cleanup(func() { srv.Close(); st.Close() })
	return &env{t: t, srv: srv, st: st, token: token}
}

func TestSecretEndpoints(t *testing.T) {
	e := newSecretEnv(t)
	noValue := func(what string, b []byte) {
		t.Helper()
		if bytes.Contains(b, []byte(apiSecret)) {
			t.Errorf("%s shows the value: %s", what, b)
		}
	}
	code, b := e.do("PUT", "/api/v1/secrets/WANDB_KEY?project=vision", e.token, apitypes.SecretValue{Value: apiSecret})
	noValue("PUT answer", b)
	var s apitypes.Secret
	if json.Unmarshal(b, &s); code != 201 || s.Name != "WANDB_KEY" || s.Project != "vision" || s.Version != 1 || s.KeyID == "" {
		t.Fatalf("first PUT: %d %s", code, b)
	}
	code, b = e.do("PUT", "/api/v1/secrets/WANDB_KEY?project=vision", e.token, apitypes.SecretValue{Value: apiSecret + "2"})
	if json.Unmarshal(b, &s); code != 200 || s.Version != 2 {
		t.Errorf("second PUT: %d %s, want 200 version 2", code, b)
	}

	tests := map[string]struct {
		method, path string
		body         any
		status       int
		field        string
	}{
		"bad name":       {"PUT", "/api/v1/secrets/wandb", apitypes.SecretValue{Value: apiSecret}, 400, "name"},
		"bad project":    {"PUT", "/api/v1/secrets/KEY?project=Bad_Project", apitypes.SecretValue{Value: apiSecret}, 400, "project"},
		"short value":    {"PUT", "/api/v1/secrets/KEY", apitypes.SecretValue{Value: "abc"}, 400, "value"},
		"unknown field":  {"PUT", "/api/v1/secrets/KEY", map[string]string{"value": apiSecret, "secret": apiSecret}, 400, "body"},
		"bad JSON":       {"PUT", "/api/v1/secrets/KEY", `{"value": "` + apiSecret + `"`, 400, "body"},
		"delete missing": {"DELETE", "/api/v1/secrets/NOPE", nil, 404, ""},
		"rotate no file": {"POST", "/api/v1/secrets/rotate-key", apitypes.RotateKeyRequest{}, 400, "new_key_file"},
		"rotate missing": {"POST", "/api/v1/secrets/rotate-key", apitypes.RotateKeyRequest{NewKeyFile: "/nonexistent/k"}, 400, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			code, b := e.do(tc.method, tc.path, e.token, tc.body)
			noValue("error answer", b)
			if code != tc.status {
				t.Fatalf("status %d, want %d: %s", code, tc.status, b)
			}
			eb := decodeErr(t, b)
			if tc.field != "" && (len(eb.Fields) == 0 || eb.Fields[0].Path != tc.field) {
				t.Errorf("fields %+v, want one at %q", eb.Fields, tc.field)
			}
		})
	}
	if code, b := e.do("PUT", "/api/v1/secrets/KEY", "", apitypes.SecretValue{Value: apiSecret}); code != 401 {
		t.Errorf("PUT without a token: %d %s, want 401", code, b)
	}

	// Through the typed client: list, rotate, delete.
	c := client.New(e.srv.URL, e.token)
	ctx := context.Background()
	if _, err := c.SetSecret(ctx, "GLOBAL_KEY", "", apiSecret); err != nil {
		t.Fatal(err)
	}
	list, err := c.ListSecrets(ctx, "vision")
	if err != nil || len(list) != 2 || list[0].Name != "GLOBAL_KEY" || list[1].Version != 2 {
		t.Errorf("ListSecrets(vision) = %+v, %v", list, err)
	}
	code, b = e.do("GET", "/api/v1/secrets", e.token, nil)
	noValue("GET /api/v1/secrets", b)
	if code != 200 || strings.Contains(string(b), "value") {
		t.Errorf("GET /api/v1/secrets: %d %s", code, b)
	}
	keyFile := filepath.Join(t.TempDir(), "new.key")
	os.WriteFile(keyFile, bytes.Repeat([]byte{2}, secrets.KeySize), 0o600)
	res, err := c.RotateKey(ctx, keyFile)
	if err != nil || res.Resealed != 3 || res.OldKeyID == res.NewKeyID {
		t.Errorf("RotateKey = %+v, %v; want 3 resealed under a new key", res, err)
	}
	if err := c.DeleteSecret(ctx, "WANDB_KEY", "vision"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSecret(ctx, "WANDB_KEY", "vision"); !client.IsNotFound(err) {
		t.Errorf("second DeleteSecret: %v, want not found", err)
	}
}
