package control_test

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"trainyard/internal/clock"
	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/executor/local"
	"trainyard/internal/logs"
	"trainyard/internal/scheduler"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
	"trainyard/internal/store/sqlite/sqlitetest"
)

type rig struct {
	t    *testing.T
	st   store.Store
	svc  *service.Service
	ex   *executortest.Fake
	dir  string
	stop func()
	// tune, when set, adjusts each controller's config before it starts;
	// ctl is the running controller.
	tune func(*control.Config)
	ctl  *control.Controller
}

var admin = service.Principal{Subject: "admin", Role: "admin"}

func newRig(t *testing.T, ex *executortest.Fake) *rig {
	t.Helper()
	return newTunedRig(t, ex, nil)
}

// newTunedRig is newRig with tune applied to every controller's config.
func newTunedRig(t *testing.T, ex *executortest.Fake, tune func(*control.Config)) *rig {
	t.Helper()
	st, dir := openStore(t)
	r := &rig{t: t, st: st, ex: ex, dir: dir, tune: tune}
	r.start()
	// Pool "default" is the fake executor's inventory, with a full quota
	// for project "default".
	inv, err := ex.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	pool := domain.Pool{Name: "default", Executor: "local", Preemption: true}
	for _, n := range inv.Nodes {
		pool.Nodes = append(pool.Nodes, domain.Node{Name: n.Name, CPUs: n.CPUs, Memory: n.Memory, GPUs: n.GPUs})
	}
	if _, _, err := r.svc.Pools.PutPool(context.Background(), admin, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := r.svc.Pools.SetQuota(context.Background(), admin, domain.Quota{Project: "default", Pool: "default",
		Guaranteed: pool.Capacity(), MaxPriority: domain.PriorityUrgent}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if r.stop != nil {
			r.stop()
		}
	})
	return r
}

// onDisk is the rig's executor: the Fake runs the attempts, whose scripts
// write the jobs' outputs to disk as real jobs do, and those are read as
// the local executor reads them.
type onDisk struct {
	*executortest.Fake
	disk executor.Files
}

func (o onDisk) Outputs(ctx context.Context, dir string) (executor.Outputs, error) {
	return o.disk.Outputs(ctx, dir)
}

// start runs a fresh controller over the rig's store and executor.
func (r *rig) start() {
	cfg := control.Config{Store: r.st, Executor: onDisk{r.ex, local.NewReader(filepath.Join(r.dir, "runs"))}, Clock: clock.Real{},
		Logs: logs.Layout{Root: filepath.Join(r.dir, "runs")}, RetryBackoff: time.Millisecond, Grace: time.Second,
		BaseEnv: []string{"PATH=/usr/bin:/bin"}, CheckPass: checkPass(r.t)}
	if r.tune != nil {
		r.tune(&cfg)
	}
	ctl := control.New(cfg)
	r.ctl = ctl
	r.svc = service.New(service.Config{Store: r.st, Logs: logs.Layout{Root: filepath.Join(r.dir, "runs")},
		ArtifactsRoot: filepath.Join(r.dir, "artifacts"), Wake: ctl.Wake})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctl.Run(ctx) }()
	r.stop = func() {
		cancel()
		if err := <-done; err != nil {
			r.t.Errorf("control loop: %v", err)
		}
	}
}

// checkPass fails the test when a pass the loop made from what it knew
// changed differs from a full pass over the same snapshot.
func checkPass(t *testing.T) func(pass, full scheduler.Plan) {
	norm := func(p scheduler.Plan) scheduler.Plan { // empty and nil slices alike
		if len(p.Start) == 0 {
			p.Start = nil
		}
		if len(p.Preempt) == 0 {
			p.Preempt = nil
		}
		if len(p.Waiting) == 0 {
			p.Waiting = nil
		}
		return p
	}
	return func(pass, full scheduler.Plan) {
		if !reflect.DeepEqual(norm(pass), norm(full)) {
			t.Errorf("the loop's pass differs from a full pass:\n%+v\nfull:\n%+v", pass, full)
		}
	}
}

func (r *rig) restart() {
	r.stop()
	r.stop = nil
	r.start()
}

func (r *rig) submit(spec string) domain.Job {
	r.t.Helper()
	j, _, err := r.svc.Jobs.Submit(context.Background(), admin, service.SubmitInput{Doc: []byte(spec)})
	if err != nil {
		r.t.Fatal(err)
	}
	return j
}

func (r *rig) wait(id int64, states ...domain.JobState) domain.Job {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		j, err := r.st.GetJob(context.Background(), id)
		if err != nil {
			r.t.Fatal(err)
		}
		if slices.Contains(states, j.State) {
			return j
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("job %d is %s (%s: %s), want one of %v", id, j.State, j.Reason, j.Message, states)
		}
		time.Sleep(time.Millisecond)
	}
}

