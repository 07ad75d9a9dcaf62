package slurm

import (
	"slices"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/executor"
)

func TestParseQueue(t *testing.T) {
	out := "12|trainyard-5-1|RUNNING|2026-01-02T03:04:05|None\n13|trainyard-6-2|PENDING|2026-01-02T03:04:06|Resources\n\nbad line\n" +
		"14|x|COMPLETED|N/A|None|extra|fields\n"
	got := parseQueue(out)
	at := func(s int) time.Time { return time.Date(2026, 1, 2, 3, 4, s, 0, time.Local) }
	want := []queued{{"12", "trainyard-5-1", "RUNNING", "None", at(5)}, {"13", "trainyard-6-2", "PENDING", "Resources", at(6)},
		{"14", "x", "COMPLETED", "None|extra|fields", time.Time{}}}
	if !slices.Equal(got, want) {
		t.Errorf("parseQueue = %+v, want %+v", got, want)
	}
}

func TestParseNodes(t *testing.T) {
	out := "NodeName=b CPUTot=8 RealMemory=1024 Gres=gpu:a100:4(S:0-1) State=IDLE Partitions=p,q\n" +
		"NodeName=a CPUTot=4 RealMemory=2048 Gres=(null) State=MIXED Partitions=p\n" +
		"NodeName=c CPUTot=4 RealMemory=2048 Gres=gpu:2 State=IDLE+DRAIN Partitions=p\n" +
		"NodeName=d CPUTot=4 RealMemory=2048 Gres=gpu:2 State=IDLE* Partitions=p\n" +
		"NodeName=e CPUTot=4 RealMemory=2048 Gres=gpu:2 State=DOWN Partitions=p\n" +
		"NodeName=f CPUTot=2 RealMemory=512 Gres=gpu:1,gpu:v100:1 State=ALLOCATED Partitions=q\n"
	inv := parseNodes(out, "p")
	want := []executor.Node{{Name: "a", CPUs: 4, Memory: 2048 << 20}, {Name: "b", CPUs: 8, Memory: 1024 << 20, GPUs: []int{0, 1, 2, 3}}}
	if len(inv.Nodes) != len(want) {
		t.Fatalf("nodes %+v, want %+v", inv.Nodes, want)
	}
	for i, n := range inv.Nodes {
		if n.Name != want[i].Name || n.CPUs != want[i].CPUs || n.Memory != want[i].Memory || !slices.Equal(n.GPUs, want[i].GPUs) {
			t.Errorf("node %d = %+v, want %+v", i, n, want[i])
		}
	}
	if all := parseNodes(out, ""); len(all.Nodes) != 3 || len(all.Nodes[2].GPUs) != 2 {
		t.Errorf("every partition: %+v, want a, b and f (2 GPUs)", all.Nodes)
	}
}

func TestOutcomeOf(t *testing.T) {
	stop := &executor.StopRequest{Reason: domain.ReasonPreempted, Message: "for job 9"}
	for _, c := range []struct {
		state    string
		stopping *executor.StopRequest
		ended    bool
		lost     bool
		want     domain.AttemptState
		reason   domain.Reason
	}{
		{state: "PENDING"},
		{state: "RUNNING"},
		{state: "COMPLETING"},
		{state: "CANCELLED", ended: true, want: domain.AttemptCanceled, reason: domain.ReasonCanceledByUser},
		{state: "CANCELLED", stopping: stop, ended: true, want: domain.AttemptCanceled, reason: domain.ReasonPreempted},
		{state: "TIMEOUT", ended: true, want: domain.AttemptTimedOut, reason: domain.ReasonTimeout},
		{state: "OUT_OF_MEMORY", ended: true, want: domain.AttemptFailed, reason: domain.ReasonOOMKilled},
		{state: "NODE_FAIL", ended: true, want: domain.AttemptFailed, reason: domain.ReasonNodeLost},
		{state: "PREEMPTED", ended: true, want: domain.AttemptCanceled, reason: domain.ReasonPreempted},
		{state: "COMPLETED", ended: true, lost: true},
		{state: "FAILED", ended: true, lost: true},
	} {
		out, ended := outcomeOf(queued{id: "7", state: c.state}, c.stopping)
		if ended != c.ended || (out == nil) != (c.lost || !c.ended) {
			t.Errorf("%s: ended %v, outcome %+v", c.state, ended, out)
			continue
		}
		if out != nil && (out.State != c.want || out.Reason != c.reason || out.Message == "") {
			t.Errorf("%s: %s/%s %q, want %s/%s", c.state, out.State, out.Reason, out.Message, c.want, c.reason)
		}
	}
}

