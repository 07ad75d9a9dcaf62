package control_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"trainyard/internal/blob"
	blobfs "trainyard/internal/blob/fs"
	"trainyard/internal/clock"
	"trainyard/internal/codepkg"
	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/executortest"
	"trainyard/internal/logs"
	"trainyard/internal/service"
)

// codeRig is a control loop and service sharing a store and a blob store.
type codeRig struct {
	*rig
	blobs blob.Store
}

func newCodeRig(t *testing.T, ex *executortest.Fake, opts ...func(*control.Config)) *codeRig {
	t.Helper()
	st, dir := openStore(t)
	bs, err := blobfs.New(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bs.Close() })
	layout := logs.Layout{Root: filepath.Join(dir, "runs")}
	cfg := control.Config{Store: st, Executor: ex, Clock: clock.Real{}, Logs: layout,
		RetryBackoff: time.Millisecond, Grace: time.Second, BaseEnv: []string{"PATH=/usr/bin:/bin"}, Blobs: bs}
	for _, o := range opts {
		o(&cfg)
	}
	ctl := control.New(cfg)
	svc := service.New(service.Config{Store: st, Logs: layout, ArtifactsRoot: filepath.Join(dir, "artifacts"),
		Wake: ctl.Wake, Blobs: bs})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctl.Run(ctx) }()
	// stop returns once the loop and the work it started off the loop
	// have ended.
	r := &rig{t: t, st: st, svc: svc, ex: ex, dir: dir, stop: func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("control loop: %v", err)
		}
	}}
	t.Cleanup(func() {
		if r.stop != nil {
			r.stop()
		}
	})
	pool := domain.Pool{Name: "default", Executor: "local",
		Nodes: []domain.Node{{Name: "fake", CPUs: 8, Memory: 64 << 30, GPUs: []int{0, 1, 2, 3}}}}
	if _, _, err := svc.Pools.PutPool(ctx, admin, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Pools.SetQuota(ctx, admin, domain.Quota{Project: "default", Pool: "default",
		Guaranteed: pool.Capacity(), MaxPriority: domain.PriorityUrgent}); err != nil {
		t.Fatal(err)
	}
	return &codeRig{rig: r, blobs: bs}
}

