package client

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

// flaky answers the first `fail` requests with 503 store_unavailable (and
// Retry-After when retryAfter is set), then 200 or 201 with a job. It
// records when each request came and its body.
type flaky struct {
	mu         sync.Mutex
	fail       int
	retryAfter string
	at         []time.Time
	bodies     []string
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.at = append(f.at, time.Now())
	f.bodies = append(f.bodies, string(b))
	n := len(f.at)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if n <= f.fail {
		if f.retryAfter != "" {
			w.Header().Set("Retry-After", f.retryAfter)
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error": {"code": "store_unavailable", "message": "the store is unavailable: the server cannot reach its database; retry in a few seconds"}}`)
		return
	}
	if r.Method == http.MethodPost {
		w.WriteHeader(http.StatusCreated)
	}
	io.WriteString(w, `{"id": 7, "name": "a", "state": "queued"}`)
}

func (f *flaky) requests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.at)
}

// notices collects what a retrying client announces.
type notices struct {
	mu  sync.Mutex
	got []RetryNotice
}

func (n *notices) add(x RetryNotice) { n.mu.Lock(); n.got = append(n.got, x); n.mu.Unlock() }
func (n *notices) list() []RetryNotice {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]RetryNotice(nil), n.got...)
}

// A GET answered 503 twice, then 200, succeeds on the third try; the client
// waits at least the Retry-After the server sent and says so each time.
func TestRetryGetOn503HonoursRetryAfter(t *testing.T) {
	f := &flaky{fail: 2, retryAfter: "1"}
	srv := httptest.NewServer(f)
	defer srv.Close()
	var n notices
	c := New(srv.URL, "tok", WithRetry(Retry{For: 10 * time.Second, Base: 10 * time.Millisecond, Notify: n.add}))
	job, err := c.GetJob(context.Background(), 7)
	if err != nil || job.ID != 7 {
		t.Fatalf("GetJob: %+v, %v", job, err)
	}
	if f.requests() != 3 {
		t.Fatalf("%d requests, want 3", f.requests())
	}
	for i := 1; i < 3; i++ {
		if gap := f.at[i].Sub(f.at[i-1]); gap < time.Second {
			t.Errorf("try %d came %s after the one before, under the Retry-After of 1s", i+1, gap)
		}
	}
	got := n.list()
	if len(got) != 2 {
		t.Fatalf("notices: %+v, want 2", got)
	}
	for i, x := range got {
		if x.Try != i+1 || x.Wait != time.Second || x.String() != "store unavailable (503); retrying in 1s…" {
			t.Errorf("notice %d: %+v %q", i, x, x)
		}
	}
}

// A submit with an Idempotency-Key is repeated with the same body; waits
// grow from Base when the server names none.
func TestRetrySubmitWithIdempotencyKey(t *testing.T) {
	f := &flaky{fail: 2}
	srv := httptest.NewServer(f)
	defer srv.Close()
	var n notices
	c := New(srv.URL, "tok", WithRetry(Retry{For: 10 * time.Second, Base: 10 * time.Millisecond, Notify: n.add}))
	job, err := c.Submit(context.Background(), apitypes.SubmitRequest{Spec: []byte(`"name: a"`)}, "k-1")
	if err != nil || job.ID != 7 {
		t.Fatalf("Submit: %+v, %v", job, err)
	}
	if f.requests() != 3 || f.bodies[0] == "" || f.bodies[1] != f.bodies[0] || f.bodies[2] != f.bodies[0] {
		t.Errorf("bodies sent: %q, want the same body three times", f.bodies)
	}
	if got := n.list(); len(got) != 2 || got[0].Wait != 10*time.Millisecond || got[1].Wait != 20*time.Millisecond {
		t.Errorf("notices: %+v, want waits of 10ms then 20ms", got)
	} else if got[1].String() != "store unavailable (503); retrying in 20ms…" {
		t.Errorf("notice: %q", got[1])
	}
}

// Calls that are not idempotent, and the probes, are sent once.
func TestNoRetryForNonIdempotentCallsAndProbes(t *testing.T) {
	f := &flaky{fail: 100, retryAfter: "1"}
	srv := httptest.NewServer(f)
	defer srv.Close()
	var n notices
	c := New(srv.URL, "tok", WithRetry(Retry{For: 10 * time.Second, Base: 10 * time.Millisecond, Notify: n.add}))
	ctx := context.Background()
	calls := map[string]func() error{
		"submit without a key": func() error {
			_, err := c.Submit(ctx, apitypes.SubmitRequest{Spec: []byte(`"name: a"`)}, "")
			return err
		},
		"cancel":  func() error { _, err := c.Cancel(ctx, 7, ""); return err },
		"status":  func() error { _, err := c.Status(ctx); return err },
		"healthz": func() error { return c.Health(ctx) },
		"GET without retry": func() error {
			_, err := c.WithoutRetry().GetJob(ctx, 7)
			return err
		},
	}
	for name, call := range calls {
		before := f.requests()
		err := call()
		var ae *APIError
		if !errors.As(err, &ae) || ae.Status != 503 || ae.RetryAfter != time.Second {
			t.Errorf("%s: %v, want the 503 with its Retry-After", name, err)
		}
		if sent := f.requests() - before; sent != 1 {
			t.Errorf("%s: sent %d times, want once", name, sent)
		}
	}
	if got := n.list(); len(got) != 0 {
		t.Errorf("notices: %+v, want none", got)
	}
}

