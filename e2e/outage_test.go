package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

// privatePostgres is a PostgreSQL server of the test's own, which it may
// stop and start: the shared one (TRAINYARD_TEST_POSTGRES) must keep
// serving the other tests.
type privatePostgres struct {
	t     *testing.T
	bin   string // the directory of initdb, pg_ctl, postgres
	data  string
	log   string
	port  int
	sock  string
	runAs string // the unprivileged user it runs as when the test is root ("" otherwise)
}

// startPrivatePostgres initializes a cluster in a temporary directory and
// starts it on a free port, as an unprivileged user when the test runs as
// root (PostgreSQL refuses root). Without the binaries the test is skipped,
// except under CI (CI=true), where it fails.
func startPrivatePostgres(t *testing.T) *privatePostgres {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(bins) == 0 {
		msg := "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin (apt-get install postgresql)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + ": CI must run the store outage test")
		}
		t.Skip(msg)
	}
	slices.SortFunc(bins, func(a, b string) int { // the newest major version
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(a))))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(b))))
		return vb - va
	})
	dir := jobReachableDir(t)
	p := &privatePostgres{t: t, bin: filepath.Dir(bins[0]), data: filepath.Join(dir, "pgdata"), log: filepath.Join(dir, "pg.log"), sock: dir}
	_, portText, _ := strings.Cut(freePort(t), ":")
	p.port, _ = strconv.Atoi(portText)
	if os.Geteuid() == 0 {
		p.runAs = "nobody"
		u, err := user.Lookup(p.runAs)
		if err != nil {
			t.Fatalf("look up user %s to run PostgreSQL as: %v", p.runAs, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	p.run("initdb", "-D", p.data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8", "--locale", "C")
	p.start()
	t.Cleanup(func() {
		if p.running() {
			p.pgctl("stop", "-m", "immediate")
		}
		if t.Failed() {
			b, _ := os.ReadFile(p.log)
			t.Logf("PostgreSQL log:\n%s", b)
		}
	})
	return p
}

// dsn is the URL of the cluster's postgres database.
func (p *privatePostgres) dsn() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
}

func (p *privatePostgres) start() {
	p.t.Helper()
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c fsync=off", p.port, p.sock)
	p.pgctl("start", "-l", p.log, "-o", opts)
}

// stop stops the server as an operator would: fast shutdown, which ends
// every session and refuses new ones.
func (p *privatePostgres) stop() { p.pgctl("stop", "-m", "fast") }

func (p *privatePostgres) running() bool {
	_, err := os.Stat(filepath.Join(p.data, "postmaster.pid"))
	return err == nil
}

func (p *privatePostgres) pgctl(args ...string) {
	p.t.Helper()
	p.run("pg_ctl", append([]string{"-D", p.data, "-w", "-t", "60"}, args...)...)
}

// run runs one of the server's programs as p.runAs.
func (p *privatePostgres) run(prog string, args ...string) {
	p.t.Helper()
	argv := append([]string{filepath.Join(p.bin, prog)}, args...)
	if p.runAs != "" {
		argv = append([]string{"runuser", "-u", p.runAs, "--"}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LC_ALL=C", "HOME=" + p.sock}
	cmd.Dir = p.sock
	if out, err := cmd.CombinedOutput(); err != nil {
		p.t.Fatalf("%s %s: %v\n%s", prog, strings.Join(args, " "), err, out)
	}
}

// startCLI starts the trainyard CLI without waiting for it.
func (s *server) startCLI(args ...string) (*exec.Cmd, *syncWriter, *syncWriter) {
	s.t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = s.env()
	out, errb := &syncWriter{w: &bytes.Buffer{}}, &syncWriter{w: &bytes.Buffer{}}
	cmd.Stdout, cmd.Stderr = out, errb
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, out, errb
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.(*bytes.Buffer).String()
}

// With its PostgreSQL stopped under a running server, the API answers 503
// store_unavailable with Retry-After (never 500), /readyz agrees, and the
// CLI retries what it may repeat, saying so; once PostgreSQL is back the
// waiting commands complete, a keyed submit creates its job once, and
// every job stored before is there in its state.
func TestStoreOutageIs503AndTheCLIRetries(t *testing.T) {
	pg := startPrivatePostgres(t)
	s := startServer(t, serverOpts{extra: fmt.Sprintf("store: %q\n", pg.dsn())})
	ok := s.submit("name: ok\nentrypoint: [\"true\"]\n")
	bad := s.submit("name: bad\nentrypoint: [\"false\"]\n")
	s.waitState(ok.ID, 30*time.Second, "succeeded")
	s.waitState(bad.ID, 30*time.Second, "failed")
	jobsNow := func() string {
		var list apitypes.JobList
		if code := s.api("GET", "/api/v1/jobs?limit=100", nil, &list); code != 200 {
			t.Fatalf("list jobs: %d", code)
		}
		var b strings.Builder
		for _, j := range list.Jobs {
			fmt.Fprintf(&b, "%d %s %s %s\n", j.ID, j.Name, j.State, j.Reason)
		}
		return b.String()
	}
	before := jobsNow()

	pg.stop()
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"GET", fmt.Sprintf("/api/v1/jobs/%d", ok.ID), nil},
		{"GET", "/api/v1/jobs", nil},
		{"POST", "/api/v1/jobs", apitypes.SubmitRequest{Spec: json.RawMessage(`"name: during\nentrypoint: [\"true\"]\n"`)}},
		{"GET", "/api/v1/pools", nil},
	} {
		var b []byte
		if c.body != nil {
			b, _ = json.Marshal(c.body)
		}
		req, _ := http.NewRequest(c.method, s.url+c.path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+s.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", c.method, c.path, err)
		}
		var e apitypes.Error
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || e.Error.Code != "store_unavailable" ||
			!strings.Contains(e.Error.Message, "check the database") {
			t.Errorf("%s %s with the database stopped: %d (Retry-After %q) %+v, want 503 store_unavailable with Retry-After",
				c.method, c.path, resp.StatusCode, resp.Header.Get("Retry-After"), e.Error)
		}
	}
	resp, err := http.Get(s.url + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("readyz with the database stopped: %d (Retry-After %q)", resp.StatusCode, resp.Header.Get("Retry-After"))
	}

	// A change that may not be repeated is sent once and reported.
	_, errOut, code := s.cli("cancel", strconv.FormatInt(ok.ID, 10))
	if code != 5 || strings.Contains(errOut, "retrying") || !strings.Contains(errOut, "error: the store is unavailable") {
		t.Errorf("cancel with the database stopped: exit %d, stderr %q; want exit 5 and no retry", code, errOut)
	}

	// A read and a keyed submit wait for the database.
	ls, lsOut, lsErr := s.startCLI("ls", "-o", "json")
	spec := filepath.Join(t.TempDir(), "during.yaml")
	os.WriteFile(spec, []byte("name: during\nentrypoint: [\"true\"]\n"), 0o644)
	sub, subOut, subErr := s.startCLI("submit", spec, "--idempotency-key", "outage-1")
	waitFor(t, 30*time.Second, "the CLI to report that it retries", func() bool {
		return strings.Contains(lsErr.String(), "store unavailable (503); retrying in ") &&
			strings.Contains(subErr.String(), "store unavailable (503); retrying in ")
	})
	if strings.Contains(s.stderrText(), "password") {
		t.Errorf("the server log mentions a password:\n%s", s.stderrText())
	}

	pg.start()
	waitDone := func(cmd *exec.Cmd, name string) int {
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			cmd.Process.Signal(syscall.SIGKILL)
			<-done
			t.Errorf("%s did not finish after the database came back", name)
		}
		return cmd.ProcessState.ExitCode()
	}
	if code := waitDone(ls, "ls"); code != 0 || !strings.Contains(lsOut.String(), `"name": "ok"`) {
		t.Errorf("ls across the outage: exit %d\nstdout: %s\nstderr: %s", code, lsOut, lsErr)
	}
	if code := waitDone(sub, "submit"); code != 0 {
		t.Errorf("submit across the outage: exit %d\nstdout: %s\nstderr: %s", code, subOut, subErr)
	}
	waitFor(t, 30*time.Second, "readyz after the database is back", func() bool {
		resp, err := http.Get(s.url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})

	// Nothing stored before is lost, and the keyed submit made one job.
	after := jobsNow()
	if !strings.HasSuffix(after, before) {
		t.Errorf("jobs after the outage:\n%s\nbefore:\n%s", after, before)
	}
	var list apitypes.JobList
	s.api("GET", "/api/v1/jobs?limit=100", nil, &list)
	var during []int64
	for _, j := range list.Jobs {
		if j.Name == "during" {
			during = append(during, j.ID)
		}
	}
	if len(during) != 1 || strings.TrimSpace(subOut.String()) != strconv.FormatInt(during[0], 10) {
		t.Fatalf("jobs named during: %v; submit printed %q", during, subOut)
	}
	if final := s.waitState(during[0], 30*time.Second, "succeeded", "failed"); final.State != "succeeded" {
		t.Errorf("the job submitted across the outage: %s (%s)", final.State, final.Message)
	}
}
