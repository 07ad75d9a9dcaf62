package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

// recorded is what the fake server saw of one request.
type recorded struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   string
}

// newServer starts a server whose every request is recorded and answered by
// respond.
func newServer(t *testing.T, respond func(w http.ResponseWriter, r *http.Request)) (*httptest.Server, func() []recorded) {
	t.Helper()
	var (
		mu   sync.Mutex
		reqs []recorded
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		reqs = append(reqs, recorded{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), string(b)})
		mu.Unlock()
		respond(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []recorded {
		mu.Lock()
		defer mu.Unlock()
		return append([]recorded(nil), reqs...)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func TestRequestShapes(t *testing.T) {
	ctx := context.Background()
	tests := map[string]struct {
		call       func(c *Client) error
		method     string
		path       string
		query      string
		body       string // JSON, compared semantically; "" means no body
		wantHeader map[string]string
		reply      any
	}{
		"submit with idempotency key": {
			call: func(c *Client) error {
				job, err := c.Submit(ctx, apitypes.SubmitRequest{Spec: json.RawMessage(`"name: a\n"`), Set: []string{"params.lr=0.2"}}, "key-1")
				if err == nil && job.ID != 7 {
					t.Errorf("job id = %d, want 7", job.ID)
				}
				return err
			},
			method: "POST", path: "/api/v1/jobs",
			body:       `{"spec":"name: a\n","set":["params.lr=0.2"]}`,
			wantHeader: map[string]string{"Idempotency-Key": "key-1", "Content-Type": "application/json"},
			reply:      apitypes.Job{ID: 7},
		},
		"submit without key sends no header": {
			call: func(c *Client) error {
				_, err := c.Submit(ctx, apitypes.SubmitRequest{Spec: json.RawMessage(`"x"`)}, "")
				return err
			},
			method: "POST", path: "/api/v1/jobs", body: `{"spec":"x"}`,
			wantHeader: map[string]string{"Idempotency-Key": ""},
			reply:      apitypes.Job{ID: 1},
		},
		"get job": {
			call:   func(c *Client) error { _, err := c.GetJob(ctx, 42); return err },
			method: "GET", path: "/api/v1/jobs/42",
			reply: apitypes.Job{ID: 42},
		},
		"list with every filter": {
			call: func(c *Client) error {
				_, err := c.ListJobs(ctx, ListOptions{States: []string{"queued", "running"}, Project: "vision", User: "alice",
					Pool: "gpu", Name: "res net%", Limit: 5, Cursor: "abc"})
				return err
			},
			method: "GET", path: "/api/v1/jobs",
			query: "cursor=abc&limit=5&pool=gpu&project=vision&q=res+net%25&state=queued%2Crunning&user=alice",
			reply: apitypes.JobList{},
		},
		"list without filters": {
			call:   func(c *Client) error { _, err := c.ListJobs(ctx, ListOptions{}); return err },
			method: "GET", path: "/api/v1/jobs", query: "",
			reply: apitypes.JobList{},
		},
		"cancel with reason": {
			call:   func(c *Client) error { _, err := c.Cancel(ctx, 3, "wrong lr"); return err },
			method: "POST", path: "/api/v1/jobs/3/cancel", body: `{"reason":"wrong lr"}`,
			reply: apitypes.Job{ID: 3},
		},
		"why": {
			call:   func(c *Client) error { _, err := c.Why(ctx, 9); return err },
			method: "GET", path: "/api/v1/jobs/9/why",
			reply: apitypes.Why{ID: 9},
		},
		"version": {
			call:   func(c *Client) error { _, err := c.Version(ctx); return err },
			method: "GET", path: "/api/v1/version",
			reply: apitypes.Version{Version: "1.0"},
		},
		"logs with every option": {
			call: func(c *Client) error {
				rc, err := c.Logs(ctx, 5, LogOptions{Attempt: 2, Follow: true, Tail: 10, Timestamps: true})
				if err == nil {
					rc.Close()
				}
				return err
			},
			method: "GET", path: "/api/v1/jobs/5/logs",
			query: "attempt=2&follow=true&tail=10&timestamps=true",
			reply: "",
		},
		"logs latest attempt": {
			call: func(c *Client) error {
				rc, err := c.Logs(ctx, 5, LogOptions{})
				if err == nil {
					rc.Close()
				}
				return err
			},
			method: "GET", path: "/api/v1/jobs/5/logs", query: "",
			reply: "",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv, reqs := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				if s, ok := tc.reply.(string); ok {
					_, _ = io.WriteString(w, s)
					return
				}
				writeJSON(w, http.StatusOK, tc.reply)
			})
			c := New(srv.URL+"/", "tok-1", WithUserAgent("test-agent/1"))
			if err := tc.call(c); err != nil {
				t.Fatalf("call: %v", err)
			}
			seen := reqs()
			if len(seen) != 1 {
				t.Fatalf("server saw %d requests, want 1", len(seen))
			}
			got := seen[0]
			if got.Method != tc.method || got.Path != tc.path || got.RawQuery != tc.query {
				t.Errorf("request = %s %s?%s, want %s %s?%s", got.Method, got.Path, got.RawQuery, tc.method, tc.path, tc.query)
			}
			if a := got.Header.Get("Authorization"); a != "Bearer tok-1" {
				t.Errorf("Authorization = %q, want %q", a, "Bearer tok-1")
			}
			if ua := got.Header.Get("User-Agent"); ua != "test-agent/1" {
				t.Errorf("User-Agent = %q", ua)
			}
			for k, v := range tc.wantHeader {
				if g := got.Header.Get(k); g != v {
					t.Errorf("header %s = %q, want %q", k, g, v)
				}
			}
			if tc.body == "" {
				if got.Body != "" {
					t.Errorf("body = %q, want none", got.Body)
				}
				return
			}
			var gotBody, wantBody any
			if err := json.Unmarshal([]byte(got.Body), &gotBody); err != nil {
				t.Fatalf("body %q is not JSON: %v", got.Body, err)
			}
			_ = json.Unmarshal([]byte(tc.body), &wantBody)
			gb, _ := json.Marshal(gotBody)
			wb, _ := json.Marshal(wantBody)
			if string(gb) != string(wb) {
				t.Errorf("body = %s, want %s", gb, wb)
			}
		})
	}
}

