package cli

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"trainyard/internal/api/apitypes"
)

// newOutputsHarness returns a harness whose server serves job 1's outputs
// from files (manifest path → content, names as given, however hostile)
// and its checkpoint "step-1" as archive.
func newOutputsHarness(t *testing.T, files map[string]string, archive []byte) *harness {
	t.Helper()
	var m apitypes.Manifest
	m.Job, m.Attempt = 1, 1
	for p, content := range files {
		sum := sha256.Sum256([]byte(content))
		m.Files = append(m.Files, apitypes.ArtifactFile{Path: p, Size: int64(len(content)), SHA256: hex.EncodeToString(sum[:])})
	}
	// No ServeMux: it would clean the ".." out of request paths, and a
	// hostile server serves whatever it is asked for.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case p == "/api/v1/jobs/1/artifacts":
			reply(w, http.StatusOK, m)
		case strings.HasPrefix(p, "/api/v1/jobs/1/artifacts/"):
			content, ok := files[strings.TrimPrefix(p, "/api/v1/jobs/1/artifacts/")]
			if !ok {
				content = "planted"
			}
			w.Write([]byte(content))
		case p == "/api/v1/jobs/1/checkpoints/step-1/archive":
			w.Write(archive)
		default:
			fail(w, http.StatusNotFound, "not_found", "no route "+p)
		}
	}))
	t.Cleanup(srv.Close)
	return &harness{t: t, srv: &fakeServer{t: t, srv: srv}, vars: map[string]string{
		EnvServer: srv.URL, EnvToken: testToken, "XDG_CONFIG_HOME": t.TempDir(), "NO_COLOR": "",
	}}
}

// tarOf is a tar stream of name → content, in the order given.
func tarOf(t *testing.T, entries ...[2]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Name: e[0], Typeflag: tar.TypeReg, Size: int64(len(e[1])), Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e[1]))
	}
	tw.Close()
	return buf.Bytes()
}

// sandbox is a directory holding box/dest (with dest/link and
// dest/step-1/link leading to outside) and outside, deep enough that
// "../../x" from dest lands in it.
type sandbox struct{ base, dest, outside string }

