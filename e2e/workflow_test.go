package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

// sweepOf reads a sweep through the CLI.
func (s *server) sweepOf(id string) apitypes.Sweep {
	s.t.Helper()
	var sw apitypes.Sweep
	if err := json.Unmarshal([]byte(s.mustCLI("sweep", "show", id, "-o", "json")), &sw); err != nil {
		s.t.Fatal(err)
	}
	return sw
}

// members lists a sweep's members through the CLI, by id ascending.
func (s *server) members(id string) []apitypes.Job {
	s.t.Helper()
	var list apitypes.JobList
	if err := json.Unmarshal([]byte(s.mustCLI("ls", "--sweep", id, "--all", "-o", "json")), &list); err != nil {
		s.t.Fatal(err)
	}
	slices.SortFunc(list.Jobs, func(a, b apitypes.Job) int { return int(a.ID - b.ID) })
	return list.Jobs
}

func writeSpec(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// A 12-member grid sweep with max_parallel 3 never has more than 3 members
// running at once, gives every member its params and index, and names the
// member with the lowest reported val_loss as its best.
func TestSweepRunsWithinMaxParallel(t *testing.T) {
	s := startServer(t, serverOpts{cpus: 8})
	spec := writeSpec(t, `name: lr-sweep
entrypoint: |
  echo "member index=$TRAINYARD_ARRAY_INDEX sweep=$TRAINYARD_SWEEP_ID lr=$TRAINYARD_PARAM_LR bs=$TRAINYARD_PARAM_BS"
  echo "trainyard: {\"step\": 1, \"val_loss\": ${TRAINYARD_PARAM_LR}${TRAINYARD_PARAM_BS}}"
  sleep 0.3
resources: {cpus: 0.5, memory: 64MiB}
sweep:
  params:
    lr: [0.4, 0.3, 0.1, 0.2]
    bs: [16, 32, 64]
  max_parallel: 3
  objective: {metric: val_loss, goal: minimize}
`)
	id := strings.TrimSpace(s.mustCLI("submit", spec))
	var sw apitypes.Sweep
	waitFor(t, 2*time.Minute, "sweep "+id+" to end", func() bool {
		sw = s.sweepOf(id)
		return sw.State == "succeeded" || sw.State == "failed" || sw.State == "canceled"
	})
	if sw.State != "succeeded" || sw.Counts["succeeded"] != 12 || sw.Members != 12 || sw.MaxParallel != 3 {
		t.Fatalf("sweep: %+v", sw)
	}
	jobs := s.members(id)
	if len(jobs) != 12 {
		t.Fatalf("ls --sweep %s lists %d jobs, want 12", id, len(jobs))
	}
	type span struct{ start, end time.Time }
	var spans []span
	seen := map[string]bool{}
	for i, lj := range jobs {
		j := s.job(lj.ID)
		var spec struct {
			Params map[string]string `json:"params"`
			Labels map[string]string `json:"labels"`
		}
		if err := json.Unmarshal(j.Spec, &spec); err != nil {
			t.Fatal(err)
		}
		if spec.Labels["trainyard.array_index"] != strconv.Itoa(i) || spec.Labels["trainyard.sweep"] != id {
			t.Errorf("job %d labels %v, want index %d of sweep %s", j.ID, spec.Labels, i, id)
		}
		combo := spec.Params["lr"] + "/" + spec.Params["bs"]
		if seen[combo] {
			t.Errorf("job %d repeats params %s", j.ID, combo)
		}
		seen[combo] = true
		want := fmt.Sprintf("member index=%d sweep=%s lr=%s bs=%s", i, id, spec.Params["lr"], spec.Params["bs"])
		if logs := s.mustCLI("logs", strconv.FormatInt(j.ID, 10)); !strings.Contains(logs, want) {
			t.Errorf("job %d log %q, want %q", j.ID, logs, want)
		}
		for _, a := range j.Attempts {
			if a.StartedAt == nil || a.FinishedAt == nil {
				t.Fatalf("job %d attempt %d has no start or end: %+v", j.ID, a.Number, a)
			}
			spans = append(spans, span{*a.StartedAt, *a.FinishedAt})
		}
	}
	// The most members running at one moment, by the server's own record.
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, sp := range spans {
		edges = append(edges, edge{sp.start, 1}, edge{sp.end, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].delta < edges[j].delta // an end before a start at the same instant
		}
		return edges[i].at.Before(edges[j].at)
	})
	running, most := 0, 0
	for _, e := range edges {
		running += e.delta
		most = max(most, running)
	}
	if most > 3 {
		t.Errorf("%d members ran at once; max_parallel is 3", most)
	}
	if b := sw.Best; b == nil || b.Params["lr"] != "0.1" || b.Params["bs"] != "16" || b.Value != 0.116 || b.Index != 2 {
		t.Errorf("best member %+v, want index 2 (bs 16, lr 0.1) with val_loss 0.116", b)
	}
	if out := s.mustCLI("sweep", "show", id); !strings.Contains(out, "Best:") || !strings.Contains(out, "bs=16 lr=0.1") {
		t.Errorf("sweep show does not name the best member:\n%s", out)
	}
}

