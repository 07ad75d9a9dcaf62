package api_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/store/sqlite"
)

// A job that leaves links in its outputs (to a file the server can read,
// to a directory elsewhere) or replaces a recorded output by one gets
// neither served: artifacts get and checkpoint archives carry the job's
// own regular files only, and a fifo holds neither.
func TestArtifactsServeTheJobsOwnFilesOnly(t *testing.T) {
	e := newEnv(t)
	_, job := e.submit("name: hostile\nentrypoint: [\"true\"]\n")
	ctx := context.Background()
	j, err := e.st.GetJob(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := t.TempDir()
	victim := filepath.Join(elsewhere, "shadow")
	if err := os.WriteFile(victim, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := j.OutputDir
	ck := filepath.Join(out, "checkpoints", "c")
	for _, d := range []string{ck, filepath.Join(ck, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, data := range map[string]string{filepath.Join(out, "model.bin"): "weights", filepath.Join(ck, "sub", "w"): "w",
		filepath.Join(ck, domain.CheckpointMarker): ""} {
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Recorded while a regular file, replaced by a link since.
	for link, target := range map[string]string{filepath.Join(out, "output.txt"): victim, filepath.Join(ck, "leak"): victim,
		filepath.Join(ck, "etc"): elsewhere} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(out, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(ck, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.st.RecordManifest(ctx, domain.Manifest{JobID: j.ID, Attempt: 1, At: time.Now(), Files: []domain.ArtifactFile{
		{Path: "fifo", Size: 1}, {Path: "model.bin", Size: 7}, {Path: "output.txt", Size: 6}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.RecordCheckpoint(ctx, domain.CheckpointRecord{JobID: j.ID, Attempt: 1, Name: "c", Path: ck, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	get := func(path string) (int, []byte) {
		done := make(chan struct{})
		var code int
		var body []byte
		go func() { defer close(done); code, body = e.do("GET", path, e.token, nil) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("GET %s blocked (on the fifo?)", path)
		}
		return code, body
	}
	if code, b := get(fmt.Sprintf("/api/v1/jobs/%d/artifacts/model.bin", j.ID)); code != 200 || string(b) != "weights" {
		t.Errorf("model.bin: %d %q", code, b)
	}
	for _, p := range []string{"output.txt", "fifo"} {
		code, b := get(fmt.Sprintf("/api/v1/jobs/%d/artifacts/%s", j.ID, p))
		if code != 404 || strings.Contains(string(b), "secret") {
			t.Errorf("%s: %d %s, want 404 without its target's content", p, code, b)
		}
	}
	code, b := get(fmt.Sprintf("/api/v1/jobs/%d/checkpoints/c/archive", j.ID))
	if code != 200 {
		t.Fatalf("archive: %d %s", code, b)
	}
	names := tarEntries(t, b)
	if want := "[c/.complete= c/sub/w=w]"; fmt.Sprint(names) != want {
		t.Errorf("archive holds %v, want %s", names, want)
	}
}

// An outputs.path outside the project's directory is a 400 at the field,
// naming the directory allowed.
func TestOutputPathOutsideTheProjectIsAFieldError(t *testing.T) {
	e := newEnv(t)
	code, b := e.do("POST", "/api/v1/jobs", e.token, `{"spec": "name: a\nentrypoint: [\"true\"]\noutputs: {path: \"/{job_id}\"}\n"}`)
	if code != 400 {
		t.Fatalf("status %d: %s", code, b)
	}
	fields := decodeErr(t, b).Fields
	if len(fields) != 1 || fields[0].Path != "outputs.path" || !strings.Contains(fields[0].Message, filepath.Join("artifacts", "default")) {
		t.Errorf("fields = %+v, want outputs.path naming <artifacts>/default", fields)
	}
}

// Outputs are served from the executor (here the in-memory Fake, as a
// cluster executor serves them from object storage): a file whole and by
// range, and a checkpoint as a tar archive, with no output directory on
// this machine.
func TestArtifactsComeFromTheExecutor(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	fake := &executortest.Fake{}
	e := newEnvFiles(t, st, fake)
	_, job := e.submit("name: remote\nentrypoint: [\"true\"]\n")
	ctx := context.Background()
	j, err := e.st.GetJob(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	prog := executortest.Program{Steps: []executortest.Step{
		{File: &executortest.FileStep{Path: "model.bin", Data: "0123456789"}},
		{Checkpoint: &executortest.CheckpointStep{Name: "c", Files: map[string]string{"w": "weights", "sub/o": "opt"}, Complete: true}},
	}}
	if err := fake.Launch(ctx, executor.Launch{Ref: executor.Ref{JobID: j.ID, Attempt: 1}, Argv: prog.Argv(),
		Env: []string{"TRAINYARD_OUTPUT_DIR=" + j.OutputDir, "TRAINYARD_CHECKPOINT_DIR=" + j.OutputDir + "/checkpoints"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(j.OutputDir); err == nil {
		t.Fatal("the job's output directory is on disk: the test would not show the executor is used")
	}
	if err := e.st.RecordManifest(ctx, domain.Manifest{JobID: j.ID, Attempt: 1, At: time.Now(), Files: []domain.ArtifactFile{
		{Path: "model.bin", Size: 10, SHA256: "ab"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.RecordCheckpoint(ctx, domain.CheckpointRecord{JobID: j.ID, Attempt: 1, Name: "c", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("/api/v1/jobs/%d/artifacts/model.bin", j.ID)
	if code, b := e.do("GET", url, e.token, nil); code != 200 || string(b) != "0123456789" {
		t.Errorf("model.bin: %d %q", code, b)
	}
	if code, b := e.do("GET", url, e.token, nil, "Range", "bytes=3-5"); code != 206 || string(b) != "345" {
		t.Errorf("model.bin bytes 3-5: %d %q, want 206 \"345\"", code, b)
	}
	if code, b := e.do("GET", url, e.token, nil, "Range", "bytes=-2"); code != 206 || string(b) != "89" {
		t.Errorf("model.bin last 2 bytes: %d %q, want 206 \"89\"", code, b)
	}
	code, b := e.do("GET", fmt.Sprintf("/api/v1/jobs/%d/checkpoints/c/archive", j.ID), e.token, nil)
	if code != 200 {
		t.Fatalf("archive: %d %s", code, b)
	}
	names := tarEntries(t, b)
	if want := "[c/.complete= c/sub/o=opt c/w=weights]"; fmt.Sprint(names) != want {
		t.Errorf("archive holds %v, want %s", names, want)
	}
}

// tarEntries lists a tar stream's entries as "name=content".
func tarEntries(t *testing.T, b []byte) []string {
	t.Helper()
	var names []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		names = append(names, h.Name+"="+string(data))
	}
}