func newSandbox(t *testing.T) sandbox {
	t.Helper()
	base := t.TempDir()
	s := sandbox{base: base, dest: filepath.Join(base, "box", "dest"), outside: filepath.Join(base, "outside")}
	for _, d := range []string{filepath.Join(s.dest, "step-1"), s.outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []string{filepath.Join(s.dest, "link"), filepath.Join(s.dest, "step-1", "link")} {
		if err := os.Symlink(s.outside, l); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// outsideDest lists what is in the sandbox but not under dest.
func (s sandbox) outsideDest(t *testing.T) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(s.base, func(p string, d os.DirEntry, err error) error {
		if p == s.dest {
			return filepath.SkipDir
		}
		if p != s.base && p != s.outside && p != filepath.Dir(s.dest) {
			out = append(out, p)
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// The manifest's paths come from the server: those that are absolute,
// climb out with "..", or lead out through a link already in --dest are
// refused and named, and the others are downloaded.
func TestArtifactsGetStaysInsideDest(t *testing.T) {
	hostile := []string{"../escape.txt", "../../escape.txt", "/abs.txt", "sub/../../escape.txt", "link/evil.txt", "link/deeper/evil.txt"}
	files := map[string]string{"model/weights.bin": "weights"}
	for _, p := range hostile {
		files[p] = "planted"
	}
	h := newOutputsHarness(t, files, nil)
	s := newSandbox(t)
	r := h.run("artifacts", "get", "1", "--dest", s.dest)
	if r.code != ExitFailure {
		t.Errorf("exit %d, want %d", r.code, ExitFailure)
	}
	for _, p := range hostile {
		if !strings.Contains(r.stderr, p+": ") {
			t.Errorf("stderr does not report %s:\n%s", p, r.stderr)
		}
	}
	if !strings.Contains(r.stdout, "downloaded 1 of 7 file(s)") {
		t.Errorf("stdout = %q", r.stdout)
	}
	if got := s.outsideDest(t); len(got) != 0 {
		t.Errorf("written outside --dest: %v", got)
	}
	if _, err := os.Lstat(filepath.Join(s.dest, "abs.txt")); err == nil {
		t.Error("an absolute path was written under --dest")
	}
	if b, err := os.ReadFile(filepath.Join(s.dest, "model", "weights.bin")); err != nil || string(b) != "weights" {
		t.Errorf("model/weights.bin = %q, %v", b, err)
	}
}

// A file already in --dest with other contents is kept without --force,
// and replaced with it; a link there is replaced, not written through.
func TestArtifactsGetOverwritesOnlyWithForce(t *testing.T) {
	h := newOutputsHarness(t, map[string]string{"model.pt": "theirs", "same.txt": "same", "linked.pt": "theirs too"}, nil)
	s := newSandbox(t)
	target := filepath.Join(s.outside, "target")
	for p, content := range map[string]string{filepath.Join(s.dest, "model.pt"): "mine", filepath.Join(s.dest, "same.txt"): "same", target: "outside"} {
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(target, filepath.Join(s.dest, "linked.pt")); err != nil {
		t.Fatal(err)
	}
	read := func(p string) string { b, _ := os.ReadFile(p); return string(b) }

	r := h.mustRun(ExitFailure, "artifacts", "get", "1", "--dest", s.dest)
	if !strings.Contains(r.stderr, "model.pt: model.pt already exists in "+s.dest+"; pass --force") || !strings.Contains(r.stderr, "linked.pt: ") {
		t.Errorf("stderr = %q; want model.pt and linked.pt refused, naming --force", r.stderr)
	}
	if got := read(filepath.Join(s.dest, "model.pt")); got != "mine" {
		t.Errorf("model.pt = %q without --force, want it kept", got)
	}
	if want := "1 file already up to date, 0 downloaded into " + s.dest + ", 2 failed"; !strings.Contains(r.stdout, want) { // same.txt: already there
		t.Errorf("stdout = %q, want %q", r.stdout, want)
	}

	r = h.mustRun(ExitOK, "artifacts", "get", "1", "--dest", s.dest, "--force")
	if want := "1 file already up to date, 2 downloaded (16B) into " + s.dest + "; checksums verified\n"; r.stdout != want {
		t.Errorf("stdout = %q, want %q", r.stdout, want)
	}
	// Again: nothing to fetch, and it says so rather than "downloaded".
	r = h.mustRun(ExitOK, "artifacts", "get", "1", "--dest", s.dest)
	if want := "3 file(s) already up to date, 0 downloaded into " + s.dest + "; checksums verified\n"; r.stdout != want {
		t.Errorf("re-run: stdout = %q, want %q", r.stdout, want)
	}
	if got := read(filepath.Join(s.dest, "model.pt")); got != "theirs" {
		t.Errorf("model.pt = %q with --force, want the job's", got)
	}
	if fi, err := os.Lstat(filepath.Join(s.dest, "linked.pt")); err != nil || !fi.Mode().IsRegular() || read(filepath.Join(s.dest, "linked.pt")) != "theirs too" {
		t.Errorf("linked.pt is not the downloaded file: %v %v", fi, err)
	}
	if got := read(target); got != "outside" {
		t.Errorf("the link's target became %q", got)
	}
}

// checkpoints get shares the rules: every hostile name is refused, nothing
// lands outside --dest, and existing files are kept unless --force.
func TestCheckpointsGetStaysInsideDest(t *testing.T) {
	for _, name := range []string{"step-1/../../escape.bin", "/abs.bin", "../escape.bin", "step-1/link/evil.bin"} {
		t.Run(name, func(t *testing.T) {
			h := newOutputsHarness(t, nil, tarOf(t, [2]string{"step-1/ok.bin", "ok"}, [2]string{name, "planted"}))
			s := newSandbox(t)
			r := h.mustRun(ExitFailure, "checkpoints", "get", "1", "step-1", "--dest", s.dest)
			if !strings.Contains(r.stderr, "step-1/link") && !strings.Contains(r.stderr, "not a relative path inside") {
				t.Errorf("stderr = %q", r.stderr)
			}
			if got := s.outsideDest(t); len(got) != 0 {
				t.Errorf("written outside --dest: %v", got)
			}
		})
	}

	h := newOutputsHarness(t, nil, tarOf(t, [2]string{"step-1/ok.bin", "theirs"}))
	s := newSandbox(t)
	mine := filepath.Join(s.dest, "step-1", "ok.bin")
	os.WriteFile(mine, []byte("mine"), 0o644)
	r := h.mustRun(ExitFailure, "checkpoints", "get", "1", "step-1", "--dest", s.dest)
	if b, _ := os.ReadFile(mine); string(b) != "mine" || !strings.Contains(r.stderr, "--force") {
		t.Errorf("without --force: file %q, stderr %q; want it kept and --force named", b, r.stderr)
	}
	h.mustRun(ExitOK, "checkpoints", "get", "1", "step-1", "--dest", s.dest, "--force")
	if b, _ := os.ReadFile(mine); string(b) != "theirs" {
		t.Errorf("with --force: %q", b)
	}
}