// Cancelling a sweep cancels its running members and those still held.
func TestSweepCancelCancelsEveryMember(t *testing.T) {
	s := startServer(t, serverOpts{cpus: 4})
	spec := writeSpec(t, "name: long-array\nentrypoint: sleep 120\nresources: {cpus: 0.5, memory: 64MiB}\n")
	id := strings.TrimSpace(s.mustCLI("submit", spec, "--array", "0-5%2", "--idempotency-key", "long-1"))
	// A retried submit (the same key) returns the same sweep, and stores
	// no second one.
	if again := strings.TrimSpace(s.mustCLI("submit", spec, "--array", "0-5%2", "--idempotency-key", "long-1")); again != id {
		t.Errorf("submit again with the key: sweep %s, want %s", again, id)
	}
	waitFor(t, time.Minute, "two members of sweep "+id+" to run", func() bool {
		sw := s.sweepOf(id)
		return sw.Counts["running"] == 2 && sw.Counts["held"] == 4
	})
	if out, errOut, code := s.cli("release", strconv.FormatInt(s.members(id)[5].ID, 10)); code == 0 || !strings.Contains(errOut, "SweepLimit") {
		t.Errorf("release of a member held for max_parallel: exit %d, %s%s", code, out, errOut)
	}
	s.mustCLI("sweep", "cancel", id, "--reason", "wrong data")
	waitFor(t, time.Minute, "every member of sweep "+id+" to be canceled", func() bool {
		sw := s.sweepOf(id)
		return sw.Counts["canceled"] == 6
	})
	for _, j := range s.members(id) {
		if j.State != "canceled" || !strings.Contains(j.Message, "wrong data") {
			t.Errorf("member %d: %s %q", j.ID, j.State, j.Message)
		}
	}
	if sw := s.sweepOf(id); sw.CanceledAt == nil || sw.State != "canceled" {
		t.Errorf("sweep after cancel: %+v", sw)
	}
	var list apitypes.SweepList
	if err := json.Unmarshal([]byte(s.mustCLI("sweep", "ls", "-o", "json")), &list); err != nil || len(list.Sweeps) != 1 {
		t.Errorf("sweep ls: %d sweeps (%v), want 1", len(list.Sweeps), err)
	}
}

