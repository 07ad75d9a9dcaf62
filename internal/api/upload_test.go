package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/api"
	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/executor/local"
	"trainyard/internal/logs"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
)

// uploadLimit is the per-file limit of uploadEnv's server.
const uploadLimit = 256 << 10

// uploadEnv is a server that reads and writes jobs' outputs on this disk
// (the local executor's reader), with a per-file upload limit of
// uploadLimit, and logs into logBuf.
type uploadEnv struct {
	*env
	svc    *service.Service
	files  executor.Files
	logBuf *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newUploadEnv(t *testing.T) *uploadEnv {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	buf := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	runs := filepath.Join(dir, "runs")
	files := local.NewReader(runs)
	svc := service.New(service.Config{Store: st, ArtifactsRoot: filepath.Join(dir, "artifacts"), Logs: logs.Layout{Root: runs},
		Files: files, MaxUploadBytes: uploadLimit, Logger: log})
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
	srv := httptest.NewServer(api.Handler(api.Config{Service: svc, Ready: st.Ping, Logger: log}))
	t.Cleanup(func() { srv.Close(); st.Close() })
	return &uploadEnv{env: &env{t: t, srv: srv, st: st, token: token}, svc: svc, files: files, logBuf: buf}
}

// job submits a job and records its first attempt as running; it returns
// the job and that attempt's job token.
func (e *uploadEnv) job() (domain.Job, string) {
	e.t.Helper()
	id := e.jobWithAttempt()
	j, err := e.st.GetJob(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return j, e.jobToken(id, 1)
}

func (e *uploadEnv) jobToken(id int64, attempt int) string {
	e.t.Helper()
	tok, err := e.svc.Identity.IssueJobToken(context.Background(), service.AttemptRef{JobID: id, Attempt: attempt})
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// end ends the running attempt n of job id as failed; with next, it
// starts attempt n+1 (running) as a retry does.
func (e *uploadEnv) end(id int64, n int, next bool) {
	e.t.Helper()
	now := time.Now()
	ended := &store.AttemptChange{Number: n, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptFailed}
	chs := []store.Change{{JobID: id, Move: domain.MoveFail(), At: now, Attempt: ended}}
	if next {
		chs = []store.Change{{JobID: id, Move: domain.MoveRequeue(), At: now, Attempt: ended},
			{JobID: id, Move: domain.MoveStart(), At: now, Attempt: &store.AttemptChange{Create: true, Number: n + 1, To: domain.AttemptRunning}},
			{JobID: id, Move: domain.MoveRun(), At: now}}
	}
	errs, err := e.st.Apply(context.Background(), chs)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, err := range errs {
		if err != nil {
			e.t.Fatalf("end attempt %d of job %d: %v", n, id, err)
		}
	}
}

// put uploads body to rel (written into the URL as is) for attempt n;
// chunked sends it without a Content-Length.
func (e *uploadEnv) put(id int64, n int, rel, token string, body []byte, chunked bool) (int, []byte) {
	e.t.Helper()
	var r io.Reader = bytes.NewReader(body)
	if chunked {
		r = io.MultiReader(r) // no length the client can see
	}
	req, err := http.NewRequest("PUT", fmt.Sprintf("%s/api/v1/jobs/%d/attempts/%d/outputs/%s", e.srv.URL, id, n, rel), r)
	if err != nil {
		e.t.Fatal(err)
	}
	if chunked && req.ContentLength != 0 {
		e.t.Fatalf("the request has a length (%d): it would not be sent chunked", req.ContentLength)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// treeFiles lists everything below dir that is not a directory, as
// slash-separated paths.
func treeFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return out
}

// A job's agent uploads a nested file (in one piece and chunked), replaces
// it, and the file is served back through the artifact route once the
// attempt's outputs are recorded, byte for byte and with the digest the
// upload answered.
func TestUploadOutputThenDownloadIt(t *testing.T) {
	e := newUploadEnv(t)
	j, tok := e.job()
	ctx := context.Background()
	first := randomBytes(t, 100<<10)
	code, b := e.put(j.ID, 1, "models/final/model.bin", tok, first, false)
	if code != 201 {
		t.Fatalf("upload: %d %s", code, b)
	}
	var got apitypes.OutputUpload
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if want := (apitypes.OutputUpload{Path: "models/final/model.bin", Size: int64(len(first)), SHA256: sha(first)}); got != want {
		t.Errorf("answer %+v, want %+v", got, want)
	}
	second := randomBytes(t, 70<<10)
	code, b = e.put(j.ID, 1, "models/final/model.bin", tok, second, true)
	if code != 201 || !strings.Contains(string(b), sha(second)) {
		t.Fatalf("replacing upload (chunked): %d %s, want 201 with the new digest", code, b)
	}
	code, b = e.put(j.ID, 1, "notes%20v1.txt", tok, []byte("hi"), false)
	if code != 201 || !strings.Contains(string(b), `"path":"notes v1.txt"`) {
		t.Errorf("escaped name: %d %s", code, b)
	}
	if files := treeFiles(t, j.OutputDir); fmt.Sprint(files) != "[models/final/model.bin notes v1.txt]" {
		t.Errorf("output dir holds %v; want the two files and no temporary ones", files)
	}
	// The attempt ends and its outputs are recorded, as the control loop
	// does it (executor.Seal on the executor's read side).
	o, err := e.files.Outputs(ctx, j.OutputDir)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := executor.Seal(ctx, o, false)
	o.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.RecordManifest(ctx, domain.Manifest{JobID: j.ID, Attempt: 1, At: time.Now(), Files: sealed.Files}); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", fmt.Sprintf("%s/api/v1/jobs/%d/artifacts/models/final/model.bin", e.srv.URL, j.ID), nil)
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(body, second) {
		t.Fatalf("download: %d, %d bytes, want 200 and the %d bytes uploaded last", resp.StatusCode, len(body), len(second))
	}
	if h := resp.Header.Get("X-Trainyard-SHA256"); h != sha(second) {
		t.Errorf("X-Trainyard-SHA256 = %s, want %s", h, sha(second))
	}
	if strings.Contains(e.logBuf.String(), tok) {
		t.Error("the server log holds the job token")
	}
}

// A checkpoint uploaded file by file, its marker last, is registered by
// the checkpoint-complete route with the digest of those files, and
// served back as an archive.
func TestUploadCheckpointThenCompleteIt(t *testing.T) {
	e := newUploadEnv(t)
	j, tok := e.job()
	files := map[string]string{"model.pt": "weights", "opt/state.pt": "optimizer"}
	for name, data := range files {
		if code, b := e.put(j.ID, 1, "checkpoints/step-100/"+name, tok, []byte(data), false); code != 201 {
			t.Fatalf("upload %s: %d %s", name, code, b)
		}
	}
	if code, b := e.put(j.ID, 1, "checkpoints/step-100/"+domain.CheckpointMarker, tok, nil, false); code != 201 {
		t.Fatalf("upload the marker: %d %s", code, b)
	}
	code, b := e.do("POST", fmt.Sprintf("/api/v1/jobs/%d/attempts/1/checkpoints", j.ID), tok, `{"name": "step-100"}`)
	if code != 200 {
		t.Fatalf("complete: %d %s", code, b)
	}
	var c apitypes.Checkpoint
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	// The digest of a directory checkpoint (executor.Outputs.Digest).
	lines := fmt.Sprintf("%s  %d  model.pt\n%s  %d  opt/state.pt\n", sha([]byte("weights")), 7, sha([]byte("optimizer")), 9)
	if c.Name != "step-100" || c.Files != 3 || c.Size != 16 || c.SHA256 != sha([]byte(lines)) {
		t.Errorf("registered %+v; want step-100, 3 files (with the marker), 16 bytes, sha256 %s", c, sha([]byte(lines)))
	}
	code, b = e.do("GET", fmt.Sprintf("/api/v1/jobs/%d/checkpoints/step-100/archive", j.ID), e.token, nil)
	if code != 200 {
		t.Fatalf("archive: %d %s", code, b)
	}
	if got, want := fmt.Sprint(tarEntries(t, b)), "[step-100/.complete= step-100/model.pt=weights step-100/opt/state.pt=optimizer]"; got != want {
		t.Errorf("archive holds %s, want %s", got, want)
	}
}

// Hostile paths are refused with a field error on path, before anything
// is written; links and files the job planted in its tree (as a job on
// the local executor can) are not written through, nor replaced.
func TestUploadRefusesHostilePaths(t *testing.T) {
	e := newUploadEnv(t)
	j, tok := e.job()
	if err := os.MkdirAll(filepath.Join(j.OutputDir, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"evil": outside, "victim": victim, "dangling": filepath.Join(outside, "new")} {
		if err := os.Symlink(target, filepath.Join(j.OutputDir, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(j.OutputDir, "plain"), []byte("p"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := treeFiles(t, j.OutputDir)
	long := strings.Repeat("a", 256)
	for _, tc := range []struct{ name, rel, says string }{
		{"dot-dot", "../x", ".."},
		{"dot-dot escaped", "%2E%2E/%2E%2E/x", ".."},
		{"dot-dot in an escaped slash", "a%2F..%2F..%2Fx", ".."},
		{"absolute", "/etc/x", "absolute"},
		{"doubled slash", "a//b", "empty component"},
		{"trailing slash", "a/", "empty component"},
		{"dot", "a/./b", `"."`},
		{"empty", "", "empty"},
		{"NUL", "a%00b", "NUL"},
		{"long component", long, "255"},
		{"long path", strings.Repeat("abcdefgh/", 460), "4096"},
		{"through a link outside", "evil/x", "symbolic link"},
		{"through a dangling link", "dangling/x", "symbolic link"},
		{"onto a link", "victim", "not a regular file"},
		{"onto a dangling link", "dangling", "not a regular file"},
		{"below a file", "plain/x", "regular file, not a directory"},
		{"onto a directory", "dir", "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, b := e.put(j.ID, 1, tc.rel, tok, []byte("pwned"), false)
			if code != 400 {
				t.Fatalf("%d %s, want 400", code, b)
			}
			f := decodeErr(t, b).Fields
			if len(f) != 1 || f[0].Path != "path" || !strings.Contains(f[0].Message, tc.says) {
				t.Errorf("fields %+v, want one on path saying %q", f, tc.says)
			}
		})
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("the file outside the tree was changed: %q", b)
	}
	if got := treeFiles(t, outside); fmt.Sprint(got) != "[victim]" {
		t.Errorf("outside the tree: %v, want only victim", got)
	}
	if got := treeFiles(t, j.OutputDir); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("the output tree changed: %v, was %v", got, before)
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(j.OutputDir), "x")); err == nil {
		t.Error("a file was written beside the output directory")
	}
}

// Only the attempt's own job token uploads, and only while the attempt is
// the job's latest and has not ended.
func TestUploadNeedsTheRunningAttemptsToken(t *testing.T) {
	e := newUploadEnv(t)
	j, tok1 := e.job()
	other, otherTok := e.job()
	data := []byte("x")
	rel := "out.txt"

	code, b := e.do("POST", "/api/v1/users", e.token, map[string]string{"name": "lee"})
	mustStatus(t, code, b, 201)
	code, b = e.do("POST", "/api/v1/users/lee/roles", e.token, map[string]string{"role": "lead", "project": "default"})
	mustStatus(t, code, b, 201)
	code, b = e.do("POST", "/api/v1/tokens", e.token, apitypes.TokenRequest{User: "lee", Expires: "1d"})
	mustStatus(t, code, b, 201)
	var lead apitypes.Token // reads the job, may not report for it
	json.Unmarshal(b, &lead)

	denied := countDenied(t, e.st)
	if code, b := e.put(j.ID, 1, rel, otherTok, data, false); code != 404 || !strings.Contains(string(b), "does not exist") {
		t.Errorf("another job's token: %d %s, want 404 as for a missing job", code, b)
	}
	if code, b := e.put(j.ID, 1, rel, lead.Token, data, false); code != 403 || !strings.Contains(string(b), "job token") {
		t.Errorf("a project lead's token: %d %s, want 403 naming the job token", code, b)
	}
	if got := countDenied(t, e.st); got != denied+2 {
		t.Errorf("%d refusals audited, want 2", got-denied)
	}
	if code, b := e.put(j.ID, 1, rel, "ty_nope", data, false); code != 401 {
		t.Errorf("an unknown token: %d %s, want 401", code, b)
	}
	// Attempt 1 failed; attempt 2 runs.
	e.end(j.ID, 1, true)
	tok2 := e.jobToken(j.ID, 2)
	if code, b := e.put(j.ID, 2, rel, tok1, data, false); code != 403 {
		t.Errorf("attempt 1's token for attempt 2: %d %s, want 403", code, b)
	}
	if code, b := e.put(j.ID, 1, rel, tok2, data, false); code != 403 {
		t.Errorf("attempt 2's token for attempt 1: %d %s, want 403", code, b)
	}
	if code, b := e.put(j.ID, 1, rel, tok1, data, false); code != 409 || !strings.Contains(string(b), "not its latest") {
		t.Errorf("the ended attempt 1: %d %s, want 409", code, b)
	}
	if code, b := e.put(j.ID, 3, rel, tok1, data, false); code != 403 {
		t.Errorf("attempt 3 with attempt 1's token: %d %s, want 403", code, b)
	}
	if code, b := e.put(j.ID, 2, rel, tok2, data, false); code != 201 {
		t.Errorf("attempt 2's own upload: %d %s", code, b)
	}
	// The job's last attempt ends.
	e.end(other.ID, 1, false)
	if code, b := e.put(other.ID, 1, rel, otherTok, data, false); code != 409 || !strings.Contains(string(b), "has ended") {
		t.Errorf("upload after the attempt ended: %d %s, want 409", code, b)
	}
	if files := treeFiles(t, other.OutputDir); len(files) != 0 {
		t.Errorf("the ended attempt's tree holds %v", files)
	}
	if files := treeFiles(t, j.OutputDir); fmt.Sprint(files) != "[out.txt]" {
		t.Errorf("the job's tree holds %v, want attempt 2's out.txt only", files)
	}
	if strings.Contains(e.logBuf.String(), tok1) || strings.Contains(e.logBuf.String(), otherTok) {
		t.Error("the server log holds a job token")
	}
}

// A file over the per-file limit is refused with 413, whether it says its
// length or is sent chunked, and leaves nothing behind; one at the limit
// is written.
func TestUploadTooLarge(t *testing.T) {
	e := newUploadEnv(t)
	j, tok := e.job()
	over := randomBytes(t, uploadLimit+1)
	for _, chunked := range []bool{false, true} {
		code, b := e.put(j.ID, 1, "big/model.bin", tok, over, chunked)
		if code != 413 || !strings.Contains(string(b), "limit") {
			t.Errorf("chunked %v: %d %s, want 413 naming the limit", chunked, code, b)
		}
		if files := treeFiles(t, j.OutputDir); len(files) != 0 {
			t.Errorf("chunked %v: left behind %v", chunked, files)
		}
	}
	if code, b := e.put(j.ID, 1, "big/model.bin", tok, over[:uploadLimit], true); code != 201 {
		t.Errorf("at the limit: %d %s, want 201", code, b)
	}
	if files := treeFiles(t, j.OutputDir); fmt.Sprint(files) != "[big/model.bin]" {
		t.Errorf("tree holds %v", files)
	}
}

// An upload cut off halfway (the client goes away) leaves neither the
// file nor its temporary file behind.
func TestUploadCutOffLeavesNothing(t *testing.T) {
	e := newUploadEnv(t)
	j, tok := e.job()
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("PUT", fmt.Sprintf("%s/api/v1/jobs/%d/attempts/1/outputs/part/model.bin", e.srv.URL, j.ID), pr)
	req.Header.Set("Authorization", "Bearer "+tok)
	done := make(chan error, 1)
	go func() {
		resp, err := e.srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	if _, err := pw.Write(randomBytes(t, 64<<10)); err != nil {
		t.Fatal(err)
	}
	// The server has begun writing the file: its temporary file is there.
	deadline := time.Now().Add(10 * time.Second)
	for len(treeFiles(t, j.OutputDir)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no temporary file appeared")
		}
		time.Sleep(5 * time.Millisecond)
	}
	pw.CloseWithError(io.ErrClosedPipe)
	<-done
	for {
		files := treeFiles(t, j.OutputDir)
		if len(files) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("left behind: %v", files)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A server whose executor's outputs it cannot write (here the in-memory
// Fake, which offers no executor.Writer) answers 501, not a 500.
func TestUploadWithoutAWritableExecutor(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvFiles(t, st, &executortest.Fake{})
	id := e.jobWithAttempt()
	u := &uploadEnv{env: e}
	code, b := u.put(id, 1, "x", e.token, []byte("x"), false)
	if code != 501 || decodeErr(t, b).Code != "not_implemented" {
		t.Errorf("%d %s, want 501", code, b)
	}
}
