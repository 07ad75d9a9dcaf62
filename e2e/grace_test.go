package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// stringTrainer is examples/trainer.py as a STRING entrypoint (run by
// /bin/sh -c) that writes checkpoints only in its SIGTERM handler.
func stringTrainer() string {
	return fmt.Sprintf(`"python3 %s --steps 100000 --sleep 0.05 --checkpoint-every 1000000 --report-every 5"`,
		filepath.Join(repoRoot(), "examples", "trainer.py"))
}

// checkSavedOnSIGTERM checks that the trainer's SIGTERM handler wrote a
// checkpoint, that it is registered, and that no temporary file is left.
func checkSavedOnSIGTERM(t *testing.T, s *server, id int64) string {
	t.Helper()
	log := s.mustCLI("logs", "--attempt", "1", "--timestamps", fmt.Sprint(id))
	var step int
	for _, l := range strings.Split(log, "\n") {
		if i := strings.Index(l, "trainer: SIGTERM at step "); i >= 0 {
			fmt.Sscanf(l[i:], "trainer: SIGTERM at step %d;", &step)
		}
	}
	if step <= 0 {
		t.Fatalf("the trainer's SIGTERM handler did not finish:\n%s", log)
	}
	name := fmt.Sprintf("ckpt-%08d.json", step)
	waitFor(t, 30*time.Second, "the SIGTERM checkpoint registered", func() bool {
		out, _, _ := s.cli("checkpoints", "ls", fmt.Sprint(id))
		return strings.Contains(out, name)
	})
	dir := filepath.Join(s.job(id).OutputDir, "checkpoints")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp") || strings.HasSuffix(e.Name(), ".tmp") {
			t.Errorf("temporary file %s left in %s", e.Name(), dir)
		}
	}
	return log
}

// Cancel and timeout of a string entrypoint leave the checkpoint its
// SIGTERM handler wrote; the job's own grace (the server's is 1s) applies,
// and the log says why the attempt was stopped.
func TestStringEntrypointStopKeepsCheckpoint(t *testing.T) {
	s := startServer(t, serverOpts{})

	canceled := s.submit("name: cancel-me\nentrypoint: " + stringTrainer() + "\npolicy: {grace: 20s}\n")
	s.waitState(canceled.ID, 30*time.Second, "running")
	waitFor(t, 30*time.Second, "training progress", func() bool {
		out, _, _ := s.cli("logs", fmt.Sprint(canceled.ID))
		return strings.Contains(out, `trainyard: {"step": 10,`)
	})
	s.mustCLI("cancel", fmt.Sprint(canceled.ID), "--reason", "not needed")
	if j := s.waitState(canceled.ID, 30*time.Second, "canceled", "failed", "succeeded"); j.State != "canceled" {
		t.Fatalf("job %s: %s", j.State, j.Message)
	}
	log := checkSavedOnSIGTERM(t, s, canceled.ID)
	if !strings.Contains(log, "stop requested (canceled by ") || !strings.Contains(log, "not needed") ||
		!strings.Contains(log, "SIGKILL to whatever is left after 20s") {
		t.Errorf("the log does not name the cancellation and the job's grace:\n%s", log)
	}

	timed := s.submit("name: time-me\nentrypoint: " + stringTrainer() + "\npolicy: {timeout: 3s, grace: 20s}\n")
	if j := s.waitState(timed.ID, 60*time.Second, "failed", "canceled", "succeeded"); j.Reason != "Timeout" {
		t.Fatalf("job %s (%s): %s, want failed by Timeout", j.State, j.Reason, j.Message)
	}
	log = checkSavedOnSIGTERM(t, s, timed.ID)
	if !strings.Contains(log, "timeout of 3s reached") {
		t.Errorf("the log does not name the timeout:\n%s", log)
	}
}

// policy.warn: the job hears its warning signal `before` ahead of the
// timeout's SIGTERM.
func TestWarnSignalBeforeTimeout(t *testing.T) {
	s := startServer(t, serverOpts{})
	script := filepath.Join(jobReachableDir(t), "warned.py")
	if err := os.WriteFile(script, []byte(`import os, signal, sys, time
out = os.environ["TRAINYARD_OUTPUT_DIR"]
def note(name):
    with open(os.path.join(out, name), "w") as f:
        f.write(repr(time.time()) + "\n")
signal.signal(signal.SIGUSR1, lambda *_: note("warned"))
def term(*_):
    note("termed")
    sys.exit(143)
signal.signal(signal.SIGTERM, term)
while True:
    time.sleep(0.05)
`), 0o644); err != nil {
		t.Fatal(err)
	}
	j := s.submit(fmt.Sprintf("name: warn-me\nentrypoint: \"python3 %s\"\npolicy: {timeout: 4s, warn: {signal: USR1, before: 2s}}\n", script))
	if j := s.waitState(j.ID, 60*time.Second, "failed", "canceled", "succeeded"); j.Reason != "Timeout" {
		t.Fatalf("job %s (%s): %s, want failed by Timeout", j.State, j.Reason, j.Message)
	}
	out := s.job(j.ID).OutputDir
	read := func(name string) float64 {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	warned, termed := read("warned"), read("termed")
	if lead := termed - warned; lead < 1.5 || lead > 3 {
		t.Errorf("USR1 came %.2fs before SIGTERM, want about 2s", lead)
	}
}

// A preempted string-entrypoint trainer keeps its SIGTERM checkpoint, and
// its log names the job it made room for.
func TestStringEntrypointPreemptionKeepsCheckpoint(t *testing.T) {
	s := startServer(t, serverOpts{extra: `
pools:
  - name: gpu
    nodes: [{name: n1, cpus: 1, memory: 4GiB, gpus: [0]}]
    preemption: true
quotas:
  - {project: default, pool: gpu, gpus: 1, cpus: 1, memory: 4GiB, max_priority: urgent}
`})
	low := s.submit("name: low\npool: gpu\nresources: {gpus: 1, cpus: 1, memory: 256MiB}\nentrypoint: " + stringTrainer() +
		"\npolicy: {priority: low, preemptible: true, reentrant: true, grace: 20s}\n")
	s.waitState(low.ID, 30*time.Second, "running")
	waitFor(t, 30*time.Second, "training progress", func() bool {
		out, _, _ := s.cli("logs", fmt.Sprint(low.ID))
		return strings.Contains(out, `trainyard: {"step": 10,`)
	})
	high := s.submit("name: urgent\npool: gpu\nresources: {gpus: 1, cpus: 1, memory: 64MiB}\nentrypoint: [true]\npolicy: {priority: high}\n")
	if j := s.waitState(high.ID, 60*time.Second, "succeeded", "failed"); j.State != "succeeded" {
		t.Fatalf("high-priority job %s: %s", j.State, j.Message)
	}
	waitFor(t, 30*time.Second, "the first attempt preempted", func() bool {
		a := s.job(low.ID).Attempts
		return len(a) > 0 && a[0].State == "preempted"
	})
	log := checkSavedOnSIGTERM(t, s, low.ID)
	if want := fmt.Sprintf("stop requested (preempted for job %d", high.ID); !strings.Contains(log, want) || strings.Contains(log, "CanceledByUser") {
		t.Errorf("the log does not say %q:\n%s", want, log)
	}
	s.mustCLI("cancel", fmt.Sprint(low.ID))
}