// prepare → train → evaluate: each waits for the one before, and reads its
// outputs through from_job. A failed prepare fails the rest with
// DependencyFailed, and why says which dependency failed.
func TestDependencyChain(t *testing.T) {
	s := startServer(t, serverOpts{cpus: 4})
	chain := func(prepare string) (p, tr, ev int64) {
		t.Helper()
		p = s.submit("name: prepare\nentrypoint: |\n  sleep 0.5; " + prepare + "\n  mkdir -p $TRAINYARD_OUTPUT_DIR/data && echo rows=42 > $TRAINYARD_OUTPUT_DIR/data/set.txt\nresources: {cpus: 0.5, memory: 64MiB}\n").ID
		tr = s.submit(fmt.Sprintf(`name: train
entrypoint: |
  mkdir -p $TRAINYARD_OUTPUT_DIR/model
  cat $TRAINYARD_INPUT_DATA/set.txt > $TRAINYARD_OUTPUT_DIR/model/weights.txt
  echo trained >> $TRAINYARD_OUTPUT_DIR/model/weights.txt
inputs: [{name: data, from_job: %d, path: data}]
resources: {cpus: 0.5, memory: 64MiB}
`, p)).ID
		ev = s.submit(fmt.Sprintf(`name: evaluate
entrypoint: cat $TRAINYARD_INPUT_MODEL/weights.txt
inputs: [{name: model, from_job: %d, path: model/}]
after: [{job: %d, on: succeeded}]
resources: {cpus: 0.5, memory: 64MiB}
`, tr, tr)).ID
		return p, tr, ev
	}

	p, tr, ev := chain("true")
	if j := s.job(ev); j.State != "held" || j.Reason != "Dependency" || !strings.Contains(j.Message, fmt.Sprintf("job %d", tr)) {
		t.Errorf("evaluate before train ended: %s %s %q", j.State, j.Reason, j.Message)
	}
	var jobs [3]apitypes.Job
	for i, id := range []int64{p, tr, ev} {
		if jobs[i] = s.waitState(id, time.Minute, "succeeded", "failed", "canceled"); jobs[i].State != "succeeded" {
			t.Fatalf("job %d %s: %s %s\n%s", id, jobs[i].State, jobs[i].Reason, jobs[i].Message, s.mustCLI("logs", strconv.FormatInt(id, 10)))
		}
	}
	for i := 1; i < 3; i++ {
		prev, cur := s.job(jobs[i-1].ID), s.job(jobs[i].ID)
		if !cur.Attempts[0].StartedAt.After(*prev.Attempts[0].FinishedAt) {
			t.Errorf("job %d started at %v, before job %d ended at %v", cur.ID, cur.Attempts[0].StartedAt, prev.ID, prev.Attempts[0].FinishedAt)
		}
	}
	if logs := s.mustCLI("logs", strconv.FormatInt(ev, 10)); !strings.Contains(logs, "rows=42\ntrained") {
		t.Errorf("evaluate read %q, want the trained model", logs)
	}
	var man apitypes.Manifest
	if code := s.api("GET", fmt.Sprintf("/api/v1/jobs/%d/artifacts", ev), nil, &man); code != 200 {
		t.Fatalf("artifacts of job %d: status %d", ev, code)
	}
	b, _ := json.Marshal(man)
	if !strings.Contains(string(b), fmt.Sprintf(`"from_job":%d`, tr)) {
		t.Errorf("lineage of job %d does not name job %d: %s", ev, tr, b)
	}

	p, tr, ev = chain("exit 3")
	for _, id := range []int64{tr, ev} {
		j := s.waitState(id, time.Minute, "succeeded", "failed", "canceled")
		if j.State != "failed" || j.Reason != "DependencyFailed" || j.AttemptCount != 0 {
			t.Errorf("job %d: %s %s %q (%d attempts), want failed DependencyFailed without running", id, j.State, j.Reason, j.Message, j.AttemptCount)
		}
	}
	why := s.mustCLI("why", strconv.FormatInt(ev, 10))
	if !strings.Contains(why, "DependencyFailed") || !strings.Contains(why, fmt.Sprintf("job %d failed", tr)) {
		t.Errorf("why %d:\n%s", ev, why)
	}
	if j := s.job(p); j.State != "failed" {
		t.Errorf("prepare: %s", j.State)
	}
}

