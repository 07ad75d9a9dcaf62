package web_test

import (
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store"
)

const gpuSpec = `name: %s
project: vision
pool: gpu
entrypoint: ["true"]
resources: {gpus: 2, cpus: 4, memory: 8GiB}
`

// start starts job id as the control loop would: an attempt placed (on
// borrowed capacity when borrowed is true), the job starting.
func (e *queueEnv) start(id int64, borrowed ...bool) {
	e.t.Helper()
	errs, err := e.st.Apply(e.t.Context(), []store.Change{{JobID: id, Move: domain.MoveStart(), At: time.Now(), Actor: "test",
		Attempt: &store.AttemptChange{Create: true, Number: 1, To: domain.AttemptStarting, Node: "g1", Borrowed: len(borrowed) > 0 && borrowed[0]}}})
	if err == nil {
		err = errs[0]
	}
	if err != nil {
		e.t.Fatalf("start job %d: %v", id, err)
	}
}

// gpuPool adds pool gpu (4 GPUs, 32 CPUs, 128GiB, borrowing) with a
// quota for vision of 2 GPUs, and 2 more to borrow.
func (e *queueEnv) gpuPool() {
	e.t.Helper()
	ctx := e.t.Context()
	pool := domain.Pool{Name: "gpu", GPUType: "a100", Borrowing: true, Preemption: true,
		Nodes: []domain.Node{{Name: "g1", CPUs: 32, Memory: 128 << 30, GPUs: []int{0, 1, 2, 3}}}}
	if _, _, err := e.svc.Pools.PutPool(ctx, adminP, pool); err != nil {
		e.t.Fatal(err)
	}
	q := domain.Quota{Project: "vision", Pool: "gpu", Guaranteed: domain.Limits{GPUs: 2}, Borrow: domain.Limits{GPUs: 2}, MaxPriority: domain.PriorityHigh}
	if _, err := e.svc.Pools.SetQuota(ctx, adminP, q); err != nil {
		e.t.Fatal(err)
	}
	q = domain.Quota{Project: "audio", Pool: "gpu", Guaranteed: domain.Limits{GPUs: 1, CPUs: 8, Memory: 32 << 30, Jobs: 2}}
	if _, err := e.svc.Pools.SetQuota(ctx, adminP, q); err != nil {
		e.t.Fatal(err)
	}
}

var tagRe = regexp.MustCompile(`<[^>]+>`)

// cell is the text of the element with id's cell of class.
func cell(t *testing.T, body, id, class string) string {
	t.Helper()
	i := strings.Index(body, `id="`+id+`"`)
	if i < 0 {
		t.Fatalf("no row %s", id)
	}
	rest := body[i:]
	j := strings.Index(rest, `class="`+class+`">`)
	if j < 0 {
		t.Fatalf("row %s has no %s", id, class)
	}
	rest = rest[j+len(`class="`+class+`">`):]
	return strings.TrimSpace(tagRe.ReplaceAllString(rest[:strings.Index(rest, "</td>")], ""))
}