func (r *rig) attempts(id int64) []domain.Attempt {
	a, err := r.st.ListAttempts(context.Background(), id)
	if err != nil {
		r.t.Fatal(err)
	}
	return a
}

func exited(state domain.AttemptState, reason domain.Reason, code int) executor.Event {
	return executor.Event{Kind: executor.Exited, At: time.Now().UTC(), State: state, Reason: reason, ExitCode: &code}
}

func TestJobRunsToSuccessWithItsEnvironment(t *testing.T) {
	r := newRig(t, &executortest.Fake{})
	j := r.submit("name: ok\nentrypoint: [train, --fast]\nparams: {lr: '0.1'}\nenv_vars: {NCCL_DEBUG: WARN}\nresources: {gpus: 2}\n")
	r.wait(j.ID, domain.JobSucceeded)

	evs, _ := r.st.ListEvents(context.Background(), j.ID)
	var path []domain.JobState
	for _, e := range evs {
		path = append(path, e.To)
	}
	if want := []domain.JobState{domain.JobQueued, domain.JobStarting, domain.JobRunning, domain.JobSucceeded}; !slices.Equal(path, want) {
		t.Fatalf("transitions %v, want %v", path, want)
	}
	l := r.ex.Launches()[0]
	if !slices.Equal(l.Argv, []string{"train", "--fast"}) || l.Ref != (executor.Ref{JobID: j.ID, Attempt: 1}) {
		t.Errorf("launch = %+v", l)
	}
	env := strings.Join(l.Env, "\n")
	for _, want := range []string{"PATH=/usr/bin:/bin", "NCCL_DEBUG=WARN", "TRAINYARD_PARAM_LR=0.1", "TRAINYARD_JOB_ID=1",
		"TRAINYARD_ATTEMPT=1", "TRAINYARD_OUTPUT_DIR=" + j.OutputDir} {
		if !strings.Contains(env, want) {
			t.Errorf("environment lacks %s:\n%s", want, env)
		}
	}
	// The device and rank environment is the executor's to set, and so is
	// the checkpoint to resume from (from Resume, which the executor checks).
	for _, own := range []string{"CUDA_VISIBLE_DEVICES", "TRAINYARD_RESUME_FROM"} {
		if strings.Contains(env, own) {
			t.Errorf("control set %s itself:\n%s", own, env)
		}
	}
	if l.CheckpointDir != filepath.Join(j.OutputDir, "checkpoints") || len(l.Resume) != 0 {
		t.Errorf("launch checkpoint dir %q, resume %v; want the job's checkpoints and nothing to resume", l.CheckpointDir, l.Resume)
	}
	if len(l.Placement.Nodes) != 1 || l.Placement.Nodes[0].Name != "fake" || !slices.Equal(l.Placement.GPUs(0), []int{0, 1}) {
		t.Errorf("placement = %+v, want node fake with GPUs 0,1", l.Placement)
	}
}

func TestRetriesThenFails(t *testing.T) {
	ex := &executortest.Fake{Script: func(l executor.Launch) []executor.Event {
		return []executor.Event{{Kind: executor.Started, PID: 1}, exited(domain.AttemptFailed, domain.ReasonExitCode, 3)}
	}}
	r := newRig(t, ex)
	j := r.submit("name: flaky\nentrypoint: [x]\npolicy: {retries: 2, reentrant: true}\n")
	final := r.wait(j.ID, domain.JobFailed)
	if final.Reason != domain.ReasonExitCode || !strings.Contains(final.Message, "no retries left") {
		t.Errorf("final = %s %q", final.Reason, final.Message)
	}
	if a := r.attempts(j.ID); len(a) != 3 || *a[2].ExitCode != 3 {
		t.Fatalf("attempts = %+v, want 3 with exit code 3", a)
	}
	// Non-reentrant jobs get exactly one attempt.
	once := r.submit("name: once\nentrypoint: [x]\n")
	r.wait(once.ID, domain.JobFailed)
	if a := r.attempts(once.ID); len(a) != 1 {
		t.Fatalf("%d attempts for a non-reentrant job", len(a))
	}
}

func TestLostAttemptFailsWithNodeLost(t *testing.T) {
	ex := &executortest.Fake{Script: func(l executor.Launch) []executor.Event {
		return []executor.Event{{Kind: executor.Started, PID: 1}, {Kind: executor.Lost}}
	}}
	r := newRig(t, ex)
	j := r.wait(r.submit("name: lost\nentrypoint: [x]\n").ID, domain.JobFailed)
	if j.Reason != domain.ReasonNodeLost || r.attempts(j.ID)[0].State != domain.AttemptLost {
		t.Fatalf("job %s, attempt %s", j.Reason, r.attempts(j.ID)[0].State)
	}
}