// upload packages files and stores the package; it returns its hash.
func (r *codeRig) upload(files map[string]string) string {
	r.t.Helper()
	src := r.t.TempDir()
	for name, content := range files {
		p := filepath.Join(src, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	pkg, err := codepkg.Write(&buf, src, codepkg.Options{})
	if err != nil {
		r.t.Fatal(err)
	}
	if _, _, err := r.svc.Jobs.PutCode(context.Background(), admin, pkg.SHA256, &buf, int64(buf.Len())); err != nil {
		r.t.Fatal(err)
	}
	return pkg.SHA256
}

func (r *codeRig) submitCode(spec string, code *domain.CodeRef) domain.Job {
	r.t.Helper()
	j, _, err := r.svc.Jobs.Submit(context.Background(), admin, service.SubmitInput{Doc: []byte(spec), Code: code})
	if err != nil {
		r.t.Fatal(err)
	}
	return j
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// Each attempt of a job with a code package asks the executor for a fresh
// unpack into its own working directory, and is told where its code is.
func TestEachAttemptGetsItsOwnUnpack(t *testing.T) {
	ex := &executortest.Fake{Script: func(l executor.Launch) []executor.Event {
		return []executor.Event{{Kind: executor.Started, PID: 1}, exited(domain.AttemptFailed, domain.ReasonExitCode, 1)}
	}}
	r := newCodeRig(t, ex)
	hash := r.upload(map[string]string{"train.py": "print(1)", "lib/util.py": "x"})
	code := &domain.CodeRef{SHA256: hash, Commit: strings.Repeat("a", 40), Dirty: true}
	j := r.submitCode("name: coded\nentrypoint: [python3, train.py]\npolicy: {retries: 1, reentrant: true}\n", code)
	if got, _ := r.st.GetJob(context.Background(), j.ID); got.Code == nil || *got.Code != *code {
		t.Fatalf("stored code = %+v, want %+v", got.Code, code)
	}
	r.wait(j.ID, domain.JobFailed)
	launches := r.ex.Launches()
	if len(launches) != 2 {
		t.Fatalf("%d attempts launched, want 2", len(launches))
	}
	for i, l := range launches {
		want := filepath.Join(r.dir, "runs", "1", []string{"1", "2"}[i], "work")
		if l.Code == nil || l.Code.Dir != want || l.Code.SHA256 != hash || l.WorkDir != want || envValue(l.Env, "TRAINYARD_CODE_DIR") != want {
			t.Errorf("attempt %d: code %+v, workdir %s, TRAINYARD_CODE_DIR %s; want the package unpacked and run at %s", i+1, l.Code, l.WorkDir, envValue(l.Env, "TRAINYARD_CODE_DIR"), want)
		}
		if envValue(l.Env, "TRAINYARD_CODE_SHA256") != hash || envValue(l.Env, "TRAINYARD_GIT_COMMIT") != code.Commit {
			t.Errorf("attempt %d environment lacks the package hash or commit: %q", i+1, l.Env)
		}
	}
}

// A spec workdir keeps the process where it says; the package is still
// unpacked, at TRAINYARD_CODE_DIR.
func TestSpecWorkdirWinsOverThePackage(t *testing.T) {
	r := newCodeRig(t, &executortest.Fake{})
	hash := r.upload(map[string]string{"train.py": "print(1)"})
	wd := t.TempDir()
	j := r.submitCode("name: wd\nentrypoint: [x]\nworkdir: "+wd+"\n", &domain.CodeRef{SHA256: hash})
	r.wait(j.ID, domain.JobSucceeded)
	l := r.ex.Launches()[0]
	codeDir := envValue(l.Env, "TRAINYARD_CODE_DIR")
	if l.WorkDir != wd || codeDir == "" || codeDir == wd || l.Code == nil || l.Code.Dir != codeDir {
		t.Fatalf("workdir %s, code dir %s, code %+v; want the spec's %s and the package at a separate code dir", l.WorkDir, codeDir, l.Code, wd)
	}
	if envValue(l.Env, "TRAINYARD_GIT_COMMIT") != "" {
		t.Errorf("TRAINYARD_GIT_COMMIT set for a package without a commit")
	}
}

// A package that cannot be read ends the attempt LaunchFailed, saying why
// (the executor's unpack tests cover archives that are not packages).
func TestBadPackageFailsTheLaunch(t *testing.T) {
	tests := map[string]struct {
		spoil func(t *testing.T, bs blob.Store, key string)
		want  string
	}{
		"missing": {func(t *testing.T, bs blob.Store, key string) {
			if err := bs.Delete(context.Background(), key); err != nil {
				t.Fatal(err)
			}
		}, "missing from the blob store"},
		"corrupt": {func(t *testing.T, bs blob.Store, key string) {
			rc, _, err := bs.Get(context.Background(), key)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)-1] ^= 0xff // in the gzip trailer's length: every file still unpacks
			if _, err := bs.Put(context.Background(), key, bytes.NewReader(b), int64(len(b))); err != nil {
				t.Fatal(err)
			}
		}, "corrupt"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			// The first job holds the only node, so the second waits in
			// the queue while its package is spoiled.
			ex := &executortest.Fake{Script: func(l executor.Launch) []executor.Event {
				if l.Ref.JobID == 1 {
					return []executor.Event{{Kind: executor.Started, PID: 1}}
				}
				return []executor.Event{{Kind: executor.Started, PID: 2}, exited(domain.AttemptSucceeded, domain.ReasonCompleted, 0)}
			}}
			r := newCodeRig(t, ex)
			hash := r.upload(map[string]string{"train.py": strings.Repeat("print(1)\n", 100)})
			r.submitCode("name: blocker\nentrypoint: [x]\nresources: {cpus: 8}\n", nil)
			r.wait(1, domain.JobRunning)
			j := r.submitCode("name: bad\nentrypoint: [x]\nresources: {cpus: 8}\n", &domain.CodeRef{SHA256: hash})
			tc.spoil(t, r.blobs, codepkg.BlobKey(hash))
			ex.Emit(executor.Event{Ref: executor.Ref{JobID: 1, Attempt: 1}, Kind: executor.Exited, At: time.Now().UTC(),
				State: domain.AttemptSucceeded, Reason: domain.ReasonCompleted})
			j = r.wait(j.ID, domain.JobFailed, domain.JobSucceeded)
			if j.State != domain.JobFailed || j.Reason != domain.ReasonLaunchFailed ||
				!strings.Contains(j.Message, "code package "+hash) || !strings.Contains(j.Message, tc.want) {
				t.Fatalf("job %s %s %q; want failed LaunchFailed naming the package and %q", j.State, j.Reason, j.Message, tc.want)
			}
			if n := len(r.ex.Launches()); n != 1 {
				t.Errorf("the executor was asked to launch %d attempts, want only the blocker's", n)
			}
		})
	}
}

// Every attempt that ended is released to the executor once its end is
// recorded (its unpacked package, HOME and tmp go: the executor's tests
// cover what goes).
func TestEndedAttemptsAreReleased(t *testing.T) {
	ex := &executortest.Fake{}
	r := newCodeRig(t, ex)
	hash := r.upload(map[string]string{"train.py": "print(1)"})
	coded := r.submitCode("name: coded\nentrypoint: [x]\n", &domain.CodeRef{SHA256: hash})
	plain := r.submitCode("name: plain\nentrypoint: [x]\n", nil)
	for _, j := range []domain.Job{coded, plain} {
		r.wait(j.ID, domain.JobSucceeded)
	}
	r.stop() // returns once the releases are done
	r.stop = nil
	got := ex.Released()
	slices.SortFunc(got, func(a, b executor.Ref) int { return int(a.JobID - b.JobID) })
	if want := []executor.Ref{{JobID: coded.ID, Attempt: 1}, {JobID: plain.ID, Attempt: 1}}; !slices.Equal(got, want) {
		t.Errorf("released %v, want %v", got, want)
	}
}

// A launch that cannot prepare the job's output directories ends the
// attempt ArtifactWriteFailed, with the executor's words.
func TestUnwritableOutputsEndArtifactWriteFailed(t *testing.T) {
	ex := &executortest.Fake{LaunchFunc: func(ctx context.Context, l executor.Launch) error {
		return fmt.Errorf("%w: mkdir %s: no space left on device", executor.ErrOutputs, l.Writable[0])
	}}
	r := newCodeRig(t, ex)
	j := r.submitCode("name: full\nentrypoint: [x]\n", nil)
	j = r.wait(j.ID, domain.JobFailed)
	if j.Reason != domain.ReasonArtifactWrite || !strings.Contains(j.Message, "no space left on device") {
		t.Errorf("job ended %s %q, want ArtifactWriteFailed naming the cause", j.Reason, j.Message)
	}
}
