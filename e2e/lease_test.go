package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/store/postgres/pgtest"
)

// Two replicas on one PostgreSQL store, the leader frozen with SIGSTOP for
// 30 s, ten times its lease: the follower leads within the lease, its
// /readyz stops naming the frozen leader, and jobs submitted meanwhile
// start. Resumed, the old leader stops acting and its writes are refused:
// every job runs exactly once (each run appends its job id and attempt to
// one shared file).
func TestLeaderFrozenIsReplacedWithinLease(t *testing.T) {
	const lease = 3 * time.Second
	const frozen = 30 * time.Second
	dsn := pgtest.Schema(t)
	dir := jobReachableDir(t)
	s := &server{t: t, dir: dir, data: filepath.Join(dir, "data"), config: filepath.Join(dir, "server.yaml"), http: http.DefaultClient}
	cfg := fmt.Sprintf("store: %q\ninventory: {cpus: 8, memory: 8GiB, gpus: 0}\nretry_backoff: 100ms\ngrace: 1s\nleader_lease: 3s\n", dsn)
	if err := os.WriteFile(s.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(dir, "home"), 0o755)
	defer s.killShims()
	runs := filepath.Join(sharedDir(t), "runs")
	a := startReplica(t, s, "a")
	waitFor(t, 20*time.Second, "replica a to lead", func() bool { return a.status(t).Leading })
	b := startReplica(t, s, "b")
	nameA := a.status(t).Replica
	if st := b.status(t); st.Leading || st.Leader != nameA {
		t.Fatalf("replica b status %+v; want a follower naming a (%s) as leader", st, nameA)
	}
	admin, err := os.ReadFile(filepath.Join(s.data, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	s.token = strings.TrimSpace(string(admin))
	t.Cleanup(func() { a.cmd.Process.Signal(syscall.SIGCONT) }) // so that cleanup can stop it

	spec, _ := json.Marshal(fmt.Sprintf("name: once\nentrypoint: [sh, -c, 'echo \"$TRAINYARD_JOB_ID $TRAINYARD_ATTEMPT\" >> %s; sleep 1']\nresources: {cpus: 1, memory: 64MiB}\n", runs))
	submit := func(r *replica, n int) []int64 {
		var ids []int64
		for range n {
			body, _ := json.Marshal(apitypes.SubmitRequest{Spec: spec})
			req, _ := http.NewRequest("POST", r.url+"/api/v1/jobs", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+s.token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("submit to %s: %v", r.name, err)
			}
			var j apitypes.Job
			json.NewDecoder(resp.Body).Decode(&j)
			resp.Body.Close()
			if resp.StatusCode != 201 {
				t.Fatalf("submit to %s: status %d", r.name, resp.StatusCode)
			}
			ids = append(ids, j.ID)
		}
		return ids
	}
	s.url = b.url
	state := func(id int64) string { return s.job(id).State }

	// Jobs running on a when it freezes.
	before := submit(b, 12)
	waitFor(t, 30*time.Second, "a's first jobs to start", func() bool {
		return state(before[0]) == "running" || state(before[0]) == "succeeded"
	})
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	during := submit(b, 12)

	waitFor(t, 2*lease, "replica b to lead", func() bool { return b.status(t).Leading })
	takeover := time.Since(stopped)
	t.Logf("replica b led %v after a froze (lease %v)", takeover.Round(time.Millisecond), lease)
	if takeover > lease+2*time.Second {
		t.Errorf("b led %v after a froze; want within the lease (%v) and a campaign interval", takeover, lease)
	}
	if st := b.status(t); st.Leader == nameA || st.Epoch < 2 {
		t.Errorf("b's /readyz %+v; want it to name itself in a newer term, not the frozen %s", st, nameA)
	}
	for _, id := range during {
		waitFor(t, frozen-time.Since(stopped), fmt.Sprintf("job %d, submitted while a was frozen, to start", id), func() bool {
			st := state(id)
			return st == "running" || st == "succeeded"
		})
	}
	t.Logf("the %d jobs submitted while a was frozen all started %v after it froze", len(during), time.Since(stopped).Round(time.Millisecond))
	if d := time.Since(stopped); d >= frozen {
		t.Fatalf("the test took %v to get here; the freeze (%v) must outlast it", d, frozen)
	}
	time.Sleep(frozen - time.Since(stopped)) // the freeze itself, not a wait for state
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	after := submit(a, 12) // through the old leader's API, now a follower
	waitFor(t, 20*time.Second, "a to report itself a follower", func() bool {
		st := a.status(t)
		return !st.Leading && st.Leader == b.status(t).Replica
	})
	t.Logf("a reported itself a follower %v after it resumed", time.Since(resumed).Round(time.Millisecond))

	all := append(append(append([]int64{}, before...), during...), after...)
	waitFor(t, 120*time.Second, "every job to succeed", func() bool {
		for _, id := range all {
			if state(id) != "succeeded" {
				return false
			}
		}
		return true
	})
	if st := b.status(t); !st.Leading {
		t.Errorf("b stopped leading after a resumed: %+v", st)
	}
	data, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	ran := map[int64][]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			t.Fatalf("line %q in the runs file; want job id and attempt", line)
		}
		id, _ := strconv.ParseInt(f[0], 10, 64)
		att, _ := strconv.Atoi(f[1])
		ran[id] = append(ran[id], att)
	}
	dups := 0
	for _, id := range all {
		if got := ran[id]; len(got) != 1 || got[0] != 1 {
			dups++
			t.Errorf("job %d ran as attempts %v; want once, as attempt 1", id, got)
		}
		if j := s.job(id); len(j.Attempts) != 1 {
			t.Errorf("job %d has %d attempts, want 1", id, len(j.Attempts))
		}
	}
	t.Logf("%d jobs, %d runs recorded, %d duplicate runs", len(all), len(strings.Split(strings.TrimSpace(string(data)), "\n")), dups)
	a.stderr.mu.Lock()
	logA := a.stderr.w.(*bytes.Buffer).String()
	a.stderr.mu.Unlock()
	if !strings.Contains(logA, "lost leadership") {
		t.Errorf("a's log does not say it lost leadership after it resumed")
	}
	t.Logf("a's writes refused after it resumed: %d", strings.Count(logA, "write refused"))
	for _, line := range strings.Split(logA, "\n") {
		if strings.Contains(line, "write refused") || strings.Contains(line, "lost leadership") {
			t.Logf("a: %s", line)
		}
	}

	// A leader that shuts down gives its lease up: a leads well within
	// the lease, not once it expires.
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	term := time.Now()
	waitFor(t, 3*lease, "a to lead after b shut down", func() bool { return a.status(t).Leading })
	handover := time.Since(term)
	t.Logf("a led %v after b was told to shut down", handover.Round(time.Millisecond))
	if handover >= lease {
		t.Errorf("a led %v after b shut down; want b to give the lease up, well within the lease (%v)", handover, lease)
	}
	b.cmd.Wait()
}
