package service_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/secrets"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite/sqlitetest"
)

const secretValue = "sk-live-0123456789abcdef"

type secretEnv struct {
	svc  *service.Service
	st   store.Store
	ring *secrets.Keyring
	dir  string
}

func newSecretEnv(t *testing.T) secretEnv {
	t.Helper()
	dir := t.TempDir()
	st := sqlitetest.Open(t, dir)
	k, err := secrets.NewKey(bytes.Repeat([]byte{1}, secrets.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	ring := secrets.NewKeyring(k)
	svc := service.New(service.Config{Store: st, Keyring: ring, ArtifactsRoot: filepath.Join(dir, "artifacts"),
		Clock: clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))})
	return secretEnv{svc: svc, st: st, ring: ring, dir: dir}
}

func (e secretEnv) set(t *testing.T, project, name, value string) service.SecretInfo {
	t.Helper()
	info, err := e.svc.Secrets.SetSecret(context.Background(), admin, project, name, []byte(value))
	if err != nil {
		t.Fatalf("SetSecret(%q, %q): %v", project, name, err)
	}
	return info
}

// noValue fails when any of texts contains the secret value.
func noValue(t *testing.T, what string, texts ...string) {
	t.Helper()
	for _, s := range texts {
		if strings.Contains(s, secretValue) {
			t.Errorf("%s shows the secret value: %s", what, s)
		}
	}
}

func TestSetSecretValidation(t *testing.T) {
	e := newSecretEnv(t)
	tests := map[string]struct {
		project, name, value string
		wantPath             string
	}{
		"lowercase name":  {"", "wandb_key", secretValue, "name"},
		"leading digit":   {"", "1KEY", secretValue, "name"},
		"reserved prefix": {"", "TRAINYARD_TOKEN", secretValue, "name"},
		"bad project":     {"Vision", "KEY", secretValue, "project"},
		"too short":       {"", "KEY", "abc", "value"},
		"empty":           {"", "KEY", "", "value"},
		"NUL byte":        {"", "KEY", "abc\x00def", "value"},
		"too long":        {"", "KEY", strings.Repeat("x", service.MaxSecretLen+1), "value"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := e.svc.Secrets.SetSecret(context.Background(), admin, tc.project, tc.name, []byte(tc.value))
			if got := fieldPaths(t, err); !slices.Contains(got, tc.wantPath) {
				t.Errorf("field errors %v, want one at %q", got, tc.wantPath)
			}
			if tc.value != "" {
				noValue(t, "the error", err.Error())
			}
		})
	}
}

