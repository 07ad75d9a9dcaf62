package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// gitRun runs git in dir with a fixed identity.
func gitRun(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=e2e", "-c", "user.email=e2e@example.com",
		"-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

var packageLine = regexp.MustCompile(`code package (sha256:[0-9a-f]{64}) \((\d+) files, [^)]*\)`)

// submitContext submits spec with --context repo and returns the job id,
// the package hash and the CLI's stderr.
func submitContext(t *testing.T, s *server, spec, repo string) (int64, string, string) {
	t.Helper()
	out, errOut, code := s.cli("submit", spec, "--context", repo)
	if code != 0 {
		t.Fatalf("submit --context: exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	id, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatalf("submit printed %q, want the job id", out)
	}
	m := packageLine.FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("submit --context did not describe the package on stderr:\n%s", errOut)
	}
	return id, m[1], errOut
}

func TestCodeContext(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	s := startServer(t, serverOpts{})
	repo := t.TempDir()
	files := map[string]string{
		"run.sh":           "echo SCRIPT RAN in $(pwd -P)\necho code dir $(cd \"$TRAINYARD_CODE_DIR\" && pwd -P)\nfind . -type f | sort\n",
		"lib/helper.txt":   "helper\n",
		".gitignore":       "*.log\ncache/\n",
		".trainyardignore": "notes.md\n",
		"notes.md":         "tracked, but not for the job\n",
		"debug.log":        "ignored by git\n",
		"cache/blob.bin":   "ignored directory\n",
	}
	for name, content := range files {
		p := filepath.Join(repo, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitRun(t, repo, "init", "-q")
	gitRun(t, repo, "add", "-A")
	gitRun(t, repo, "commit", "-q", "-m", "initial")
	head := gitRun(t, repo, "rev-parse", "HEAD")

	spec := filepath.Join(t.TempDir(), "job.yaml") // outside the tree: it does not make it dirty
	if err := os.WriteFile(spec, []byte("name: coded\nentrypoint: [/bin/sh, run.sh]\nresources: {cpus: 1, memory: 256MiB}\npolicy: {timeout: 2m}\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// Twice: the same tree is the same package, uploaded once.
	id1, hash1, err1 := submitContext(t, s, spec, repo)
	if !strings.Contains(err1, "4 files") || !strings.Contains(err1, "commit "+head[:12]) || !strings.Contains(err1, "clean") ||
		strings.Contains(err1, "already uploaded") || !strings.Contains(err1, "code package uploaded") {
		t.Errorf("first submit's stderr:\n%s", err1)
	}
	id2, hash2, err2 := submitContext(t, s, spec, repo)
	if hash2 != hash1 {
		t.Errorf("the same tree packaged twice: %s then %s", hash1, hash2)
	}
	if !strings.Contains(err2, "already uploaded") {
		t.Errorf("second submit did not skip the upload:\n%s", err2)
	}

	for _, id := range []int64{id1, id2} {
		job := s.waitState(id, time.Minute, "succeeded", "failed")
		if job.State != "succeeded" {
			t.Fatalf("job %d ended %s (%s: %s)", id, job.State, job.Reason, job.Message)
		}
		if job.Code == nil || job.Code.SHA256 != hash1 || job.Code.Commit != head || job.Code.Dirty {
			t.Errorf("job %d records code %+v, want %s at %s, clean", id, job.Code, hash1, head)
		}
	}
	logs := s.mustCLI("logs", strconv.FormatInt(id1, 10))
	if !strings.Contains(logs, "SCRIPT RAN") {
		t.Fatalf("the script did not run:\n%s", logs)
	}
	var listed []string
	var ranIn, codeDir string
	for _, line := range strings.Split(logs, "\n") {
		switch {
		case strings.HasPrefix(line, "./"):
			listed = append(listed, strings.TrimPrefix(line, "./"))
		case strings.HasPrefix(line, "SCRIPT RAN in "):
			ranIn = strings.TrimPrefix(line, "SCRIPT RAN in ")
		case strings.HasPrefix(line, "code dir "):
			codeDir = strings.TrimPrefix(line, "code dir ")
		}
	}
	if want := []string{".gitignore", ".trainyardignore", "lib/helper.txt", "run.sh"}; strings.Join(listed, ",") != strings.Join(want, ",") {
		t.Errorf("the job's working directory holds %q, want exactly %q (no ignored files)", listed, want)
	}
	if ranIn == "" || ranIn != codeDir || !strings.HasSuffix(ranIn, filepath.Join("runs", strconv.FormatInt(id1, 10), "1", "work")) {
		t.Errorf("the job ran in %q with TRAINYARD_CODE_DIR %q; want both the attempt's work directory", ranIn, codeDir)
	}
	show := s.mustCLI("show", strconv.FormatInt(id1, 10))
	if !regexp.MustCompile(`Code:\s+` + hash1 + ` \(commit ` + head + `, clean\)`).MatchString(show) {
		t.Errorf("show lacks the code package line:\n%s", show)
	}

	// Changing a tracked file: a new package, recorded as dirty.
	if err := os.WriteFile(filepath.Join(repo, "lib", "helper.txt"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	id3, hash3, err3 := submitContext(t, s, spec, repo)
	if hash3 == hash1 || !strings.Contains(err3, "dirty") || strings.Contains(err3, "already uploaded") {
		t.Errorf("after changing a file: hash %s (before %s), stderr:\n%s", hash3, hash1, err3)
	}
	job := s.waitState(id3, time.Minute, "succeeded", "failed")
	if job.State != "succeeded" || job.Code == nil || !job.Code.Dirty || job.Code.Commit != head || job.Code.SHA256 != hash3 {
		t.Errorf("dirty job: state %s, code %+v; want succeeded, dirty, commit %s", job.State, job.Code, head)
	}
	if show := s.mustCLI("show", strconv.FormatInt(id3, 10)); !strings.Contains(show, "commit "+head+", dirty") {
		t.Errorf("show of the dirty job:\n%s", show)
	}
}
