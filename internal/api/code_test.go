package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trainyard/internal/api"
	"trainyard/internal/api/apitypes"
	blobfs "trainyard/internal/blob/fs"
	"trainyard/internal/domain"
	"trainyard/internal/logs"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
)

// codeEnv is an API server with a blob store, a code package limit of
// 64 KiB, and a viewer-only user.
type codeEnv struct {
	*env
	blobDir string
	viewer  string // token of a user who may not submit anywhere
}

func newCodeEnv(t *testing.T) *codeEnv {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	bs, err := blobfs.New(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	svc := service.New(service.Config{Store: st, ArtifactsRoot: filepath.Join(dir, "artifacts"),
		Logs: logs.Layout{Root: filepath.Join(dir, "runs")}, Blobs: bs, MaxCodeBytes: 64 << 10})
	token, err := svc.Identity.Bootstrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	admin := service.Principal{Subject: "admin", Role: "admin"}
	pool := domain.Pool{Name: "default", Nodes: []domain.Node{{Name: "n1", CPUs: 8, Memory: 32 << 30}}}
	if _, _, err := svc.Pools.PutPool(ctx, admin, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Pools.SetQuota(ctx, admin, domain.Quota{Project: "default", Pool: "default",
		Guaranteed: pool.Capacity(), MaxPriority: domain.PriorityUrgent}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api.Handler(api.Config{Service: svc, Ready: st.Ping}))
	t.Cleanup(func() { srv.Close(); st.Close(); bs.Close() })
	e := &codeEnv{env: &env{t: t, srv: srv, st: st, token: token}, blobDir: filepath.Join(dir, "blobs")}

	code, b := e.do("POST", "/api/v1/users", token, map[string]string{"name": "vic"})
	mustStatus(t, code, b, 201)
	code, b = e.do("POST", "/api/v1/users/vic/roles", token, map[string]string{"role": "viewer", "project": "default"})
	mustStatus(t, code, b, 201)
	code, b = e.do("POST", "/api/v1/tokens", token, apitypes.TokenRequest{User: "vic", Expires: "1d"})
	mustStatus(t, code, b, 201)
	var tok apitypes.Token
	json.Unmarshal(b, &tok)
	e.viewer = tok.Token
	return e
}

func mustStatus(t *testing.T, code int, b []byte, want int) {
	t.Helper()
	if code != want {
		t.Fatalf("status %d, want %d: %s", code, want, b)
	}
}

// put uploads body under hash with the given token.
func (e *codeEnv) put(hash, token string, body []byte) (int, []byte) {
	e.t.Helper()
	return e.do("PUT", "/api/v1/code/"+hash, token, string(body))
}

func (e *codeEnv) head(hash, token string) (int, http.Header) {
	e.t.Helper()
	req, _ := http.NewRequest("HEAD", e.srv.URL+"/api/v1/code/"+hash, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

func hashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func TestCodeUploadAndDedupe(t *testing.T) {
	e := newCodeEnv(t)
	body := []byte("pretend this is a tar.gz")
	hash := hashOf(body)
	if code, _ := e.head(hash, e.token); code != 404 {
		t.Fatalf("HEAD before upload: %d, want 404", code)
	}
	code, b := e.put(hash, e.token, body)
	mustStatus(t, code, b, 201)
	var got apitypes.CodePackage
	if err := json.Unmarshal(b, &got); err != nil || got != (apitypes.CodePackage{SHA256: hash, Size: int64(len(body)), Created: true}) {
		t.Fatalf("PUT answered %s", b)
	}
	stored, err := os.ReadFile(filepath.Join(e.blobDir, "code", "sha256", strings.TrimPrefix(hash, "sha256:")+".tar.gz"))
	if err != nil || !bytes.Equal(stored, body) {
		t.Fatalf("blob store holds %q (%v), want the body", stored, err)
	}
	code, h := e.head(hash, e.token)
	if code != 200 || h.Get("X-Trainyard-Code-Size") != fmt.Sprint(len(body)) {
		t.Errorf("HEAD after upload: %d size %q", code, h.Get("X-Trainyard-Code-Size"))
	}
	// The same package again is not stored twice.
	code, b = e.put(hash, e.token, body)
	mustStatus(t, code, b, 200)
	if json.Unmarshal(b, &got); got.Created {
		t.Errorf("second PUT answered created: %s", b)
	}
	// The upload is audited once.
	recs, err := e.st.ListAudit(context.Background(), store.AuditFilter{Target: "code/" + hash})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Action != "job.submit" || recs[0].Actor != "user:admin" {
		t.Errorf("audit records for the upload: %+v, want one job.submit by user:admin", recs)
	}
}

func TestCodeUploadRefusals(t *testing.T) {
	e := newCodeEnv(t)
	body := []byte("the real bytes")
	hash := hashOf(body)
	big := make([]byte, 65<<10)
	rand.Read(big)

	tests := map[string]struct {
		hash, token string
		body        []byte
		status      int
		code, msg   string
	}{
		"hash mismatch": {hash, "", []byte("other bytes"), 400, "hash_mismatch",
			"the uploaded bytes hash to " + hashOf([]byte("other bytes")) + ", not " + hash},
		"malformed hash":  {"sha256:xyz", "", body, 400, "invalid_request", "64 lowercase hex"},
		"other algorithm": {"md5:" + strings.Repeat("a", 32), "", body, 400, "invalid_request", "sha256"},
		"over the limit":  {hashOf(big), "", big, 413, "too_large", "64.0 KiB"},
		"may not submit":  {hash, "viewer", body, 403, "forbidden", "permission denied"},
		"unauthenticated": {hash, "none", body, 401, "unauthorized", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tok := map[string]string{"": e.token, "viewer": e.viewer, "none": ""}[tc.token]
			code, b := e.put(tc.hash, tok, tc.body)
			if code != tc.status {
				t.Fatalf("status %d, want %d: %s", code, tc.status, b)
			}
			if eb := decodeErr(t, b); eb.Code != tc.code || !strings.Contains(eb.Message+fmt.Sprint(eb.Fields), tc.msg) {
				t.Errorf("error %+v, want code %s mentioning %q", eb, tc.code, tc.msg)
			}
		})
	}
	// Nothing of the refused uploads was stored.
	var files []string
	filepath.WalkDir(e.blobDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if len(files) != 0 {
		t.Errorf("refused uploads left %q in the blob store", files)
	}
	if code, _ := e.head(hash, e.viewer); code != 403 {
		t.Errorf("HEAD by a viewer: %d, want 403", code)
	}
}

func TestSubmitWithCode(t *testing.T) {
	e := newCodeEnv(t)
	body := []byte("package")
	hash := hashOf(body)
	spec, _ := json.Marshal("name: coded\nentrypoint: [\"true\"]\n")
	ref := &apitypes.CodeRef{SHA256: hash, Commit: strings.Repeat("c", 40), Dirty: true}

	// A package the server does not have is refused, with the way out.
	code, b := e.do("POST", "/api/v1/jobs", e.token, apitypes.SubmitRequest{Spec: spec, Code: ref})
	if code != 400 || !strings.Contains(string(b), "code.sha256") || !strings.Contains(string(b), "upload it first") {
		t.Fatalf("submit with an unknown package: %d %s", code, b)
	}
	code, b = e.put(hash, e.token, body)
	mustStatus(t, code, b, 201)
	bad := *ref
	bad.Commit = "not-a-commit"
	code, b = e.do("POST", "/api/v1/jobs", e.token, apitypes.SubmitRequest{Spec: spec, Code: &bad})
	if code != 400 || !strings.Contains(string(b), "code.commit") {
		t.Fatalf("submit with a bad commit: %d %s", code, b)
	}

	code, b = e.do("POST", "/api/v1/jobs", e.token, apitypes.SubmitRequest{Spec: spec, Code: ref})
	mustStatus(t, code, b, 201)
	var j apitypes.Job
	json.Unmarshal(b, &j)
	if j.Code == nil || *j.Code != *ref {
		t.Errorf("submit answered code %+v, want %+v", j.Code, ref)
	}
	code, b = e.do("GET", fmt.Sprintf("/api/v1/jobs/%d", j.ID), e.token, nil)
	mustStatus(t, code, b, 200)
	var got apitypes.Job
	json.Unmarshal(b, &got)
	if got.Code == nil || *got.Code != *ref {
		t.Errorf("GET answered code %+v, want %+v", got.Code, ref)
	}
}

// A server without a blob store says so.
func TestCodeWithoutBlobStore(t *testing.T) {
	e := newEnv(t)
	body := []byte("x")
	code, b := e.do("PUT", "/api/v1/code/"+hashOf(body), e.token, string(body))
	if code != 501 || !strings.Contains(string(b), "without --context") {
		t.Errorf("PUT without a blob store: %d %s", code, b)
	}
}