func TestErrorDecoding(t *testing.T) {
	tests := map[string]struct {
		status   int
		body     string
		wantCode string
		wantText []string // substrings of Error()
		invalid  bool
		notFound bool
	}{
		"validation error lists every field": {
			status:   422,
			body:     `{"error":{"code":"invalid_spec","message":"the job spec is invalid","fields":[{"path":"resources.gpus","message":"must be >= 0","line":4},{"path":"name","message":"required"}]}}`,
			wantCode: "invalid_spec",
			wantText: []string{"the job spec is invalid\n  resources.gpus (line 4): must be >= 0\n  name: required"},
			invalid:  true,
		},
		"not found": {
			status: 404, body: `{"error":{"code":"not_found","message":"job 9 not found"}}`,
			wantCode: "not_found", wantText: []string{"job 9 not found"}, notFound: true,
		},
		"unauthorized says how to fix the token": {
			status: 401, body: `{"error":{"code":"unauthorized","message":"invalid token"}}`,
			wantCode: "unauthorized", wantText: []string{"invalid token", "TRAINYARD_TOKEN", "config file"},
		},
		"non-JSON body is kept": {
			status: 502, body: "<html>bad gateway</html>",
			wantText: []string{"Bad Gateway: <html>bad gateway</html>"},
		},
		"empty body uses the status text": {
			status: 500, wantText: []string{"Internal Server Error"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			})
			_, err := New(srv.URL, "t").GetJob(context.Background(), 9)
			var ae *APIError
			if !errors.As(err, &ae) {
				t.Fatalf("err = %T %v, want *APIError", err, err)
			}
			if ae.Status != tc.status || ae.Code != tc.wantCode {
				t.Errorf("status, code = %d, %q; want %d, %q", ae.Status, ae.Code, tc.status, tc.wantCode)
			}
			for _, s := range tc.wantText {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Error() = %q, want it to contain %q", err.Error(), s)
				}
			}
			if IsInvalid(err) != tc.invalid || IsNotFound(err) != tc.notFound {
				t.Errorf("IsInvalid, IsNotFound = %v, %v; want %v, %v", IsInvalid(err), IsNotFound(err), tc.invalid, tc.notFound)
			}
		})
	}
}