// A call that keeps failing stops when For runs out, with an error that
// says so and unwraps to the last answer.
func TestRetryGivesUpAfterFor(t *testing.T) {
	f := &flaky{fail: 1000}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := New(srv.URL, "tok", WithRetry(Retry{For: 300 * time.Millisecond, Base: 20 * time.Millisecond, Max: 50 * time.Millisecond}))
	start := time.Now()
	_, err := c.ListJobs(context.Background(), ListOptions{})
	took := time.Since(start)
	var re *RetryError
	var ae *APIError
	if !errors.As(err, &re) || !errors.As(err, &ae) || ae.Status != 503 {
		t.Fatalf("ListJobs: %v, want a *RetryError wrapping the 503", err)
	}
	if took < 300*time.Millisecond || took > 2*time.Second {
		t.Errorf("gave up after %s, want about 300ms", took)
	}
	if re.Tries != f.requests() || re.Tries < 4 {
		t.Errorf("RetryError.Tries %d, server saw %d, want at least 4", re.Tries, f.requests())
	}
	if msg := err.Error(); !regexp.MustCompile(`^still unavailable after retrying for \d+ms \(\d+ tries\): the store is unavailable`).MatchString(msg) || !strings.Contains(msg, "retry in a few seconds") {
		t.Errorf("message %q", msg)
	}
}

// A refused connection is retried until a server listens there.
func TestRetryConnectionRefusedUntilTheServerIsBack(t *testing.T) {
	addr := closedAddr(t)
	f := &flaky{}
	srv := httptest.NewUnstartedServer(f)
	defer srv.Close()
	var n notices
	started := false
	c := New("http://"+addr, "tok", WithRetry(Retry{For: 10 * time.Second, Base: 20 * time.Millisecond, Notify: func(x RetryNotice) {
		n.add(x)
		if x.Try == 2 && !started { // the server comes back after two refused tries
			l, err := net.Listen("tcp", addr)
			if err != nil {
				t.Errorf("listen on %s again: %v", addr, err)
				return
			}
			srv.Listener.Close()
			srv.Listener = l
			srv.Start()
			started = true
		}
	}}))
	job, err := c.GetJob(context.Background(), 7)
	if err != nil || job.ID != 7 {
		t.Fatalf("GetJob: %+v, %v", job, err)
	}
	got := n.list()
	if len(got) != 2 || got[0].Cause != "server not reachable (connection refused)" {
		t.Errorf("notices: %+v", got)
	}

	// A server that is not running is retried for RefusedFor only, not
	// the whole budget a store outage gets.
	c = New("http://"+closedAddr(t), "tok", WithRetry(Retry{For: time.Minute, RefusedFor: 200 * time.Millisecond, Base: 20 * time.Millisecond}))
	_, err = c.GetJob(context.Background(), 7)
	var re *RetryError
	if !errors.As(err, &re) || re.Took >= 10*time.Second {
		t.Errorf("refused connections with RefusedFor 200ms in a 1m budget: %v, want to give up after about 200ms", err)
	}

	// With nothing listening at all, the error names the server and how
	// to start one.
	c = New("http://"+closedAddr(t), "tok", WithRetry(Retry{For: 100 * time.Millisecond, Base: 20 * time.Millisecond}))
	_, err = c.GetJob(context.Background(), 7)
	var ue *UnreachableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "start one with `trainyard server`") {
		t.Errorf("a server that never comes: %v", err)
	}
}

// Canceling the context ends the wait at once.
func TestRetryWaitEndsWithTheContext(t *testing.T) {
	f := &flaky{fail: 1000, retryAfter: "30"}
	srv := httptest.NewServer(f)
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	c := New(srv.URL, "tok", WithRetry(Retry{For: time.Minute, Notify: func(RetryNotice) { cancel() }}))
	start := time.Now()
	_, err := c.GetJob(ctx, 7)
	if !errors.Is(err, context.Canceled) || time.Since(start) > 5*time.Second {
		t.Errorf("GetJob: %v after %s, want context.Canceled at once", err, time.Since(start))
	}
}

// closedAddr is a local address nobody listens on.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"": 0, "2": 2 * time.Second, "0": 0, "-1": 0, "soon": 0,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Minute).Format(http.TimeFormat):     0,
	} {
		if got := parseRetryAfter(v, now); got != want {
			t.Errorf("Retry-After %q: %s, want %s", v, got, want)
		}
	}
}
