package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/store/postgres/pgtest"
)

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// replica is one server process of several sharing a store and a data
// directory.
type replica struct {
	name, url string
	cmd       *exec.Cmd
	stderr    *syncWriter
}

func startReplica(t *testing.T, s *server, name string) *replica {
	t.Helper()
	addr := freePort(t)
	r := &replica{name: name, url: "http://" + addr, stderr: &syncWriter{w: &bytes.Buffer{}}}
	r.cmd = exec.Command(binary, "server", "--data", s.data, "--listen", addr, "--config", s.config)
	r.cmd.Env = s.env()
	r.cmd.Stderr = r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			r.cmd.Process.Kill()
			r.cmd.Wait()
		}
		if t.Failed() {
			r.stderr.mu.Lock()
			t.Logf("replica %s stderr:\n%s", name, r.stderr.w.(*bytes.Buffer).String())
			r.stderr.mu.Unlock()
		}
	})
	waitFor(t, 30*time.Second, "replica "+name+" ready", func() bool {
		resp, err := http.Get(r.url + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return r
}

func (r *replica) status(t *testing.T) apitypes.Status {
	req, _ := http.NewRequest("GET", r.url+"/readyz", nil)
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return apitypes.Status{}
	}
	defer resp.Body.Close()
	var st apitypes.Status
	json.NewDecoder(resp.Body).Decode(&st)
	return st
}

// Two replicas on one PostgreSQL store: 200 jobs submitted across both,
// the leader killed with kill -9 midway; the other takes over, every job
// completes, and every attempt's program ran exactly once.
func TestTwoReplicasSurviveLeaderKill(t *testing.T) {
	dsn := pgtest.Schema(t)
	dir := jobReachableDir(t)
	s := &server{t: t, dir: dir, data: filepath.Join(dir, "data"), config: filepath.Join(dir, "server.yaml"), http: http.DefaultClient}
	cfg := fmt.Sprintf("store: %q\ninventory: {cpus: 8, memory: 8GiB, gpus: 0}\nretry_backoff: 100ms\ngrace: 1s\n", dsn)
	if err := os.WriteFile(s.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "home"), 0o755)
	defer s.killShims()
	a := startReplica(t, s, "a")
	waitFor(t, 20*time.Second, "replica a to lead", func() bool { return a.status(t).Leading })
	b := startReplica(t, s, "b")
	if st := b.status(t); st.Leading || st.Leader != a.status(t).Replica || st.Store != "postgres" {
		t.Fatalf("replica b status %+v; want a follower naming a (%s) as leader", st, a.status(t).Replica)
	}
	admin, err := os.ReadFile(filepath.Join(s.data, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	s.token = strings.TrimSpace(string(admin))

	// A token revoked through one replica stops working on the other at once
	// (its authentication cache hears of it), not after the cache expires.
	s.url = a.url
	s.mustCLI("user", "create", "eve")
	var tok apitypes.Token
	if err := json.Unmarshal([]byte(s.mustCLI("token", "create", "--user", "eve", "-o", "json")), &tok); err != nil || tok.Token == "" {
		t.Fatalf("token create: %+v %v", tok, err)
	}
	whoami := func(r *replica) int {
		req, _ := http.NewRequest("GET", r.url+"/api/v1/whoami", nil)
		req.Header.Set("Authorization", "Bearer "+tok.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := whoami(b); code != 200 {
		t.Fatalf("eve's token on b: %d", code)
	}
	s.mustCLI("token", "revoke", fmt.Sprint(tok.ID))
	revoked := time.Now()
	waitFor(t, 10*time.Second, "the revocation to reach b", func() bool { return whoami(b) == 401 })
	if d := time.Since(revoked); d > 2*time.Second {
		t.Errorf("the revocation took %v to reach replica b; want it signalled, not expired", d)
	}

	// The same idempotency key sent to both replicas at once gives one job.
	for k := range 10 {
		key := fmt.Sprintf("twice-%d", k)
		spec, _ := json.Marshal("name: once\nentrypoint: [\"true\"]\n")
		body, _ := json.Marshal(apitypes.SubmitRequest{Spec: spec})
		ids := make([]int64, 2)
		var wg sync.WaitGroup
		for i, r := range []*replica{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest("POST", r.url+"/api/v1/jobs", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+s.token)
				req.Header.Set("Idempotency-Key", key)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				defer resp.Body.Close()
				var j apitypes.Job
				json.NewDecoder(resp.Body).Decode(&j)
				if resp.StatusCode != 201 && resp.StatusCode != 200 {
					t.Errorf("submit with key %s to %s: status %d", key, r.name, resp.StatusCode)
				}
				ids[i] = j.ID
			}()
		}
		wg.Wait()
		if ids[0] == 0 || ids[0] != ids[1] {
			t.Fatalf("key %s gave jobs %v; want one job", key, ids)
		}
	}

	const n = 200
	spec, _ := json.Marshal("name: r\nentrypoint: [sh, -c, 'echo run >> $TRAINYARD_OUTPUT_DIR/runs; sleep 0.1']\nresources: {cpus: 1, memory: 64MiB}\n")
	ids := make([]int64, n)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				target := a
				if i%2 == 1 {
					target = b
				}
				body, _ := json.Marshal(apitypes.SubmitRequest{Spec: spec})
				req, _ := http.NewRequest("POST", target.url+"/api/v1/jobs", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+s.token)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				var j apitypes.Job
				json.NewDecoder(resp.Body).Decode(&j)
				resp.Body.Close()
				if resp.StatusCode != 201 {
					t.Errorf("submit to %s: status %d", target.name, resp.StatusCode)
					return
				}
				ids[i] = j.ID
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	s.url = b.url
	// A follower answers queue questions too (it plans without acting).
	var q apitypes.Queue
	if code := s.api("GET", "/api/v1/queue", nil, &q); code != 200 {
		t.Errorf("GET /api/v1/queue on the follower: status %d", code)
	}
	count := func(state string) int {
		var list apitypes.JobList
		s.api("GET", "/api/v1/jobs?state="+state+"&limit=1000", nil, &list)
		return len(list.Jobs)
	}
	waitFor(t, 60*time.Second, "a quarter of the jobs to finish", func() bool { return count("succeeded") >= n/4 })
	a.cmd.Process.Kill() // kill -9 the leader midway
	a.cmd.Wait()
	waitFor(t, 30*time.Second, "replica b to lead", func() bool { return b.status(t).Leading })
	waitFor(t, 120*time.Second, "every job to succeed", func() bool { return count("succeeded") == n+10 }) // and the 10 idempotent ones
	for _, id := range ids {
		j := s.job(id)
		if len(j.Attempts) != 1 {
			t.Errorf("job %d has %d attempts, want 1", id, len(j.Attempts))
		}
		if runs, _ := os.ReadFile(filepath.Join(j.OutputDir, "runs")); string(runs) != "run\n" {
			t.Errorf("job %d's program ran %d times, want once", id, strings.Count(string(runs), "run"))
		}
	}
	out, _, code := s.cli("status")
	if code != 0 || !strings.Contains(out, "leader: this replica") {
		t.Errorf("trainyard status on b: exit %d\n%s", code, out)
	}
}
