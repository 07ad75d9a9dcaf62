package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

// A preempted job gets SIGTERM, writes a checkpoint, is queued again, and its
// next attempt resumes from that checkpoint: the step counter continues.
func TestPreemptionResumesFromCheckpoint(t *testing.T) {
	s := startServer(t, serverOpts{extra: `
pools:
  - name: gpu
    nodes: [{name: n1, cpus: 1, memory: 4GiB, gpus: [0]}]
    preemption: true
quotas:
  - {project: default, pool: gpu, gpus: 1, cpus: 1, memory: 4GiB, max_priority: urgent}
`})
	trainer := filepath.Join(repoRoot(), "examples", "trainer.py")
	low := s.submit(fmt.Sprintf(`name: long-run
pool: gpu
resources: {gpus: 1, cpus: 1, memory: 256MiB}
entrypoint: [python3, %s, --steps, "120", --sleep, "0.03", --checkpoint-every, "10", --report-every, "5"]
policy: {priority: low, preemptible: true, reentrant: true}
`, trainer))
	s.waitState(low.ID, 30*time.Second, "running")
	// Let it make progress and write at least one checkpoint.
	waitFor(t, 30*time.Second, "a checkpoint", func() bool {
		m, _ := filepath.Glob(filepath.Join(s.job(low.ID).OutputDir, "checkpoints", "ckpt-*.json"))
		return len(m) > 0
	})
	high := s.submit("name: urgent-eval\npool: gpu\nresources: {gpus: 1, cpus: 1, memory: 64MiB}\nentrypoint: [true]\npolicy: {priority: high}\n")
	if j := s.waitState(high.ID, 30*time.Second, "succeeded", "failed"); j.State != "succeeded" {
		t.Fatalf("high-priority job %s: %s", j.State, j.Message)
	}
	final := s.waitState(low.ID, time.Minute, "succeeded", "failed", "canceled")
	if final.State != "succeeded" {
		t.Fatalf("preempted job ended %s: %s", final.State, final.Message)
	}
	full := s.job(low.ID)
	if len(full.Attempts) != 2 || full.Attempts[0].State != "preempted" || full.Attempts[0].Reason != "Preempted" {
		t.Fatalf("attempts = %+v, want a preempted first attempt and a second", full.Attempts)
	}
	if full.Preemptions != 1 {
		t.Errorf("preemptions = %d, want 1", full.Preemptions)
	}
	first := s.mustCLI("logs", "--attempt", "1", fmt.Sprint(low.ID))
	if !strings.Contains(first, "trainer: SIGTERM at step") || !strings.Contains(first, "checkpoint /") {
		t.Errorf("first attempt did not checkpoint on SIGTERM:\n%s", first)
	}
	second := s.mustCLI("logs", "--attempt", "2", fmt.Sprint(low.ID))
	var resumed int
	for _, l := range strings.Split(second, "\n") {
		if _, err := fmt.Sscanf(l, "resumed from step %d", &resumed); err == nil {
			break
		}
	}
	if resumed <= 0 {
		t.Fatalf("second attempt did not resume from a checkpoint:\n%s", second)
	}
	if strings.Contains(second, fmt.Sprintf(`{"step": %d,`, 5)) && resumed > 5 {
		t.Errorf("second attempt restarted its step counter instead of continuing from %d", resumed)
	}
	// The preemption is on the record: reason, message, who asked.
	var preempted bool
	for _, tr := range full.Transitions {
		if tr.To == "queued" && tr.Reason == "Preempted" && strings.Contains(tr.Message, fmt.Sprint(high.ID)) {
			preempted = true
		}
	}
	if !preempted {
		t.Errorf("no preemption transition naming job %d: %+v", high.ID, full.Transitions)
	}
}