// A sweep with early_stop: the member whose loss stays above the others'
// median is stopped while it runs and ends succeeded (EarlyStopped); the
// good members run to their end.
func TestSweepEarlyStopsPoorMember(t *testing.T) {
	s := startServer(t, serverOpts{cpus: 4})
	spec := writeSpec(t, `name: early
entrypoint: |
  if [ "$TRAINYARD_PARAM_I" = 3 ]; then
    for s in 10 20 30; do echo "trainyard: {\"step\": $s, \"val_loss\": 5}"; done
    sleep 120
  fi
  for s in 10 20 30 40 50; do echo "trainyard: {\"step\": $s, \"val_loss\": 0.$TRAINYARD_PARAM_I}"; done
resources: {cpus: 0.5, memory: 64MiB}
sweep:
  params: {i: [0, 1, 2, 3]}
  objective: {metric: val_loss}
  early_stop: {rule: median, min_steps: 20}
`)
	id := strings.TrimSpace(s.mustCLI("submit", spec))
	var sw apitypes.Sweep
	waitFor(t, time.Minute, "sweep "+id+" to end", func() bool {
		sw = s.sweepOf(id)
		return sw.State == "succeeded" || sw.State == "failed" || sw.State == "canceled"
	})
	if sw.State != "succeeded" || sw.Counts["succeeded"] != 4 {
		t.Fatalf("sweep: %+v", sw)
	}
	for i, j := range s.members(id) {
		switch {
		case i == 3 && (j.Reason != "EarlyStopped" || !strings.Contains(j.Message, "median of 3 other members")):
			t.Errorf("member 3: %s %s %q, want succeeded EarlyStopped with the numbers", j.State, j.Reason, j.Message)
		case i < 3 && j.Reason != "Completed":
			t.Errorf("member %d: %s %s %q, want it run to its end", i, j.State, j.Reason, j.Message)
		}
	}
}

// A person's hold of a job waiting for a dependency keeps it held when the
// dependency is met; releasing it then queues it, and releasing it while
// the dependency is not met puts it back to waiting.
func TestHoldOfAWaitingJob(t *testing.T) {
	s := startServer(t, serverOpts{cpus: 4})
	first := s.submit("name: first\nentrypoint: sleep 1\nresources: {cpus: 0.5, memory: 64MiB}\n").ID
	second := s.submit("name: second\nentrypoint: 'true'\nresources: {cpus: 0.5, memory: 64MiB}\n", fmt.Sprintf("after=%d", first)).ID
	ids := strconv.FormatInt(second, 10)
	s.mustCLI("hold", ids, "--reason", "check the data first")
	if j := s.job(second); j.State != "held" || j.Reason != "Held" {
		t.Fatalf("held while waiting: %s %s %q", j.State, j.Reason, j.Message)
	}
	s.mustCLI("release", ids)
	if j := s.job(second); j.State != "held" || j.Reason != "Dependency" {
		t.Fatalf("released before job %d ended: %s %s %q, want back to waiting", first, j.State, j.Reason, j.Message)
	}
	s.mustCLI("hold", ids)
	// A witness waits for the same job: once the loop has queued it, it
	// has looked at every waiter of the first job.
	witness := s.submit("name: witness\nentrypoint: 'true'\nresources: {cpus: 0.5, memory: 64MiB}\n", fmt.Sprintf("after=%d", first)).ID
	s.waitState(witness, time.Minute, "succeeded")
	if j := s.job(second); j.State != "held" || j.Reason != "Held" {
		t.Fatalf("after job %d succeeded: %s %s %q, want still held by its person", first, j.State, j.Reason, j.Message)
	}
	s.mustCLI("release", ids)
	if j := s.waitState(second, time.Minute, "succeeded", "failed"); j.State != "succeeded" {
		t.Errorf("after release: %s %s %q", j.State, j.Reason, j.Message)
	}
}
