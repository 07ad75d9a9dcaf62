package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

// The sample trainer killed mid-run (its process, not the platform)
// resumes on its retry from the latest complete checkpoint: the step
// counter continues. Old checkpoints beyond checkpoint.keep are removed and
// the kept ones are registered.
func TestKilledTrainerResumesFromCheckpoint(t *testing.T) {
	s := startServer(t, serverOpts{})
	trainer := filepath.Join(repoRoot(), "examples", "trainer.py")
	job := s.submit(fmt.Sprintf(`name: killed
entrypoint: [python3, %s, --steps, "150", --sleep, "0.02", --checkpoint-every, "10", --report-every, "5"]
policy: {retries: 1, reentrant: true}
checkpoint: {keep: 2}
`, trainer))
	s.waitState(job.ID, 30*time.Second, "running")
	ckpts := filepath.Join(s.job(job.ID).OutputDir, "checkpoints")
	// Registered by the server, not only written: resume picks from what
	// the server registered, which lags the files on a loaded machine.
	waitFor(t, 30*time.Second, "checkpoint 30 registered", func() bool {
		var l apitypes.CheckpointList
		if code := s.api("GET", fmt.Sprintf("/api/v1/jobs/%d/checkpoints", job.ID), nil, &l); code != 200 {
			return false
		}
		for _, c := range l.Checkpoints {
			if c.Name >= "ckpt-00000030.json" {
				return true
			}
		}
		return false
	})
	s.killJobProcess(job.ID, 1)
	final := s.waitState(job.ID, 60*time.Second, "succeeded", "failed", "canceled")
	if final.State != "succeeded" {
		t.Fatalf("job ended %s (%s): %s", final.State, final.Reason, final.Message)
	}
	second := s.mustCLI("logs", "--attempt", "2", fmt.Sprint(job.ID))
	var resumed int
	for _, l := range strings.Split(second, "\n") {
		if _, err := fmt.Sscanf(l, "resumed from step %d", &resumed); err == nil {
			break
		}
	}
	if resumed < 30 {
		t.Fatalf("second attempt did not resume from a checkpoint at step 30 or later:\n%s", second)
	}
	if strings.Contains(second, `{"step": 5,`) {
		t.Errorf("second attempt restarted its step counter instead of continuing from %d", resumed)
	}
	out := s.mustCLI("checkpoints", "ls", fmt.Sprint(job.ID))
	if n := strings.Count(out, "\nckpt-"); n != 2 {
		t.Errorf("checkpoints ls lists %d checkpoints, want the 2 kept:\n%s", n, out)
	}
	m, _ := filepath.Glob(filepath.Join(ckpts, "ckpt-*.json"))
	if len(m) != 2 {
		t.Fatalf("%d checkpoint files on disk, want 2 (checkpoint.keep)", len(m))
	}
	dest := t.TempDir()
	name := filepath.Base(m[1])
	if out := s.mustCLI("checkpoints", "get", fmt.Sprint(job.ID), name, "--dest", dest); !strings.Contains(out, "1 file(s)") {
		t.Errorf("checkpoints get: %s", out)
	}
	if a, b := readFile(t, m[1]), readFile(t, filepath.Join(dest, name)); a == "" || a != b {
		t.Errorf("downloaded checkpoint %q, server has %q", b, a)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// killJobProcess sends SIGKILL to the main process of the job's attempt,
// as an out-of-memory killer or a crash would.
func (s *server) killJobProcess(id int64, attempt int) {
	s.t.Helper()
	b, err := os.ReadFile(filepath.Join(s.data, "runs", strconv.FormatInt(id, 10), strconv.Itoa(attempt), "child.pid"))
	if err != nil {
		s.t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		s.t.Fatalf("kill the job's process (pid %d): %v", pid, err)
	}
}

// Downloaded outputs match their manifest checksums; a file corrupted on
// the server is detected; the manifest carries the lineage.
func TestArtifactsDownloadVerified(t *testing.T) {
	s := startServer(t, serverOpts{extra: "data_roots: {default: [/data]}\n"})
	job := s.submit(`name: outputs
entrypoint: [sh, -c, 'mkdir -p $TRAINYARD_OUTPUT_DIR/eval && head -c 3000000 /dev/urandom > $TRAINYARD_OUTPUT_DIR/model.bin && echo acc=0.9 > $TRAINYARD_OUTPUT_DIR/eval/report.txt']
inputs: [{name: imagenet, path: /data/imagenet, version: v2}]
`)
	if j := s.waitState(job.ID, 30*time.Second, "succeeded", "failed"); j.State != "succeeded" {
		t.Fatalf("job %s: %s", j.State, j.Message)
	}
	id := fmt.Sprint(job.ID)
	var ls string
	waitFor(t, 20*time.Second, "the manifest", func() bool {
		out, _, code := s.cli("artifacts", "ls", id)
		ls = out
		return code == 0
	})
	if !strings.Contains(ls, "model.bin") || !strings.Contains(ls, "eval/report.txt") || !strings.Contains(ls, "input imagenet@v2") {
		t.Fatalf("artifacts ls:\n%s", ls)
	}
	dest := t.TempDir()
	out := s.mustCLI("artifacts", "get", id, "--dest", dest)
	if !strings.Contains(out, "downloaded 2 of 2") {
		t.Fatalf("artifacts get: %s", out)
	}
	outDir := s.job(job.ID).OutputDir
	for _, f := range []string{"model.bin", "eval/report.txt"} {
		a, _ := os.ReadFile(filepath.Join(outDir, f))
		b, _ := os.ReadFile(filepath.Join(dest, f))
		if len(a) == 0 || string(a) != string(b) {
			t.Errorf("%s: downloaded %d bytes differ from the %d on the server", f, len(b), len(a))
		}
	}
	// A succeeded job's outputs are read-only.
	if fi, err := os.Stat(filepath.Join(outDir, "model.bin")); err != nil || fi.Mode().Perm()&0o222 != 0 {
		t.Errorf("model.bin mode %v, want no write permission", fi.Mode())
	}
	// Corrupt a byte on the server: the download says so.
	p := filepath.Join(outDir, "model.bin")
	data, _ := os.ReadFile(p)
	data[1000] ^= 0xff
	if err := os.WriteFile(p, data, 0o444); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := s.cli("artifacts", "get", id, "model.bin", "--dest", t.TempDir())
	if code == 0 || !strings.Contains(errOut, "corrupt") {
		t.Errorf("download of a corrupted file: exit %d, stderr %q; want a corrupt error", code, errOut)
	}
	// Range requests work.
	var got []byte
	code = s.apiRaw("GET", "/api/v1/jobs/"+id+"/artifacts/eval/report.txt", map[string]string{"Range": "bytes=4-"}, &got)
	if code != 206 || string(got) != "0.9\n" {
		t.Errorf("ranged GET: %d %q, want 206 \"0.9\\n\"", code, got)
	}
}

// apiRaw sends a request with the admin token and extra headers and reads
// the raw body.
func (s *server) apiRaw(method, path string, headers map[string]string, body *[]byte) int {
	s.t.Helper()
	req, _ := http.NewRequest(method, s.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	*body, _ = io.ReadAll(resp.Body)
	return resp.StatusCode
}

// Where a job may write and read is the server's to say: outputs.path in
// the project's own directory under the artifact root, inputs under
// data_roots (never the data directory: such a config is refused at
// start); and what a job links into its outputs is neither listed nor
// served.
func TestArtifactPathPolicy(t *testing.T) {
	datasets := filepath.Join(t.TempDir(), "datasets")
	if err := os.MkdirAll(filepath.Join(datasets, "mnist"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, serverOpts{extra: fmt.Sprintf("data_roots: {default: [%s]}\n", datasets)})
	project := filepath.Join(s.data, "artifacts", "default")
	submit := func(spec string) (string, int) {
		f := filepath.Join(t.TempDir(), "job.yaml")
		if err := os.WriteFile(f, []byte(spec), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := s.cli("submit", f)
		return out + errOut, code
	}
	for spec, want := range map[string][]string{
		fmt.Sprintf("name: a\nentrypoint: [\"true\"]\noutputs: {path: \"%s\"}\n", filepath.Join(s.data, "runs", "{job_id}")): {"outputs.path", project},
		"name: a\nentrypoint: [\"true\"]\noutputs: {path: \"/{job_id}\"}\n":                                                  {"outputs.path", project},
		"name: a\nentrypoint: [\"true\"]\ninputs: [{name: d, path: /etc, version: v1}]\n":                                    {"inputs[0].path", datasets},
	} {
		out, code := submit(spec)
		if code == 0 {
			t.Errorf("submit accepted:\n%s\n%s", spec, out)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("submit refusal %q does not say %q", out, w)
			}
		}
	}
	var list apitypes.JobList
	if code := s.api("GET", "/api/v1/jobs", nil, &list); code != 200 || len(list.Jobs) != 0 {
		t.Errorf("refused submits left jobs: %d %+v", code, list.Jobs)
	}

	job := s.submit(fmt.Sprintf(`name: links
entrypoint: [sh, -c, 'echo mine > $TRAINYARD_OUTPUT_DIR/own.txt && ln -s /etc/passwd $TRAINYARD_OUTPUT_DIR/output.txt']
inputs: [{name: mnist, path: %s, version: v1}]
outputs: {path: "%s"}
`, filepath.Join(datasets, "mnist"), filepath.Join(project, "sweep", "{job_id}")))
	if j := s.waitState(job.ID, 30*time.Second, "succeeded", "failed"); j.State != "succeeded" {
		t.Fatalf("job %s: %s", j.State, j.Message)
	}
	if want := filepath.Join(project, "sweep", fmt.Sprint(job.ID)); s.job(job.ID).OutputDir != want {
		t.Errorf("output directory %s, want %s", s.job(job.ID).OutputDir, want)
	}
	id := fmt.Sprint(job.ID)
	var ls string
	waitFor(t, 20*time.Second, "the manifest", func() bool {
		out, _, code := s.cli("artifacts", "ls", id)
		ls = out
		return code == 0
	})
	if !strings.Contains(ls, "own.txt") || strings.Contains(ls, "output.txt") {
		t.Errorf("artifacts ls lists the job's own file only, got:\n%s", ls)
	}
	if out, errOut, code := s.cli("artifacts", "get", id, "output.txt", "--dest", t.TempDir()); code == 0 || strings.Contains(out+errOut, "root:") {
		t.Errorf("artifacts get of a link: exit %d\n%s%s", code, out, errOut)
	}
	if fi, err := os.Stat("/etc/passwd"); err != nil || fi.Mode().Perm()&0o200 == 0 {
		t.Errorf("/etc/passwd lost its write permission: %v %v", fi.Mode(), err)
	}

	// A data root in the data directory is refused at start.
	data := filepath.Join(t.TempDir(), "data")
	cfg := filepath.Join(t.TempDir(), "server.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("data_roots: {pools: {gpu: [%s]}}\n", filepath.Join(data, "blobs"))), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "server", "--data", data, "--listen", "127.0.0.1:0", "--config", cfg)
	cmd.Env = s.env()
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "data_roots.pools.gpu[0]") {
		t.Errorf("a server whose data_roots hold its data directory started or said: %v\n%s", err, out)
	}
}