// Two projects submit at once into three pools: quotas and concurrency caps
// are never exceeded, and why explains every waiting job.
func TestTwoProjectsThreePools(t *testing.T) {
	s := startServer(t, serverOpts{cpus: 8, extra: `
pools:
  - {name: standard, nodes: [{name: s1, cpus: 4, memory: 8GiB}], max_running: 3}
  - {name: priority, nodes: [{name: p1, cpus: 2, memory: 4GiB}]}
  - {name: scratch, nodes: [{name: x1, cpus: 2, memory: 4GiB}], max_running: 1}
quotas:
  - {project: vision, pool: standard, cpus: 2, memory: 4GiB, jobs: 2}
  - {project: nlp, pool: standard, cpus: 2, memory: 4GiB, jobs: 2}
  - {project: vision, pool: priority, cpus: 1, memory: 2GiB, max_priority: high}
  - {project: nlp, pool: priority, cpus: 1, memory: 2GiB, max_priority: high}
  - {project: vision, pool: scratch, cpus: 2, memory: 4GiB}
  - {project: nlp, pool: scratch, cpus: 2, memory: 4GiB}
projects:
  - {name: vision, shares: 1}
  - {name: nlp, shares: 1}
`})
	pools := []string{"standard", "priority", "scratch"}
	var mu sync.Mutex
	var ids []int64
	var wg sync.WaitGroup
	for _, project := range []string{"vision", "nlp"} {
		for _, pool := range pools {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 4 {
					j := s.submit(fmt.Sprintf("name: %s-%s-%d\nproject: %s\npool: %s\nresources: {cpus: 1, memory: 256MiB}\nentrypoint: [sleep, '0.3']\n",
						project, pool, i, project, pool))
					mu.Lock()
					ids = append(ids, j.ID)
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	// While jobs wait, every waiting job has a reason with numbers.
	var list apitypes.JobList
	s.api("GET", "/api/v1/jobs?state=queued&limit=100", nil, &list)
	if len(list.Jobs) == 0 {
		t.Fatal("no job waits; the test needs contention")
	}
	positioned := 0
	for _, j := range list.Jobs {
		var why apitypes.Why
		s.api("GET", fmt.Sprintf("/api/v1/jobs/%d/why", j.ID), nil, &why)
		if why.State == "queued" && len(why.Evidence) > 0 && strings.HasPrefix(why.Evidence[0], "position ") {
			positioned++
		}
		if why.State == "queued" && (why.Reason == "" || why.Reason == "Submitted" || why.Message == "") {
			// The scheduler may not have run since this submit; give it one pass.
			waitFor(t, 5*time.Second, fmt.Sprintf("a pending reason for job %d", j.ID), func() bool {
				s.api("GET", fmt.Sprintf("/api/v1/jobs/%d/why", j.ID), nil, &why)
				return why.State != "queued" || (why.Reason != "Submitted" && why.Message != "")
			})
		}
	}
	if positioned == 0 {
		t.Errorf("no waiting job's why gave its queue position")
	}
	type span struct {
		project, pool string
		start, end    time.Time
	}
	var spans []span
	for _, id := range ids {
		j := s.waitState(id, 2*time.Minute, "succeeded", "failed")
		if j.State != "succeeded" {
			t.Fatalf("job %d %s: %s", id, j.State, j.Message)
		}
		a := s.job(id).Attempts[0]
		spans = append(spans, span{j.Project, j.Pool, a.CreatedAt, *a.FinishedAt})
	}
	peak := func(match func(span) bool) int {
		best := 0
		for _, a := range spans {
			if !match(a) {
				continue
			}
			n := 0
			for _, b := range spans {
				if match(b) && !b.start.After(a.start) && b.end.After(a.start) {
					n++
				}
			}
			best = max(best, n)
		}
		return best
	}
	limits := map[string]int{"standard": 3, "priority": 2, "scratch": 1}
	for pool, limit := range limits {
		if got := peak(func(x span) bool { return x.pool == pool }); got > limit {
			t.Errorf("pool %s ran %d jobs at once, cap or capacity is %d", pool, got, limit)
		}
	}
	for _, project := range []string{"vision", "nlp"} {
		if got := peak(func(x span) bool { return x.pool == "standard" && x.project == project }); got > 2 {
			t.Errorf("project %s ran %d jobs at once in standard, quota is 2", project, got)
		}
		if got := peak(func(x span) bool { return x.pool == "priority" && x.project == project }); got > 1 {
			t.Errorf("project %s used %d CPUs at once in priority, quota is 1", project, got)
		}
	}
}

// The livelock a borrowing job once caused on a live server (one job
// preempted over a thousand times in a minute while the other never
// started): a guest job that would borrow never preempts the owner's
// job inside the owner's guarantee. It waits, and starts once the owner's
// job ends.
func TestBorrowerNeverPreemptsInsideAGuarantee(t *testing.T) {
	s := startServer(t, serverOpts{gpus: 2, extra: `
pools:
  - name: p
    nodes: [{name: n1, cpus: 2, memory: 4GiB, gpus: [0, 1]}]
    borrowing: true
    preemption: true
quotas:
  - {project: owner, pool: p, gpus: 2, cpus: 2, memory: 4GiB}
`})
	gate := sharedDir(t)
	owner := s.submit(fmt.Sprintf(`name: owner-low
project: owner
pool: p
resources: {gpus: 2, cpus: 1, memory: 64MiB}
entrypoint: 'while [ ! -e %s/done ]; do sleep 0.05; done'
policy: {priority: low, preemptible: true, reentrant: true}
`, gate))
	s.waitState(owner.ID, 30*time.Second, "running")
	guest := s.submit(`name: guest
project: guest
pool: p
resources: {gpus: 2, cpus: 1, memory: 64MiB}
entrypoint: [true]
policy: {preemptible: true, reentrant: true}
`)
	waitFor(t, 30*time.Second, "the guest job to be considered", func() bool {
		return s.job(guest.ID).Reason == "WaitingForResources"
	})
	// Watched over many scheduling passes: nothing is preempted.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if j := s.job(owner.ID); j.State != "running" || len(j.Attempts) != 1 {
			t.Fatalf("the owner's job was disturbed: %s, %d attempts", j.State, len(j.Attempts))
		}
	}
	os.WriteFile(filepath.Join(gate, "done"), nil, 0o644)
	if j := s.waitState(guest.ID, 30*time.Second, "succeeded", "failed"); j.State != "succeeded" {
		t.Fatalf("guest job %s: %s", j.State, j.Message)
	}
	if j := s.job(owner.ID); len(j.Attempts) != 1 || j.State != "succeeded" {
		t.Errorf("owner's job: %s after %d attempts, want one attempt that succeeded", j.State, len(j.Attempts))
	}
}