func TestSetSecretVersionsAndList(t *testing.T) {
	e := newSecretEnv(t)
	if v := e.set(t, "", "HF_TOKEN", secretValue).Version; v != 1 {
		t.Errorf("first set: version %d, want 1", v)
	}
	info := e.set(t, "", "HF_TOKEN", secretValue+"-2")
	if info.Version != 2 || info.CreatedBy != "user:admin" || info.KeyID != e.ring.Current().ID() {
		t.Errorf("second set = %+v, want version 2 by user:admin with the current key", info)
	}
	e.set(t, "vision", "HF_TOKEN", secretValue)
	e.set(t, "vision", "WANDB", secretValue)
	e.set(t, "audio", "OTHER", secretValue)

	type row struct {
		project, name string
		version       int
		shadowed      bool
	}
	rows := func(infos []service.SecretInfo) []row {
		var out []row
		for _, i := range infos {
			out = append(out, row{i.Project, i.Name, i.Version, i.Shadowed})
		}
		return out
	}
	all, err := e.svc.Secrets.ListSecrets(context.Background(), admin, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []row{{"", "HF_TOKEN", 2, false}, {"audio", "OTHER", 1, false}, {"vision", "HF_TOKEN", 1, false}, {"vision", "WANDB", 1, false}}
	if got := rows(all); !slices.Equal(got, want) {
		t.Errorf("ListSecrets all = %v, want %v", got, want)
	}
	vision, err := e.svc.Secrets.ListSecrets(context.Background(), admin, "vision")
	if err != nil {
		t.Fatal(err)
	}
	want = []row{{"", "HF_TOKEN", 2, true}, {"vision", "HF_TOKEN", 1, false}, {"vision", "WANDB", 1, false}}
	if got := rows(vision); !slices.Equal(got, want) {
		t.Errorf("ListSecrets vision = %v, want %v", got, want)
	}
}

func TestResolveSecretsProjectShadowsGlobal(t *testing.T) {
	e := newSecretEnv(t)
	ctx := context.Background()
	e.set(t, "", "TOKEN", "global-value")
	e.set(t, "", "SHARED", "shared-value")
	e.set(t, "vision", "TOKEN", "vision-value-1")
	e.set(t, "vision", "TOKEN", "vision-value-2")
	env, values, err := e.svc.Secrets.ResolveSecrets(ctx, "vision", []string{"TOKEN", "SHARED"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"TOKEN=vision-value-2", "SHARED=shared-value"}; !slices.Equal(env, want) {
		t.Errorf("env = %q, want %q", env, want)
	}
	if want := []string{"vision-value-2", "shared-value"}; !slices.Equal(values, want) {
		t.Errorf("values = %q, want %q", values, want)
	}
	env, _, err = e.svc.Secrets.ResolveSecrets(ctx, "audio", []string{"TOKEN"})
	if err != nil || !slices.Equal(env, []string{"TOKEN=global-value"}) {
		t.Errorf("audio sees %q, %v; want the global value", env, err)
	}
	_, _, err = e.svc.Secrets.ResolveSecrets(ctx, "audio", []string{"MISSING"})
	if !errors.Is(err, domain.ErrNotFound) || !strings.Contains(err.Error(), "trainyard secret set MISSING") {
		t.Errorf("missing secret: err = %v, want ErrNotFound saying how to set it", err)
	}
}

func TestResolveSecretsWrongKeyNamesKeys(t *testing.T) {
	e := newSecretEnv(t)
	e.set(t, "", "TOKEN", secretValue)
	other, _ := secrets.NewKey(bytes.Repeat([]byte{2}, secrets.KeySize))
	svc := service.New(service.Config{Store: e.st, Keyring: secrets.NewKeyring(other)})
	_, _, err := svc.Secrets.ResolveSecrets(context.Background(), "vision", []string{"TOKEN"})
	if !errors.Is(err, secrets.ErrWrongKey) || !strings.Contains(err.Error(), e.ring.Current().ID()) || !strings.Contains(err.Error(), other.ID()) {
		t.Errorf("err = %v, want ErrWrongKey naming both keys", err)
	}
	if err := svc.Secrets.CheckSecretKeys(context.Background()); !errors.Is(err, secrets.ErrWrongKey) || !strings.Contains(err.Error(), e.ring.Current().ID()) {
		t.Errorf("CheckSecretKeys = %v, want ErrWrongKey naming the sealing key", err)
	}
	if err := e.svc.Secrets.CheckSecretKeys(context.Background()); err != nil {
		t.Errorf("CheckSecretKeys with the right key = %v", err)
	}
}

func TestSubmitChecksSecretsExist(t *testing.T) {
	e := newSecretEnv(t)
	ctx := context.Background()
	spec := "name: s\nproject: vision\nentrypoint: [\"true\"]\nsecrets: [GLOBAL_ONE, VISION_ONE, MISSING]\n"
	_, _, err := e.svc.Jobs.Submit(ctx, admin, service.SubmitInput{Doc: []byte(spec)})
	var fe domain.FieldErrors
	if !errors.As(err, &fe) {
		t.Fatalf("Submit = %v, want field errors", err)
	}
	var paths []string
	for _, f := range fe {
		paths = append(paths, f.Path)
		if !strings.Contains(f.Message, "trainyard secret set") {
			t.Errorf("%s: %q does not say how to create the secret", f.Path, f.Message)
		}
	}
	if want := []string{"secrets[0]", "secrets[1]", "secrets[2]"}; !slices.Equal(paths, want) {
		t.Errorf("paths = %v, want %v", paths, want)
	}
	e.set(t, "", "GLOBAL_ONE", secretValue)
	e.set(t, "vision", "VISION_ONE", secretValue)
	e.set(t, "audio", "MISSING", secretValue) // another project's secret does not count
	_, _, err = e.svc.Jobs.Submit(ctx, admin, service.SubmitInput{Doc: []byte(spec)})
	if got := fieldPaths(t, err); !slices.Equal(got, []string{"secrets[2]"}) {
		t.Errorf("after setting two: field errors %v, want only secrets[2]", got)
	}
}

func TestDeleteSecret(t *testing.T) {
	e := newSecretEnv(t)
	ctx := context.Background()
	e.set(t, "vision", "TOKEN", secretValue)
	e.set(t, "", "TOKEN", "global-value")
	if err := e.svc.Secrets.DeleteSecret(ctx, admin, "vision", "TOKEN"); err != nil {
		t.Fatal(err)
	}
	// The global one now shows through.
	env, _, err := e.svc.Secrets.ResolveSecrets(ctx, "vision", []string{"TOKEN"})
	if err != nil || !slices.Equal(env, []string{"TOKEN=global-value"}) {
		t.Errorf("after delete: %q, %v; want the global value", env, err)
	}
	err = e.svc.Secrets.DeleteSecret(ctx, admin, "vision", "TOKEN")
	if !errors.Is(err, domain.ErrNotFound) || !strings.Contains(err.Error(), "trainyard secret ls --project vision") {
		t.Errorf("second delete: err = %v, want ErrNotFound with a hint", err)
	}
}

func TestSecretsNeedPermission(t *testing.T) {
	e := newSecretEnv(t)
	ctx := context.Background()
	nobody := service.Principal{Subject: "bob"}
	if _, err := e.svc.Secrets.SetSecret(ctx, nobody, "vision", "TOKEN", []byte(secretValue)); !errors.Is(err, domain.ErrForbidden) {
		t.Errorf("SetSecret by a stranger: err = %v, want ErrForbidden", err)
	}
	if err := e.svc.Secrets.DeleteSecret(ctx, nobody, "", "TOKEN"); !errors.Is(err, domain.ErrForbidden) {
		t.Errorf("DeleteSecret by a stranger: err = %v, want ErrForbidden", err)
	}
	if _, err := e.svc.Secrets.RotateMasterKey(ctx, nobody, "/nonexistent"); !errors.Is(err, domain.ErrForbidden) {
		t.Errorf("RotateMasterKey by a stranger: err = %v, want ErrForbidden", err)
	}
	if all, err := e.svc.Secrets.ListSecrets(ctx, admin, ""); err != nil || len(all) != 0 {
		t.Errorf("a refused set stored something: %v, %v", all, err)
	}
}

func writeKeyFile(t *testing.T, dir string, fill byte, mode os.FileMode) (string, *secrets.Key) {
	t.Helper()
	raw := bytes.Repeat([]byte{fill}, secrets.KeySize)
	path := filepath.Join(dir, "new.key")
	if err := os.WriteFile(path, raw, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
	k, _ := secrets.NewKey(raw)
	return path, k
}

func TestRotateMasterKey(t *testing.T) {
	e := newSecretEnv(t)
	ctx := context.Background()
	e.set(t, "", "A", "value-a-1")
	e.set(t, "", "A", "value-a-2")
	e.set(t, "vision", "B", "value-b")
	old := e.ring.Current()

	loose, _ := writeKeyFile(t, t.TempDir(), 3, 0o644)
	if _, err := e.svc.Secrets.RotateMasterKey(ctx, admin, loose); !errors.Is(err, secrets.ErrKeyFileMode) && !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("rotate to a world-readable key: err = %v, want a permissions error", err)
	}
	same := filepath.Join(t.TempDir(), "same.key")
	os.WriteFile(same, bytes.Repeat([]byte{1}, secrets.KeySize), 0o600)
	if _, err := e.svc.Secrets.RotateMasterKey(ctx, admin, same); !errors.Is(err, domain.ErrInvalid) {
		t.Errorf("rotate to the key in use: err = %v, want ErrInvalid", err)
	}

	path, next := writeKeyFile(t, t.TempDir(), 4, 0o600)
	res, err := e.svc.Secrets.RotateMasterKey(ctx, admin, path)
	if err != nil {
		t.Fatal(err)
	}
	if res.OldKeyID != old.ID() || res.NewKeyID != next.ID() || res.Resealed != 3 {
		t.Errorf("result = %+v, want %s → %s, 3 resealed", res, old.ID(), next.ID())
	}
	if e.ring.Current().ID() != next.ID() {
		t.Errorf("the server still uses key %s", e.ring.Current().ID())
	}
	env, _, err := e.svc.Secrets.ResolveSecrets(ctx, "vision", []string{"A", "B"})
	if err != nil || !slices.Equal(env, []string{"A=value-a-2", "B=value-b"}) {
		t.Errorf("after rotation: %q, %v", env, err)
	}
	list, _ := e.svc.Secrets.ListSecrets(ctx, admin, "")
	for _, i := range list {
		if i.KeyID != next.ID() {
			t.Errorf("%s/%s still sealed with %s", i.Project, i.Name, i.KeyID)
		}
	}
	// The old key opens nothing any more.
	oldSvc := service.New(service.Config{Store: e.st, Keyring: secrets.NewKeyring(old)})
	if _, _, err := oldSvc.Secrets.ResolveSecrets(ctx, "", []string{"A"}); !errors.Is(err, secrets.ErrWrongKey) {
		t.Errorf("old key after rotation: err = %v, want ErrWrongKey", err)
	}
	// Repeating the rotation with the new key, from a server still holding
	// the old key (restarted before its config changed), is safe.
	if _, err := oldSvc.Secrets.RotateMasterKey(ctx, admin, path); err != nil {
		t.Errorf("repeated rotation: %v", err)
	}
	// New values are sealed with the new key.
	if info := e.set(t, "", "C", "value-c"); info.KeyID != next.ID() {
		t.Errorf("set after rotation sealed with %s, want %s", info.KeyID, next.ID())
	}
}

func TestSecretAuditRecordsHoldNoValue(t *testing.T) {
	e := newSecretEnv(t)
	ctx := context.Background()
	e.set(t, "vision", "TOKEN", secretValue)
	e.set(t, "vision", "TOKEN", secretValue+"x")
	if err := e.svc.Secrets.DeleteSecret(ctx, admin, "vision", "TOKEN"); err != nil {
		t.Fatal(err)
	}
	path, _ := writeKeyFile(t, t.TempDir(), 9, 0o600)
	if _, err := e.svc.Secrets.RotateMasterKey(ctx, admin, path); err != nil {
		t.Fatal(err)
	}
	all, err := e.st.ListAudit(ctx, store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, r := range all {
		noValue(t, "audit record", r.Before, r.After, r.Detail, r.Target)
		if strings.HasPrefix(r.Target, "secret") {
			actions = append(actions, r.Action+" "+r.Target)
		}
	}
	want := []string{"secret.write secret/vision/TOKEN", "secret.write secret/vision/TOKEN", "secret.write secret/vision/TOKEN", "secret.rotate secrets"}
	if !slices.Equal(actions, want) {
		t.Errorf("audit records %q, want %q", actions, want)
	}
}
