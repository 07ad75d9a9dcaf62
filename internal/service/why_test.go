package service_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
	"trainyard/internal/store/sqlite/sqlitetest"
)

// why says a job is held from preemption, until when and why, while its
// preemption_thrash alert fires, and stops saying it once that resolves.
func TestWhySaysAJobIsHeldFromPreemption(t *testing.T) {
	ctx := context.Background()
	st := sqlitetest.Open(t, t.TempDir())
	svc := service.New(service.Config{Store: st})
	spec := domain.Spec{Name: "sweep", Project: "vision", Pool: "standard", Entrypoint: []string{"train"},
		Resources: domain.Resources{CPUs: 1, Memory: 1 << 30, Nodes: 1}, Policy: domain.Policy{Priority: domain.PriorityLow}}
	job := storeJob(t, st, spec)
	summary := fmt.Sprintf("job %d (sweep) was preempted 4 times in 30m, for jobs 3, 5; it is held from preemption until 2026-03-01 13:00:00 UTC", job.ID)
	record := func(rule string, state domain.AlertState) {
		t.Helper()
		a := domain.Alert{Key: fmt.Sprintf("%s/job=%d", rule, job.ID), Rule: rule, Severity: "warning", State: state,
			Summary: summary, JobID: job.ID, FiredAt: time.Now(), ResolvedAt: time.Now()}
		if _, err := st.RecordAlerts(ctx, []store.AlertTransition{{Alert: a}}); err != nil {
			t.Fatal(err)
		}
	}
	held := func() bool {
		t.Helper()
		w, err := svc.Jobs.Explain(ctx, admin, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(w.Evidence, func(e string) bool { return strings.Contains(e, "held from preemption until") })
	}
	record("queued_too_long", domain.AlertFiring) // another rule's alert says nothing of a hold
	if held() {
		t.Fatal("why says the job is held before any hold")
	}
	record("preemption_thrash", domain.AlertFiring)
	if !held() {
		t.Fatal("why does not say the job is held while preemption_thrash fires")
	}
	record("preemption_thrash", domain.AlertResolved)
	if held() {
		t.Fatal("why still says the job is held after the hold ended")
	}
}

// why on a canceled job points at rerun, which needs only the job id, not
// at submitting a spec file the user may no longer have.
func TestWhyOfCanceledJobSuggestsRerun(t *testing.T) {
	ctx := context.Background()
	st := sqlitetest.Open(t, t.TempDir())
	svc := service.New(service.Config{Store: st})
	pool := domain.Pool{Name: "default", Nodes: []domain.Node{{Name: "n1", CPUs: 8, Memory: 32 << 30}}}
	if _, _, err := svc.Pools.PutPool(ctx, admin, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Pools.SetQuota(ctx, admin, domain.Quota{Project: "default", Pool: "default", Guaranteed: pool.Capacity()}); err != nil {
		t.Fatal(err)
	}
	job, _, err := svc.Jobs.Submit(ctx, admin, service.SubmitInput{Doc: []byte("name: j\nentrypoint: [\"true\"]\n")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Jobs.Cancel(ctx, admin, job.ID, "wrong lr"); err != nil {
		t.Fatal(err)
	}
	w, err := svc.Jobs.Explain(ctx, admin, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("trainyard rerun %d", job.ID); !strings.Contains(w.Hint, want) || strings.Contains(w.Hint, "submit FILE") {
		t.Errorf("hint %q, want it to suggest %q", w.Hint, want)
	}
}

// why on a queued job in a pool without quotas states the open pool's rule;
// once a quota is set there it no longer does.
func TestWhyStatesTheOpenPoolRule(t *testing.T) {
	ctx := context.Background()
	st := sqlitetest.Open(t, t.TempDir())
	svc := service.New(service.Config{Store: st})
	pool := domain.Pool{Name: "default", Executor: service.ExecutorLocal, Nodes: []domain.Node{{Name: "n1", CPUs: 2, Memory: 4 << 30}}}
	if _, _, err := svc.Pools.PutPool(ctx, admin, pool); err != nil {
		t.Fatal(err)
	}
	spec := domain.Spec{Name: "plain", Project: "vision", Pool: "default", Entrypoint: []string{"train"},
		Resources: domain.Resources{CPUs: 1, Memory: 1 << 30, Nodes: 1}}
	job := storeJob(t, st, spec)
	open := func() bool {
		t.Helper()
		w, err := svc.Jobs.Explain(ctx, admin, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(w.Evidence, func(e string) bool { return strings.Contains(e, "pool default is open") })
	}
	if !open() {
		t.Fatal("why does not say pool default is open")
	}
	if _, err := svc.Pools.SetQuota(ctx, admin, domain.Quota{Project: "nlp", Pool: "default", Guaranteed: domain.Limits{CPUs: 1}}); err != nil {
		t.Fatal(err)
	}
	if open() {
		t.Fatal("why still says the pool is open after a quota was set in it")
	}
}

// storeJob stores a queued job of spec, submitted by alice, as submit
// would, without admission.
func storeJob(t *testing.T, st *sqlite.Store, spec domain.Spec) domain.Job {
	t.Helper()
	raw, _ := json.Marshal(spec)
	sum := sha256.Sum256(raw)
	job, _, err := st.CreateJob(context.Background(), store.NewJob{Spec: spec, SpecJSON: raw, SpecHash: "sha256:" + hex.EncodeToString(sum[:]),
		Submitter: "alice", Actor: "user:alice", SubmittedAt: time.Now(), OutputDir: func(id int64) string { return fmt.Sprintf("/out/%d", id) }}, domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK})
	if err != nil {
		t.Fatal(err)
	}
	return job
}

// why on a starting job whose executor says why it cannot start (a pod
// Kubernetes cannot place) gives that reason and what to check.
func TestWhyNamesWhatHoldsAStartingAttempt(t *testing.T) {
	ctx := context.Background()
	st := sqlitetest.Open(t, t.TempDir())
	var asked []string
	waiting := "Kubernetes cannot place a pod: 0/2 nodes are available: 1 node(s) had untolerated taint {dedicated: ml}"
	svc := service.New(service.Config{Store: st, Waiting: func(id int64, attempt int) string {
		asked = append(asked, fmt.Sprintf("%d/%d", id, attempt))
		return waiting
	}})
	spec := domain.Spec{Name: "plain", Project: "vision", Pool: "a100", Entrypoint: []string{"train"},
		Resources: domain.Resources{CPUs: 1, Memory: 1 << 30, Nodes: 1}}
	job := storeJob(t, st, spec)
	start := store.Change{JobID: job.ID, Move: domain.MoveStart(), At: time.Now(),
		Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting, Node: "ip-10-0-0-7"}}
	if errs, err := st.Apply(ctx, []store.Change{start}); err != nil || errs[0] != nil {
		t.Fatalf("start: %v %v", err, errs)
	}
	w, err := svc.Jobs.Explain(ctx, admin, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(w.Evidence, waiting) || !strings.Contains(w.Hint, "tolerations") || !strings.Contains(w.Hint, "pool show a100") {
		t.Errorf("evidence %q, hint %q; want the executor's reason and what to check", w.Evidence, w.Hint)
	}
	if want := []string{fmt.Sprintf("%d/1", job.ID)}; !slices.Equal(asked, want) {
		t.Errorf("asked the executor about %v, want %v", asked, want)
	}
	waiting = ""
	if w, _ = svc.Jobs.Explain(ctx, admin, job.ID); strings.Contains(w.Hint, "tolerations") {
		t.Errorf("hint %q with nothing holding the attempt", w.Hint)
	}
}
