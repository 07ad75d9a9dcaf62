// Package e2e drives the real trainyard binary: it builds it once, starts real
// servers on random ports in temporary directories, and talks to them through
// the CLI and the HTTP API, exactly as a user would.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/executor/kubernetes/kubetest"
	"trainyard/internal/executor/slurm/slurmtest"
)

var binary string // path of the built trainyard binary

func TestMain(m *testing.M) { os.Exit(runTests(m)) }

func runTests(m *testing.M) int {
	// TRAINYARD_E2E_BIN_DIR runs binaries built beforehand (trainyard and
	// trainyard-shim), which outlive the run: a profiler can name their
	// functions afterwards.
	dir := os.Getenv("TRAINYARD_E2E_BIN_DIR")
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "trainyard-e2e-bin-"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		// Both binaries, side by side, as an install puts them: the server
		// finds its supervisor beside itself.
		build := exec.Command("go", "build", "-o", dir+"/", "trainyard/cmd/trainyard", "trainyard/cmd/trainyard-shim")
		build.Stdout, build.Stderr = os.Stdout, os.Stderr
		if err := build.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build trainyard:", err)
			return 1
		}
	}
	defer removeKept()
	defer kubetest.Stop()  // the cluster the Kubernetes tests share, if one started
	defer slurmtest.Stop() // the Slurm cluster the Slurm tests share, if one started
	binary = filepath.Join(dir, "trainyard")
	if _, err := os.Stat(binary); err != nil {
		fmt.Fprintln(os.Stderr, "TRAINYARD_E2E_BIN_DIR:", err)
		return 1
	}
	defer func() {
		if strings.HasPrefix(filepath.Base(repo), "trainyard-e2e-repo-") {
			os.RemoveAll(repo) // the copy made for jobs to read
		}
	}()
	return m.Run()
}

// server is one running trainyard server.
type server struct {
	t      testing.TB
	dir    string // scratch dir: data/, home/, config
	data   string
	url    string
	token  string
	cmd    *exec.Cmd
	stderr *syncWriter // the server's stderr; read it with stderrText
	config string
	caFile string       // with TLS: the certificate the clients trust
	http   *http.Client // trusts caFile
}

type serverOpts struct {
	cpus   float64
	memory string
	gpus   int
	extra  string // more server config (pools, quotas, projects)
	tls    bool   // serve HTTPS with a self-signed certificate
	// defaults starts the server on its embedded defaults: an empty
	// config file (the inventory is this machine's).
	defaults bool
	// keep leaves the server's directory in place until the test binary
	// exits (keptDir), not only until the test ends.
	keep bool
}

// startServer starts a server with a declared inventory (default 2 CPUs,
// 8GiB, no GPUs), a 100ms retry backoff and a 1s stop grace.
func startServer(t testing.TB, o serverOpts) *server {
	t.Helper()
	if o.cpus == 0 {
		o.cpus = 2
	}
	if o.memory == "" {
		o.memory = "8GiB"
	}
	dir := jobReachableDir(t)
	if o.keep {
		dir = keptDir(t)
	}
	s := &server{t: t, dir: dir, data: filepath.Join(dir, "data"), config: filepath.Join(dir, "server.yaml"), http: http.DefaultClient}
	if o.tls {
		s.caFile, s.http = selfSigned(t, dir)
		o.extra += fmt.Sprintf("tls_cert: %s\ntls_key: %s\n", s.caFile, filepath.Join(dir, "key.pem"))
	}
	cfg := fmt.Sprintf("inventory: {cpus: %g, memory: %s, gpus: %d}\nretry_backoff: 100ms\ngrace: 1s\n%s", o.cpus, o.memory, o.gpus, o.extra)
	if o.defaults {
		cfg = ""
	}
	if err := os.WriteFile(s.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "home"), 0o755); err != nil {
		t.Fatal(err)
	}
	s.start()
	t.Cleanup(s.shutdown)
	return s
}

func (s *server) env() []string {
	env := []string{"HOME=" + filepath.Join(s.dir, "home"), "XDG_CONFIG_HOME=" + filepath.Join(s.dir, "home", ".config"),
		"PATH=" + os.Getenv("PATH"), "NO_COLOR=1"}
	if s.url != "" {
		env = append(env, "TRAINYARD_SERVER="+s.url, "TRAINYARD_TOKEN="+s.token)
	}
	if s.caFile != "" {
		env = append(env, "TRAINYARD_CA_FILE="+s.caFile)
	}
	return env
}