func TestUnreachableServer(t *testing.T) {
	// A listener that is closed at once gives an address nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	_, err = New(addr, "t").Version(context.Background())
	var ue *UnreachableError
	if !errors.As(err, &ue) {
		t.Fatalf("err = %T %v, want *UnreachableError", err, err)
	}
	for _, s := range []string{"http://" + addr, "not reachable", "trainyard server", "TRAINYARD_SERVER"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("Error() = %q, want it to contain %q", err.Error(), s)
		}
	}
}

func TestHealthSendsNoToken(t *testing.T) {
	srv, reqs := newServer(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	if err := New(srv.URL, "secret").Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := reqs()[0]
	if got.Path != "/healthz" || got.Header.Get("Authorization") != "" {
		t.Errorf("request = %s with Authorization %q; want /healthz without a token", got.Path, got.Header.Get("Authorization"))
	}
}

func TestLogsStreamArrivesBeforeTheResponseEnds(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "line 1\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "line 2\n")
	}))
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rc, err := New(srv.URL, "t").Logs(ctx, 1, LogOptions{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	br := bufio.NewReader(rc)
	// The first line must be readable while the server still holds the stream.
	if l, err := br.ReadString('\n'); err != nil || l != "line 1\n" {
		t.Fatalf("first line = %q, %v", l, err)
	}
	close(release)
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "line 2\n" {
		t.Fatalf("rest = %q, %v", rest, err)
	}
}

func TestLogsErrorIsDecoded(t *testing.T) {
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 404, apitypes.Error{Error: apitypes.ErrorBody{Code: "not_found", Message: "job 1 has no attempt 3"}})
	})
	_, err := New(srv.URL, "t").Logs(context.Background(), 1, LogOptions{Attempt: 3})
	if !IsNotFound(err) || !strings.Contains(err.Error(), "no attempt 3") {
		t.Fatalf("err = %v, want not found with the server's message", err)
	}
}

func TestNewNormalisesBaseURL(t *testing.T) {
	tests := map[string]string{
		"127.0.0.1:7070":      "http://127.0.0.1:7070",
		"http://h:1/":         "http://h:1",
		" https://h/prefix/ ": "https://h/prefix",
		"":                    "",
	}
	for in, want := range tests {
		if got := New(in, "").BaseURL(); got != want {
			t.Errorf("New(%q).BaseURL() = %q, want %q", in, got, want)
		}
	}
	if _, err := New("", "").Version(context.Background()); err == nil || !strings.Contains(err.Error(), "TRAINYARD_SERVER") {
		t.Errorf("empty URL error = %v, want a hint about TRAINYARD_SERVER", err)
	}
}

func TestUnauthorizedHintIsNotRepeated(t *testing.T) {
	srv, _ := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 401, apitypes.Error{Error: apitypes.ErrorBody{Code: "unauthorized", Message: "unknown token; check TRAINYARD_TOKEN"}})
	})
	_, err := New(srv.URL, "t").Version(context.Background())
	if err == nil || strings.Count(err.Error(), "TRAINYARD_TOKEN") != 1 {
		t.Errorf("Error() = %q, want the server's hint once", err)
	}
}
