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
	var names []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		names = append(names, h.Name+"="+string(data))
	}
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
