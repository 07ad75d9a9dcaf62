package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// attemptProcs lists the live processes of attempt n of job id: those whose
// environment says so (every process of a job inherits it).
func attemptProcs(id int64, n int) []int {
	want := [][]byte{[]byte(fmt.Sprintf("TRAINYARD_JOB_ID=%d\x00", id)), []byte(fmt.Sprintf("TRAINYARD_ATTEMPT=%d\x00", n))}
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + ent.Name() + "/environ")
		if err != nil || !bytes.Contains(env, want[0]) || !bytes.Contains(env, want[1]) {
			continue
		}
		if alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// A shim killed with SIGKILL takes every process of its attempt with it
// (a child, one in its own session, a double-forked daemon) within 5s; the
// attempt ends lost, its cgroups are removed, and the retry's processes
// never run beside the lost attempt's: each writes its attempt number to a
// heartbeat file every 100ms, and once the retry's first line is there, no
// line of the first attempt follows.
func TestKilledShimEndsItsAttemptBeforeTheRetry(t *testing.T) {
	if os.Geteuid() != 0 && os.Getenv("CI") == "" {
		t.Skip("reading other processes' environments to find the attempt's needs root; run as root to include this test")
	}
	s := startServer(t, serverOpts{})
	hb := filepath.Join(sharedDir(t), "heartbeat")
	beat := `while :; do echo "$TRAINYARD_ATTEMPT $(date +%s%N)" >> ` + hb + `; sleep 0.1; done`
	script := fmt.Sprintf(`B='%s'
if [ "$TRAINYARD_ATTEMPT" = 1 ]; then
  sh -c "$B" &
  setsid sh -c "$B" &
  ( setsid sh -c "$B" & ) &
  exec sh -c "$B"
fi
sh -c "$B" & sleep 2; kill $!`, beat)
	b, _ := json.Marshal(script)
	job := s.submit(fmt.Sprintf("name: watchdog\nentrypoint: %s\npolicy: {retries: 1, reentrant: true}\n", b))
	s.waitState(job.ID, 30*time.Second, "running")
	waitFor(t, 30*time.Second, "attempt 1's four heartbeat writers", func() bool { return len(attemptProcs(job.ID, 1)) >= 4 })
	waitFor(t, 10*time.Second, "attempt 1's heartbeats", func() bool {
		b, _ := os.ReadFile(hb)
		return strings.Count(string(b), "\n") >= 8
	})
	run1 := filepath.Join(s.data, "runs", strconv.FormatInt(job.ID, 10), "1")
	// The claim: "<pid> <start>", then what the attempt holds ("cgroups
	// <json>" where it has groups).
	var shim int
	claim, err := os.ReadFile(filepath.Join(run1, "shim.pid"))
	if err != nil {
		t.Fatal(err)
	} else if _, err := fmt.Sscan(string(claim), &shim); err != nil {
		t.Fatal(err)
	}
	before := attemptProcs(job.ID, 1)

	killed := time.Now()
	if err := syscall.Kill(shim, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the shim (pid %d): %v", shim, err)
	}
	waitFor(t, 30*time.Second, "no process of attempt 1", func() bool { return len(attemptProcs(job.ID, 1)) == 0 })
	took := time.Since(killed)
	t.Logf("the %d processes of attempt 1 were gone %s after its shim was killed", len(before), took)
	if took > 5*time.Second {
		t.Errorf("attempt 1 outlived its shim by %s, want at most 5s", took)
	}

	final := s.waitState(job.ID, 60*time.Second, "succeeded", "failed", "canceled")
	if final.State != "succeeded" {
		t.Fatalf("job ended %s (%s): %s", final.State, final.Reason, final.Message)
	}
	j := s.job(job.ID)
	if len(j.Attempts) != 2 || j.Attempts[0].State != "lost" || j.Attempts[0].Reason != "NodeLost" {
		t.Fatalf("attempts %+v, want the first lost (NodeLost) and a second", j.Attempts)
	}
	if !strings.Contains(j.Attempts[0].Message, "every process left of it was ended") {
		t.Errorf("lost attempt's message %q does not say its processes were ended", j.Attempts[0].Message)
	}

	data, err := os.ReadFile(hb)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	retry := -1
	for i, l := range lines {
		attempt, _, _ := strings.Cut(l, " ")
		switch {
		case attempt == "2" && retry < 0:
			retry = i
		case attempt == "1" && retry >= 0:
			t.Fatalf("heartbeat line %d %q of attempt 1 after the retry's first (line %d): the attempts overlapped", i, l, retry)
		}
	}
	if retry < 0 {
		t.Fatalf("no heartbeat of the retry:\n%s", data)
	}

	for _, line := range strings.Split(string(claim), "\n") {
		b, ok := strings.CutPrefix(line, "cgroups ")
		if !ok {
			continue
		}
		var cg struct {
			Name        string
			Hierarchies []struct{ Parent string }
		}
		if err := json.Unmarshal([]byte(b), &cg); err != nil {
			t.Fatal(err)
		}
		for _, h := range cg.Hierarchies {
			for _, d := range []string{filepath.Join(h.Parent, cg.Name), filepath.Join(h.Parent, cg.Name+".shim")} {
				if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("cgroup %s of the lost attempt still exists: %v", d, err)
				}
			}
		}
	}
}
