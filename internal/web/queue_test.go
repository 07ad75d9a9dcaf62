package web_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store/sqlite"
)

// fakeQueue stands for the control loop's queue (service.Config.Queue):
// the entries a test sets, in the order it sets them.
type fakeQueue struct {
	mu      sync.Mutex
	entries []domain.QueueEntry
}

func (q *fakeQueue) set(es ...domain.QueueEntry) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.entries = es
}

func (q *fakeQueue) read(_ context.Context, pool string) ([]domain.QueueEntry, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []domain.QueueEntry
	for _, e := range q.entries {
		if pool == "" || e.Pool == pool {
			out = append(out, e)
		}
	}
	return out, nil
}

// queueEnv is newEnv with a queue the test sets, and the store, so that a
// test can start jobs as the control loop would.
type queueEnv struct {
	*env
	q  *fakeQueue
	st *sqlite.Store
}

func newQueueEnv(t *testing.T) *queueEnv {
	t.Helper()
	q := &fakeQueue{}
	e := newEnvWith(t, func(c *service.Config) { c.Queue = q.read }, defaultPool)
	return &queueEnv{env: e, q: q, st: e.st}
}

// waiting is j's queue entry at pos, waiting for reason.
func waiting(j domain.Job, pos int, reason domain.Reason, msg string) domain.QueueEntry {
	return domain.QueueEntry{JobID: j.ID, Name: j.Name, Project: j.Project, Submitter: j.Submitter, Pool: j.Pool,
		Priority: j.Priority, Position: pos, Reason: reason, Message: msg, Submitted: j.SubmittedAt, Resources: j.Resources}
}

// events reads a live stream's plain messages, one at a time, until the
// test's deadline.
type events struct {
	t      *testing.T
	r      *bufio.Reader
	cancel func()
}