// TestPoolsPage: every pool with its capacity and what it holds, and per
// project its quota, its use and what it borrows.
func TestPoolsPage(t *testing.T) {
	e := newQueueEnv(t)
	e.gpuPool()
	alice := e.user("alice", "member@vision")
	first := e.submit(alice, fmt.Sprintf(gpuSpec, "one"))
	second := e.submit(alice, fmt.Sprintf(gpuSpec, "two"))
	e.start(first.ID)
	e.start(second.ID, true)
	open := e.submit(e.admin, fmt.Sprintf(spec, "cpu", "default"))
	e.start(open.ID)

	code, body := e.signIn(e.admin).get("/pools")
	if code != http.StatusOK {
		t.Fatalf("pools: %d", code)
	}
	for _, want := range []string{
		`id="pool-default"`, `id="pool-gpu"`, "a100", "4 GPU · 32 CPU · 128GiB",
		`<meter min="0" max="4" high="3.6" value="4">4 of 4 GPUs</meter>`, "8 of 32 CPUs", "1 of 8 CPUs",
		"open: no project has a quota", "2 GPU · any CPU · any memory", "gpu: GPUs held, average per 15m", "up to 2 GPU", "high",
		"1 GPU · 8 CPU · 32GiB · 2 jobs", "4 of 2 guaranteed GPUs", `data-live="/pools/live"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if got := cell(t, body, "quota-gpu-vision", "quota-used"); got != "4 GPU · 8 CPU · 16GiB · 2 jobs" {
		t.Errorf("vision uses %q", got)
	}
	// The second job does not fit the 2-GPU guarantee: it is borrowed.
	if got := cell(t, body, "quota-gpu-vision", "quota-borrowed"); got != "2 GPU · 4 CPU · 8GiB · 1 job" {
		t.Errorf("vision borrows %q", got)
	}
	if got := cell(t, body, "quota-gpu-audio", "quota-used"); got != "nothing" {
		t.Errorf("audio uses %q", got)
	}
	// In the open pool nothing is borrowed, and a project there needs no quota.
	if got := cell(t, body, "quota-default-default", "quota-borrowed"); got != "nothing" {
		t.Errorf("default borrows %q in an open pool", got)
	}

	// Once the first ends, the second fills the guarantee: nothing is
	// borrowed, whatever its attempt was marked when placed.
	if _, err := e.svc.Jobs.Cancel(t.Context(), adminP, first.ID, ""); err != nil {
		t.Fatal(err)
	}
	errs, err := e.st.Apply(t.Context(), []store.Change{{JobID: first.ID, Move: domain.MoveCancel(), At: time.Now(), Actor: "test",
		Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptCanceled}}})
	if err != nil || errs[0] != nil {
		t.Fatalf("end job %d: %v %v", first.ID, err, errs)
	}
	_, body = e.signIn(e.admin).get("/pools")
	if got := cell(t, body, "quota-gpu-vision", "quota-borrowed"); got != "nothing" {
		t.Errorf("after the first ended, vision borrows %q", got)
	}
}

// TestPoolsForAMemberAndForNobody: pools and quotas are read by any role,
// as in the API; a user without one gets the service's refusal.
func TestPoolsForAMemberAndForNobody(t *testing.T) {
	e := newQueueEnv(t)
	e.gpuPool()
	code, body := e.signIn(e.user("bob", "member@vision")).get("/pools")
	if code != http.StatusOK || !strings.Contains(body, `id="quota-gpu-vision"`) || !strings.Contains(body, `id="quota-gpu-audio"`) {
		t.Errorf("a member's pools page: %d", code)
	}
	code, body = e.signIn(e.user("nobody")).get("/pools")
	if code != http.StatusForbidden {
		t.Errorf("a user without a role: %d, want 403", code)
	}
	if strings.Contains(body, `id="pool-gpu"`) {
		t.Error("a refused page shows a pool")
	}
}

// TestPoolsLive: the live stream sends the pools' part, and again when a
// job starts.
func TestPoolsLive(t *testing.T) {
	e := newQueueEnv(t)
	e.gpuPool()
	j := e.submit(e.user("alice", "member@vision"), fmt.Sprintf(gpuSpec, "one"))
	ev := e.signIn(e.admin).stream("/pools/live")
	if m := ev.next(); !strings.Contains(m, `id="pool-gpu"`) || !strings.Contains(m, "0 of 4 GPUs") {
		t.Fatalf("first message:\n%s", m)
	}
	e.start(j.ID)
	ev.until(func(m string) bool { return strings.Contains(m, "2 of 4 GPUs") })
}

// TestPoolsHistory: what a pool's attempts held, step by step, from
// their start and end, drawn on the page.
func TestPoolsHistory(t *testing.T) {
	e := newQueueEnv(t)
	e.gpuPool()
	j := e.submit(e.user("alice", "member@vision"), fmt.Sprintf(gpuSpec, "one"))
	from, to := time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour)
	zero := 0
	errs, err := e.st.Apply(t.Context(), []store.Change{
		{JobID: j.ID, Move: domain.MoveStart(), At: from, Actor: "test",
			Attempt: &store.AttemptChange{Create: true, Number: 1, To: domain.AttemptStarting, Node: "g1"}},
		{JobID: j.ID, Move: domain.MoveRun(), At: from, Actor: "test",
			Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}},
		{JobID: j.ID, Move: domain.MoveSucceed(), At: to, Actor: "test",
			Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptSucceeded, ExitCode: &zero}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
	}
	hs, err := e.svc.Cost.UsageHistory(t.Context(), adminP, 24*time.Hour, 24)
	if err != nil {
		t.Fatal(err)
	}
	var gpu *service.PoolHistory
	for i := range hs {
		if hs[i].Pool == "gpu" {
			gpu = &hs[i]
		}
	}
	if gpu == nil || len(gpu.GPUs) != 24 {
		t.Fatalf("no 24 steps of pool gpu: %+v", hs)
	}
	sum := 0.0
	for _, g := range gpu.GPUs {
		sum += g
	}
	// 2 GPUs for one hour, in hour-long steps: the step before last but
	// one holds (nearly) all of it.
	if math.Abs(gpu.GPUs[22]-2) > 0.01 || math.Abs(sum-2) > 1e-6 || math.Abs(gpu.CPUs[22]-4) > 0.02 {
		t.Errorf("held GPUs by hour %v, CPUs %v", gpu.GPUs, gpu.CPUs)
	}
	_, body := e.signIn(e.admin).get("/pools")
	for _, want := range []string{`aria-label="gpu: GPUs held, average per 15m"`, `data-series="GPUs held"`, `aria-label="default: CPUs held, average per 15m"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if _, err := e.svc.Cost.UsageHistory(t.Context(), adminP, 0, 24); err == nil {
		t.Error("a window of 0 is accepted")
	}
}

// TestPoolsShowGrants: a compute grant in force shows with the quota it
// raises, and makes a row of its own for a project without a quota.
func TestPoolsShowGrants(t *testing.T) {
	e := newQueueEnv(t)
	e.gpuPool()
	ctx := t.Context()
	for _, project := range []string{"vision", "speech"} {
		r, err := e.svc.Pools.RequestQuota(ctx, adminP, domain.QuotaRequest{Project: project, Pool: "gpu",
			Extra: domain.Limits{GPUs: 1}, Until: time.Now().Add(24 * time.Hour), Reason: "a deadline"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.Pools.DecideRequest(ctx, adminP, r.ID, true, "ok"); err != nil {
			t.Fatal(err)
		}
	}
	_, body := e.signIn(e.admin).get("/pools")
	for _, want := range []string{`id="quota-gpu-vision"`, "with grants: 3 GPU · any CPU · any memory", `id="quota-gpu-speech"`, "with grants: 1 GPU"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}