func TestSbatchArgs(t *testing.T) {
	e := &Executor{cfg: Config{NamePrefix: "ty", Partition: "gpu", Account: "ml", QoS: "high", KillAfter: 10e9}}
	l := executor.Launch{Ref: executor.Ref{JobID: 5, Attempt: 2}, Dir: "/runs/5/2",
		Resources: domain.Resources{CPUs: 2.5, Memory: 3<<30 + 1, GPUs: 2}, Timeout: 90e9, Grace: 5e9}
	got := e.sbatchArgs(l)
	for _, w := range []string{"--job-name=ty-5-2", "--output=/runs/5/2/slurm.out", "--chdir=/runs/5/2", "--export=ALL",
		"--nodes=1", "--ntasks-per-node=1", "--cpus-per-task=3", "--mem=3073M", "--gres=gpu:2", "--time=2",
		"--partition=gpu", "--account=ml", "--qos=high"} {
		if !slices.Contains(got, w) {
			t.Errorf("sbatch args %q lack %q", got, w)
		}
	}
	e.cfg.Pools = map[string]Target{"big": {Partition: "a100", QoS: "low"}}
	l.Pool = "big"
	got = e.sbatchArgs(l)
	for _, w := range []string{"--partition=a100", "--account=ml", "--qos=low"} {
		if !slices.Contains(got, w) {
			t.Errorf("pool big: sbatch args %q lack %q", got, w)
		}
	}
}

func TestQuote(t *testing.T) {
	if got := quote("/a b/it's"); got != `'/a b/it'\''s'` {
		t.Errorf("quote = %s", got)
	}
}

func TestRefOf(t *testing.T) {
	e := &Executor{cfg: Config{NamePrefix: "ty"}}
	for name, want := range map[string]bool{"ty-5-2": true, "ty-5": false, "ty-x-1": false, "other-5-2": false, "ty-05-2": false, "ty-5-2-1": false} {
		ref, ok := e.refOf(name)
		if ok != want || (ok && ref != (executor.Ref{JobID: 5, Attempt: 2})) {
			t.Errorf("refOf(%q) = %v, %v; want ok %v", name, ref, ok, want)
		}
	}
}

func TestParseAccounting(t *testing.T) {
	out := "12|trainyard-5-1|CANCELLED by 0\n13|trainyard-6-2|OUT_OF_MEMORY\n\n14|x\n"
	got := parseAccounting(out)
	want := []queued{{id: "12", name: "trainyard-5-1", state: "CANCELLED"}, {id: "13", name: "trainyard-6-2", state: "OUT_OF_MEMORY"}}
	if !slices.Equal(got, want) {
		t.Errorf("parseAccounting = %+v, want %+v", got, want)
	}
}

// sbatch, which exports its environment to the batch step, sees a fixed
// PATH, SLURM_CONF and the executor's Env: nothing else of the server's,
// whose variables a job could read from its supervisor.
func TestSbatchEnv(t *testing.T) {
	t.Setenv("TRAINYARD_MASTER_KEY", "secret-of-the-server")
	t.Setenv("SLURM_CONF", "/etc/slurm/test.conf")
	e := &Executor{cfg: Config{Env: []string{"SLURM_TIME_FORMAT=standard"}}}
	got := e.sbatchEnv()
	want := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SLURM_CONF=/etc/slurm/test.conf", "SLURM_TIME_FORMAT=standard"}
	if !slices.Equal(got, want) {
		t.Errorf("sbatch's environment = %q, want %q", got, want)
	}
}

func TestPollWaitStretchesWhileSqueueIsSlow(t *testing.T) {
	for _, c := range []struct{ interval, took, want time.Duration }{
		{time.Second, 10 * time.Millisecond, time.Second},                         // a quick squeue: the interval
		{200 * time.Millisecond, 300 * time.Millisecond, 1200 * time.Millisecond}, // slow: four times its time
		{time.Second, 30 * time.Second, 30 * time.Second},                         // a timeout: capped
		{time.Minute, 30 * time.Second, time.Minute},                              // never under the interval
	} {
		if got := pollWait(c.interval, c.took); got != c.want {
			t.Errorf("pollWait(%v, %v) = %v, want %v", c.interval, c.took, got, c.want)
		}
	}
}