func (b *browser) stream(path string) *events {
	b.e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	req, _ := http.NewRequestWithContext(ctx, "GET", b.e.srv.URL+path, nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := b.c.Do(req)
	if err != nil {
		cancel()
		b.e.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		cancel()
		b.e.t.Fatalf("stream %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ev := &events{t: b.e.t, r: bufio.NewReader(resp.Body), cancel: func() { cancel(); resp.Body.Close() }}
	b.e.t.Cleanup(ev.cancel)
	return ev
}

// next returns the next message's data (a "problem" event fails the test).
func (ev *events) next() string {
	ev.t.Helper()
	var data []string
	kind := ""
	for {
		line, err := ev.r.ReadString('\n')
		if err != nil {
			ev.t.Fatalf("stream ended before a message: %v", err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "" && (data != nil || kind != ""):
			if kind == "problem" {
				ev.t.Fatalf("problem event: %s", strings.Join(data, "\n"))
			}
			if kind == "" {
				return strings.Join(data, "\n")
			}
			data, kind = nil, ""
		case strings.HasPrefix(line, "event: "):
			kind = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		}
	}
}

// until returns the first message for which ok holds.
func (ev *events) until(ok func(string) bool) string {
	ev.t.Helper()
	for {
		if m := ev.next(); ok(m) {
			return m
		}
	}
}

// inOrder reports whether every s appears in body, in order.
func inOrder(body string, ss ...string) bool {
	at := 0
	for _, s := range ss {
		i := strings.Index(body[at:], s)
		if i < 0 {
			return false
		}
		at += i + len(s)
	}
	return true
}

func queueRow(id int64) string { return fmt.Sprintf(`id="queued-%d"`, id) }

// TestQueuePage: the queue of each pool in scheduling order, with the
// job's request, its reason with its numbers and its estimated start.
func TestQueuePage(t *testing.T) {
	e := newQueueEnv(t)
	alice := e.user("alice", "member@vision")
	bob := e.user("bob", "member@vision")
	a := e.submit(alice, fmt.Sprintf(spec, "alice-train", "vision"))
	bj := e.submit(bob, fmt.Sprintf(spec, "bob-train", "vision"))
	ad := e.submit(e.admin, fmt.Sprintf(spec, "admin-eval", "default"))
	first := waiting(bj, 1, domain.ReasonQuotaExceeded, "project vision uses 8 of 8 CPUs in pool default (quota)")
	second := waiting(a, 2, domain.ReasonWaitingForCapacity, "needs 1 CPU; 0 of 8 free")
	second.EstimatedStart = time.Now().Add(90 * time.Minute)
	e.q.set(first, second, waiting(ad, 3, domain.ReasonWaitingForCapacity, ""))

	b := e.signIn(e.admin)
	for _, path := range []string{"/queue", "/queue?pool=default"} {
		code, body := b.get(path)
		if code != http.StatusOK {
			t.Fatalf("%s: %d", path, code)
		}
		if !inOrder(body, queueRow(bj.ID), queueRow(a.ID), queueRow(ad.ID)) {
			t.Errorf("%s: the rows are not in scheduling order:\n%s", path, body)
		}
		for _, want := range []string{
			fmt.Sprintf(`<a href="/jobs/%d">%d</a>`, bj.ID, bj.ID), "bob-train", "QuotaExceeded",
			"project vision uses 8 of 8 CPUs in pool default (quota)", "1 CPU", "in 1h29m", "under a minute", `aria-current="page"`,
			`data-live="/queue/live`, "bob", "alice", "normal",
		} {
			if !strings.Contains(body, want) {
				t.Errorf("%s lacks %q", path, want)
			}
		}
	}
	if code, _ := b.get("/queue?pool=nowhere"); code != http.StatusNotFound {
		t.Errorf("an unknown pool: %d, want 404", code)
	}
}

// TestQueueShowsAMemberOnlyTheirJobs: the page hides other users' jobs as
// the service does, and keeps the pool's positions.
func TestQueueShowsAMemberOnlyTheirJobs(t *testing.T) {
	e := newQueueEnv(t)
	alice := e.user("alice", "member@vision")
	bob := e.user("bob", "member@vision")
	a := e.submit(alice, fmt.Sprintf(spec, "alice-train", "vision"))
	bj := e.submit(bob, fmt.Sprintf(spec, "bob-train", "vision"))
	e.q.set(waiting(a, 1, domain.ReasonWaitingForCapacity, "alice's numbers"), waiting(bj, 2, domain.ReasonWaitingForCapacity, ""))

	code, body := e.signIn(bob).get("/queue")
	if code != http.StatusOK {
		t.Fatalf("queue: %d", code)
	}
	if !strings.Contains(body, queueRow(bj.ID)) || !strings.Contains(body, `data-position="2"`) {
		t.Errorf("bob does not see his job at position 2:\n%s", body)
	}
	if strings.Contains(body, queueRow(a.ID)) || strings.Contains(body, "alice-train") || strings.Contains(body, "alice&#39;s numbers") {
		t.Errorf("bob sees alice's job:\n%s", body)
	}
	// No role, no queue: the service's refusal.
	nobody := e.user("nobody")
	if code, _ := e.signIn(nobody).get("/queue"); code != http.StatusForbidden {
		t.Errorf("a user without a role: %d, want 403", code)
	}
}

// TestQueueIsBounded: a pool shows its first entries and says how many
// more wait.
func TestQueueIsBounded(t *testing.T) {
	e := newQueueEnv(t)
	j := e.submit(e.admin, fmt.Sprintf(spec, "first", "default"))
	es := []domain.QueueEntry{waiting(j, 1, domain.ReasonWaitingForCapacity, "")}
	for i := 2; i <= 205; i++ {
		es = append(es, domain.QueueEntry{JobID: j.ID + int64(i), Name: "other", Project: "default", Pool: "default",
			Priority: domain.PriorityNormal, Position: i, Submitted: time.Now()})
	}
	e.q.set(es...)
	_, body := e.signIn(e.admin).get("/queue?pool=default")
	if n := strings.Count(body, `id="queued-`); n != 200 {
		t.Errorf("%d rows, want 200", n)
	}
	if !strings.Contains(body, "5 more waiting jobs not shown") {
		t.Errorf("the page does not say 5 more wait")
	}
	if strings.Contains(body, queueRow(j.ID+205)) {
		t.Error("the 205th entry is shown")
	}
}

// TestQueueLive: the live stream sends the queue's tables, and again when
// the order changes.
func TestQueueLive(t *testing.T) {
	e := newQueueEnv(t)
	x := e.submit(e.admin, fmt.Sprintf(spec, "x", "default"))
	y := e.submit(e.admin, fmt.Sprintf(spec, "y", "default"))
	e.q.set(waiting(x, 1, domain.ReasonWaitingForCapacity, ""), waiting(y, 2, domain.ReasonWaitingForCapacity, ""))
	ev := e.signIn(e.admin).stream("/queue/live?pool=default")
	m := ev.next()
	if !inOrder(m, queueRow(x.ID), queueRow(y.ID)) || !strings.Contains(m, "<table") {
		t.Fatalf("first message is not the queue in order:\n%s", m)
	}
	e.q.set(waiting(y, 1, domain.ReasonQuotaExceeded, "now over quota"), waiting(x, 2, domain.ReasonWaitingForCapacity, ""))
	ev.until(func(m string) bool {
		return inOrder(m, queueRow(y.ID), queueRow(x.ID)) && strings.Contains(m, "now over quota")
	})
}