func TestLaunchFailureIsRecorded(t *testing.T) {
	r := newRig(t, &executortest.Fake{LaunchFunc: func(context.Context, executor.Launch) error {
		return errors.New("no shim binary")
	}})
	j := r.wait(r.submit("name: nolaunch\nentrypoint: [x]\n").ID, domain.JobFailed)
	if j.Reason != domain.ReasonLaunchFailed || !strings.Contains(j.Message, "no shim binary") {
		t.Fatalf("job %s %q", j.Reason, j.Message)
	}
}

func TestCancelRunningStopsTheAttempt(t *testing.T) {
	ex := &executortest.Fake{Script: func(l executor.Launch) []executor.Event {
		return []executor.Event{{Kind: executor.Started, PID: 1}}
	}}
	r := newRig(t, ex)
	j := r.submit("name: long\nentrypoint: [x]\n")
	r.wait(j.ID, domain.JobRunning)
	if _, err := r.svc.Jobs.Cancel(context.Background(), admin, j.ID, "enough"); err != nil {
		t.Fatal(err)
	}
	final := r.wait(j.ID, domain.JobCanceled)
	if final.Message != "canceled by admin: enough" || final.CancelRequested {
		t.Errorf("canceled job: %q, cancel flag %v", final.Message, final.CancelRequested)
	}
	if s := ex.Stops(); len(s) != 1 || s[0] != (executor.Ref{JobID: j.ID, Attempt: 1}) {
		t.Errorf("stops = %v", s)
	}
}

func TestCapacityIsRespectedAndReasonsRecorded(t *testing.T) {
	ex := &executortest.Fake{
		Script: func(l executor.Launch) []executor.Event { return []executor.Event{{Kind: executor.Started, PID: 1}} },
		InventoryFunc: func(context.Context) (executor.Inventory, error) {
			return executor.Inventory{Nodes: []executor.Node{{Name: "n1", CPUs: 2, Memory: 8 << 30}}}, nil
		},
	}
	r := newRig(t, ex)
	a := r.submit("name: a\nentrypoint: [x]\nresources: {cpus: 2}\n")
	b := r.submit("name: b\nentrypoint: [x]\nresources: {cpus: 1}\n")
	r.wait(a.ID, domain.JobRunning)
	deadline := time.Now().Add(5 * time.Second)
	for {
		j, _ := r.st.GetJob(context.Background(), b.ID)
		// The quota is the whole pool, so the quota is what the job waits on.
		if j.Reason == domain.ReasonQuotaExceeded && strings.Contains(j.Message, "uses 2 of 2 CPUs") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queued job reason %s %q", j.Reason, j.Message)
		}
		time.Sleep(time.Millisecond)
	}
	ex.Emit(executor.Event{Ref: executor.Ref{JobID: a.ID, Attempt: 1}, Kind: executor.Exited, State: domain.AttemptSucceeded, Reason: domain.ReasonCompleted})
	r.wait(b.ID, domain.JobRunning)
}

func TestRestartReattachesInsteadOfRelaunching(t *testing.T) {
	ex := &executortest.Fake{Script: func(l executor.Launch) []executor.Event {
		return []executor.Event{{Kind: executor.Started, PID: 1}}
	}}
	r := newRig(t, ex)
	j := r.submit("name: survivor\nentrypoint: [x]\n")
	r.wait(j.ID, domain.JobRunning)
	r.restart()
	deadline := time.Now().Add(5 * time.Second)
	for len(ex.Launches()) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("restarted controller did not reattach")
		}
		time.Sleep(time.Millisecond)
	}
	if l := ex.Launches(); l[1].Ref != l[0].Ref {
		t.Fatalf("restart launched %v, want the same attempt %v again (idempotent reattach)", l[1].Ref, l[0].Ref)
	}
	ex.Emit(executor.Event{Ref: executor.Ref{JobID: j.ID, Attempt: 1}, Kind: executor.Exited, State: domain.AttemptSucceeded, Reason: domain.ReasonCompleted})
	r.wait(j.ID, domain.JobSucceeded)
	if n := len(r.attempts(j.ID)); n != 1 {
		t.Fatalf("%d attempts after restart, want 1", n)
	}
}

// openStore opens a SQLite store in a new directory, closed when the test
// ends, and returns it with the directory.
func openStore(t *testing.T) (*sqlite.Store, string) {
	t.Helper()
	dir := t.TempDir()
	return sqlitetest.Open(t, dir), dir
}
