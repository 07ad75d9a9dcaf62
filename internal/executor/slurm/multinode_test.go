package slurm_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
)

// TestMultiNode: an attempt of two nodes runs its argv once on each,
// with its rank, the same MASTER_ADDR (the job's first node) and
// MASTER_PORT on both, and its arguments as given (never read as shell
// text).
func TestMultiNode(t *testing.T) {
	t.Parallel()
	w := newWorldOf(t, twoNodes)
	h := executortest.NewHarness(t, w.exec(t))
	script := `printf 'rank=%s node_rank=%s node=%s world=%s local=%s/%s master=%s:%s cpus=%s gpus=%s args=%s\n' ` +
		`"$RANK" "$NODE_RANK" "$SLURMD_NODENAME" "$WORLD_SIZE" "$LOCAL_RANK" "$LOCAL_WORLD_SIZE" ` +
		`"$MASTER_ADDR" "$MASTER_PORT" "$SLURM_CPUS_PER_TASK" "$CUDA_VISIBLE_DEVICES" "$#:$*"`
	args := []string{"a b", "$(echo no)", "it's", `"q"`}
	l := h.Launch(t, append([]string{"/bin/sh", "-c", script, "job"}, args...), func(l *executor.Launch) {
		l.Resources = domain.Resources{CPUs: 2, GPUs: 2, Nodes: 2}
	})
	checkExit(t, h.Wait(t, l.Ref, executor.Exited), domain.AttemptSucceeded, domain.ReasonCompleted, intp(0))
	lines := h.LogLines(t, l.Ref, executor.LogQuery{})
	slices.Sort(lines)
	if len(lines) != 2 {
		t.Fatalf("log %q, want one line from each rank", lines)
	}
	var port string
	for rank, line := range lines {
		t.Log(line)
		f := map[string]string{}
		for _, kv := range strings.Fields(strings.SplitN(line, " args=", 2)[0]) {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		want := map[string]string{"rank": fmt.Sprint(rank), "node_rank": fmt.Sprint(rank), "node": w.c.Nodes[rank],
			"world": "2", "local": "0/1", "cpus": "2"}
		for k, v := range want {
			if f[k] != v {
				t.Errorf("rank %d: %s=%q, want %q (%s)", rank, k, f[k], v, line)
			}
		}
		addr, p, _ := strings.Cut(f["master"], ":")
		if addr != w.c.Nodes[0] || p == "" || port != "" && p != port {
			t.Errorf("rank %d: master %q, want %s and the same port on every rank", rank, f["master"], w.c.Nodes[0])
		}
		port = p
		if w.c.GPUDevices && len(strings.Split(f["gpus"], ",")) != 2 {
			t.Errorf("rank %d: CUDA_VISIBLE_DEVICES=%q, want the two GPUs Slurm allocated on its node", rank, f["gpus"])
		}
		if got, want := strings.SplitN(line, " args=", 2)[1], fmt.Sprintf("%d:%s", len(args), strings.Join(args, " ")); got != want {
			t.Errorf("rank %d: arguments %q, want %q", rank, got, want)
		}
	}
}

// TestMultiNodeStop: a stop reaches the job's handler of SIGTERM on every
// node (srun alone would kill the ranks), and the job ends in Slurm.
func TestMultiNodeStop(t *testing.T) {
	t.Parallel()
	w := newWorldOf(t, twoNodes)
	h := executortest.NewHarness(t, w.exec(t))
	l := h.Launch(t, []string{"/bin/sh", "-c", `trap 'echo "bye $RANK"; exit 0' TERM; echo "up $RANK"; while :; do sleep 0.1; done`},
		func(l *executor.Launch) { l.Resources = domain.Resources{CPUs: 1, Nodes: 2} })
	h.WaitLine(t, l.Ref, "up 0")
	h.WaitLine(t, l.Ref, "up 1")
	t0 := time.Now()
	if err := h.Exec.Stop(context.Background(), l.Ref, executor.StopRequest{Grace: time.Minute}); err != nil {
		t.Fatal(err)
	}
	checkExit(t, h.Wait(t, l.Ref, executor.Exited), domain.AttemptCanceled, domain.ReasonCanceledByUser, intp(0))
	t.Logf("stop to Exited: %v", time.Since(t0))
	got := h.LogLines(t, l.Ref, executor.LogQuery{})
	for _, want := range []string{"bye 0", "bye 1"} {
		if !slices.Contains(got, want) {
			t.Errorf("log %q lacks %q: a rank did not get SIGTERM", got, want)
		}
	}
	id, err := os.ReadFile(filepath.Join(l.Dir, "slurm-job"))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(executortest.WaitTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := w.c.Command(ctx, "squeue", "-h", "-t", "PD,R,CG,S", "-j", strings.TrimSpace(string(id)), "-o", "%T").Output()
		cancel()
		if err == nil && len(strings.TrimSpace(string(out))) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job is still in Slurm's queue (%q, %v) after its attempt ended", out, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMultiNodeRankFails: one rank's failure ends the others (srun
// --kill-on-bad-exit) and the attempt, which fails with srun's exit
// code (the highest of its ranks': here 143, rank 0's SIGTERM); the
// log names the rank that failed first, with its code.
func TestMultiNodeRankFails(t *testing.T) {
	t.Parallel()
	w := newWorldOf(t, twoNodes)
	h := executortest.NewHarness(t, w.exec(t))
	l := h.Launch(t, []string{"/bin/sh", "-c", `if [ "$RANK" = 1 ]; then exit 3; fi; exec sleep 600`},
		func(l *executor.Launch) { l.Resources = domain.Resources{CPUs: 1, Nodes: 2} })
	ev := h.Wait(t, l.Ref, executor.Exited)
	if ev.State != domain.AttemptFailed || ev.Reason != domain.ReasonExitCode || ev.ExitCode == nil || *ev.ExitCode == 0 {
		t.Errorf("exited %s/%s (%q), want failed with an exit code", ev.State, ev.Reason, ev.Message)
	}
	if got := h.LogLines(t, l.Ref, executor.LogQuery{}); !slices.ContainsFunc(got, func(s string) bool {
		return strings.Contains(s, "task 1: Exited with exit code 3")
	}) {
		t.Errorf("log %q does not say that rank 1 exited with code 3", got)
	}
}
