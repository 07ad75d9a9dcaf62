package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Errors of a call that did not succeed.
var (
	// errRefused: the server answered 4xx; trying again would not help.
	errRefused = errors.New("refused by the server")
	// errUnavailable: no answer, or 5xx, for as long as calls are retried.
	errUnavailable = errors.New("the API did not answer")
)

// Backoff between two tries of a call.
const (
	firstBackoff = 250 * time.Millisecond
	maxBackoff   = 5 * time.Second
)

// reporter calls the API for one attempt. Safe for concurrent use.
type reporter struct {
	base     string // TRAINYARD_API without its trailing slashes
	token    string
	jobID    int64
	prefix   string // /api/v1/jobs/{id}/attempts/{n}
	retryFor time.Duration
	http     *http.Client
	log      *logger

	mu      sync.Mutex
	down    bool           // the last call ran out of retries: try each call once until one succeeds
	refused map[string]int // "kind status" → how many 4xx answers after the first, which was logged
	failed  int            // calls given up on while the API was down, after the first
}

func newReporter(cfg config, log *logger) *reporter {
	r := &reporter{
		base:     strings.TrimRight(cfg.api, "/"),
		token:    cfg.token,
		jobID:    cfg.jobID,
		prefix:   "/api/v1/jobs/" + strconv.FormatInt(cfg.jobID, 10) + "/attempts/" + strconv.Itoa(cfg.attempt),
		retryFor: cfg.retryFor,
		log:      log,
		refused:  map[string]int{},
	}
	if r.retryFor <= 0 {
		r.retryFor = retryFor
	}
	r.http = &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 2 * time.Minute, // after the whole body: the server stores an upload first
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
	}}
	return r
}

// postJSON posts v to the attempt's path below prefix (e.g. "/metrics").
func (r *reporter) postJSON(kind, path string, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return r.call(kind, "POST "+r.prefix+path, func() (*http.Request, error) {
		req, err := http.NewRequest(http.MethodPost, r.base+r.prefix+path, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		return req, nil
	})
}

// outputPath is the upload path of the output file rel (slash-separated,
// relative to the output directory), each segment escaped.
func (r *reporter) outputPath(rel string) string {
	segs := strings.Split(rel, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return r.prefix + "/outputs/" + strings.Join(segs, "/")
}

// call sends the request mk builds (once per try), with the job token (do),
// and reads the answer. A refusal (a 4xx) is logged, the first of its
// kind and status only.
func (r *reporter) call(kind, what string, mk func() (*http.Request, error)) error {
	resp, err := r.do(what, mk)
	if err != nil {
		var ref *refusal
		if errors.As(err, &ref) {
			r.refuse(kind, what, ref.status, ref.code, ref.body)
		}
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return nil
}

// refusal is a 4xx answer: trying again would not help. It matches
// errRefused.
type refusal struct {
	what, status string
	code         int
	errCode      string // the error body's code ("not_found"), when it has one
	body         []byte
}

func (e *refusal) Error() string        { return fmt.Sprintf("%s: %v (%s)", e.what, errRefused, e.status) }
func (e *refusal) Is(target error) bool { return target == errRefused }

// do sends the request mk builds (once per try), with the job token, and
// returns the answer of a 2xx for the caller to read and close. A network
// error, a 5xx, a 408 or a 429 is tried again, with backoff, for retryFor
// (or once only while the API is down); a 409 whose code is "not_started"
// (the server has not recorded the attempt's start yet) is tried again
// for retryFor whatever the API's state; another 4xx is a *refusal.
func (r *reporter) do(what string, mk func() (*http.Request, error)) (*http.Response, error) {
	r.mu.Lock()
	down := r.down
	r.mu.Unlock()
	start := time.Now()
	deadline := start.Add(r.retryFor)
	if down {
		deadline = start
	}
	backoff := firstBackoff
	for try := 1; ; try++ {
		req, err := mk()
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+r.token)
		req.Header.Set("User-Agent", "trainyard-agent")
		var problem string
		resp, err := r.http.Do(req)
		if err != nil {
			problem = err.Error()
		} else if resp.StatusCode < 300 {
			r.up()
			return resp, nil
		} else {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			switch s := resp.StatusCode; {
			case s >= 500 || s == http.StatusTooManyRequests || s == http.StatusRequestTimeout:
				problem = resp.Status + answer(body)
			default:
				ref := &refusal{what: what, status: resp.Status, code: s, errCode: errorCode(body), body: body}
				if s == http.StatusConflict && ref.errCode == "not_started" && time.Now().Add(backoff).Before(start.Add(r.retryFor)) {
					time.Sleep(backoff) // the attempt's start is on its way to the server
					backoff = min(2*backoff, maxBackoff)
					continue
				}
				return nil, ref
			}
		}
		if !time.Now().Add(backoff).Before(deadline) {
			r.giveUp(what, try, problem)
			return nil, fmt.Errorf("%s: %w: %s", what, errUnavailable, problem)
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, maxBackoff)
	}
}

// errorCode is the code of the API's error body ({"error": {"code": …}}),
// or "".
func errorCode(body []byte) string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil {
		return ""
	}
	return e.Error.Code
}

// answer is the server's message in body, short, for a log line.
func answer(body []byte) string {
	var e struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}
	msg := strings.TrimSpace(string(body))
	if json.Unmarshal(body, &e) == nil && (e.Error != "" || e.Message != "") {
		msg = strings.TrimSpace(e.Error + " " + e.Message)
	}
	if len(msg) > 300 {
		msg = msg[:300] + "…"
	}
	if msg == "" {
		return ""
	}
	return ": " + strings.ReplaceAll(msg, "\n", " ")
}

func (r *reporter) up() {
	r.mu.Lock()
	was := r.down
	r.down = false
	r.mu.Unlock()
	if was {
		r.log.printf("the API answers again")
	}
}

func (r *reporter) giveUp(what string, tries int, problem string) {
	r.mu.Lock()
	was := r.down
	r.down = true
	if was {
		r.failed++
	}
	r.mu.Unlock()
	if !was {
		r.log.printf("%s: no answer after %d tries (%s); the job goes on, and each later report is tried once until the API answers", what, tries, problem)
	}
}

func (r *reporter) refuse(kind, what, status string, code int, body []byte) {
	key := kind + " " + strconv.Itoa(code)
	r.mu.Lock()
	n, seen := r.refused[key]
	if seen {
		r.refused[key] = n + 1
	} else {
		r.refused[key] = 0
	}
	r.mu.Unlock()
	if !seen {
		r.log.printf("%s: %s%s (not retried; later %s refusals are counted at the end)", what, status, answer(body), kind)
	}
}

// summary logs what was counted rather than logged.
func (r *reporter) summary() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, n := range r.refused {
		if n > 0 {
			r.log.printf("%d more %s refusals (HTTP %s)", n, strings.Fields(key)[0], strings.Fields(key)[1])
		}
	}
	if r.failed > 0 {
		r.log.printf("%d more reports were lost while the API did not answer", r.failed)
	}
}

// redact replaces the token in s.
func redact(s, token string) string {
	if len(token) < 4 {
		return s
	}
	return strings.ReplaceAll(s, token, "[redacted]")
}