// start launches the server process and waits until it answers.
func (s *server) start() {
	t := s.t
	t.Helper()
	s.stderr = &syncWriter{w: &bytes.Buffer{}}
	os.Remove(filepath.Join(s.data, "server.json")) // a killed server leaves its own behind
	s.cmd = exec.Command(binary, "server", "--data", s.data, "--listen", "127.0.0.1:0", "--config", s.config)
	s.cmd.Env = s.env()
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var info struct{ URL string }
	waitFor(t, 30*time.Second, "server.json", func() bool {
		b, err := os.ReadFile(filepath.Join(s.data, "server.json"))
		return err == nil && json.Unmarshal(b, &info) == nil && info.URL != ""
	})
	s.url = info.URL
	tok, err := os.ReadFile(filepath.Join(s.data, "admin-token"))
	if err != nil {
		t.Fatalf("admin token not saved: %v", err)
	}
	s.token = strings.TrimSpace(string(tok))
	waitFor(t, 10*time.Second, "readyz", func() bool {
		resp, err := s.http.Get(s.url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// kill9 kills the server with SIGKILL, leaving its attempts running.
func (s *server) kill9() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.url = ""
}

// shutdown cancels what still runs and stops the server.
func (s *server) shutdown() {
	if s.url != "" {
		var list apitypes.JobList
		if s.api("GET", "/api/v1/jobs?state=queued,starting,running,held&limit=1000", nil, &list) == 200 {
			for _, j := range list.Jobs {
				s.api("POST", fmt.Sprintf("/api/v1/jobs/%d/cancel", j.ID), nil, nil)
			}
			deadline := time.Now().Add(15 * time.Second)
			for time.Now().Before(deadline) {
				var l apitypes.JobList
				if s.api("GET", "/api/v1/jobs?state=queued,starting,running&limit=1", nil, &l) != 200 || len(l.Jobs) == 0 {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	s.url = ""
	if s.cmd != nil && s.cmd.ProcessState == nil {
		s.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			s.cmd.Process.Kill()
			<-done
		}
	}
	s.killShims()
	if s.t.Failed() {
		s.t.Logf("server stderr:\n%s", s.stderrText())
	}
}

// killShims kills any attempt supervisor still alive under the data
// directory (a test that failed half-way may leave one), so no job outlives
// its test. The user's processes die with their supervisor.
func (s *server) killShims() {
	files, _ := filepath.Glob(filepath.Join(s.data, "runs", "*", "*", "shim.pid"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var pid int
		if _, err := fmt.Sscan(string(b), &pid); err != nil || pid <= 0 || !alive(pid) {
			continue
		}
		// A shim of its own names the attempt's directory; the shared
		// supervisor (which the claim says) ran this server's attempts.
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if bytes.Contains(cmdline, []byte(filepath.Dir(f))) || bytes.Contains(b, []byte("\nshared\n")) && bytes.HasSuffix(cmdline, []byte("\x00--shared\x00")) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// cli runs the trainyard CLI and returns stdout, stderr and the exit code.
func (s *server) cli(args ...string) (string, string, int) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = s.env()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		s.t.Fatalf("run trainyard %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// mustCLI runs the CLI and fails the test on a non-zero exit.
func (s *server) mustCLI(args ...string) string {
	s.t.Helper()
	out, errOut, code := s.cli(args...)
	if code != 0 {
		s.t.Fatalf("trainyard %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// api calls the HTTP API with the admin token; it decodes a JSON answer into
// out (when not nil) and returns the status code.
func (s *server) api(method, path string, body any, out any) int {
	s.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.url+path, r)
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.http.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if out != nil {
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, out); err != nil {
			s.t.Fatalf("%s %s: status %d, undecodable body %q: %v", method, path, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode
}

// submit posts a spec document and returns the new job.
func (s *server) submit(spec string, set ...string) apitypes.Job {
	s.t.Helper()
	b, _ := json.Marshal(spec)
	var job apitypes.Job
	code, body := s.rawAPI("POST", "/api/v1/jobs", apitypes.SubmitRequest{Spec: b, Set: set})
	if code != 201 {
		s.t.Fatalf("submit: status %d: %s", code, body)
	}
	if err := json.Unmarshal([]byte(body), &job); err != nil {
		s.t.Fatalf("submit: %v", err)
	}
	return job
}

func (s *server) job(id int64) apitypes.Job {
	s.t.Helper()
	var j apitypes.Job
	if code := s.api("GET", fmt.Sprintf("/api/v1/jobs/%d", id), nil, &j); code != 200 {
		s.t.Fatalf("get job %d: status %d", id, code)
	}
	return j
}

// waitState polls until the job reaches one of the states.
func (s *server) waitState(id int64, d time.Duration, states ...string) apitypes.Job {
	s.t.Helper()
	var j apitypes.Job
	waitFor(s.t, d, fmt.Sprintf("job %d to reach %v", id, states), func() bool {
		j = s.job(id)
		for _, st := range states {
			if j.State == st {
				return true
			}
		}
		return false
	})
	return j
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// alive reports whether a process exists (and is not a zombie).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// repoRoot is the repository's root, or, when the tests run as root and
// the checkout is closed to other users (jobs then run as their projects'
// own users), a copy of what jobs read from it: examples/ and sdk/ (and the
// simulator's workloads, which the README's tour replays).
func repoRoot() string {
	repoOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		repo = filepath.Dir(filepath.Dir(file))
		if os.Geteuid() != 0 || reachableByAll(repo) {
			return
		}
		dir, err := os.MkdirTemp("", "trainyard-e2e-repo-")
		if err == nil {
			err = os.Chmod(dir, 0o755)
		}
		for _, sub := range []string{"examples", "sdk", "internal/simulate/testdata"} {
			if err == nil {
				err = os.CopyFS(filepath.Join(dir, sub), os.DirFS(filepath.Join(repo, sub)))
			}
		}
		if err != nil {
			panic(fmt.Sprintf("copy examples where jobs can read them: %v", err))
		}
		filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil {
				mode := os.FileMode(0o644)
				if d.IsDir() {
					mode = 0o755
				}
				if st, err := os.Stat(p); err == nil && st.Mode()&0o100 != 0 {
					mode |= 0o111
				}
				os.Chmod(p, mode)
			}
			return nil
		})
		repo = dir
	})
	return repo
}

var (
	repoOnce sync.Once
	repo     string
)

// reachableByAll reports whether every directory from / to dir lets any
// user pass.
func reachableByAll(dir string) bool {
	for d := dir; ; d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil || st.Mode().Perm()&0o001 == 0 {
			return false
		}
		if d == "/" {
			return true
		}
	}
}

// sharedDir is a directory the test and its jobs exchange files through:
// any job's user may write it.
func sharedDir(t testing.TB) string {
	dir := filepath.Join(jobReachableDir(t), "shared")
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// jobReachableDir is t.TempDir made passable (not listable) by the users
// jobs run as when the tests run as root.
func jobReachableDir(t testing.TB) string {
	dir := t.TempDir()
	traversable(t, filepath.Dir(dir), dir)
	return dir
}

// traversable makes dirs passable (mode 0711) by the jobs' own users when
// the tests run as root; otherwise jobs run as the tests' user anyway.
func traversable(t testing.TB, dirs ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		return
	}
	for _, d := range dirs {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
}

// kept is the directory that keptDir's directories are made in, removed
// when the test binary exits (removeKept).
var kept struct {
	sync.Mutex
	root string
}

// keptDir is a new directory, reachable by jobs as jobReachableDir's, that
// is removed only when the test binary exits. A benchmark's servers keep
// their files in such directories: on ext4 without a journal (as some
// virtual machines run), every inode freed in the last half minute or so
// is skipped, one by one, by each inode allocated after it in its group,
// so removing one run's thousands of files would slow the next run's
// every mkdir and create, by up to a third of its throughput here.
func keptDir(t testing.TB) string {
	t.Helper()
	kept.Lock()
	defer kept.Unlock()
	if kept.root == "" {
		root, err := os.MkdirTemp("", "trainyard-e2e-kept-")
		if err != nil {
			t.Fatal(err)
		}
		kept.root = root
	}
	dir, err := os.MkdirTemp(kept.root, "")
	if err != nil {
		t.Fatal(err)
	}
	traversable(t, kept.root, dir)
	return dir
}

// removeKept removes every directory keptDir made.
func removeKept() {
	kept.Lock()
	defer kept.Unlock()
	if kept.root != "" {
		os.RemoveAll(kept.root)
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// stderrText is what the server has written to its stderr so far.
func (s *server) stderrText() string {
	s.stderr.mu.Lock()
	defer s.stderr.mu.Unlock()
	return s.stderr.w.(*bytes.Buffer).String()
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// grepData fails the test if any file under dir holds one of the values
// (the data directory: store files, logs, supervisor state, outputs).
func grepData(t testing.TB, dir string, values ...string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, v := range values {
			if bytes.Contains(b, []byte(v)) {
				t.Errorf("%s holds a secret value (%.6s…)", p, v)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("search %s: %v", dir, err)
	}
}
