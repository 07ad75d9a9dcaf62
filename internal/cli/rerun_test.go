package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"

	"trainyard/internal/api/apitypes"
)

// rerunFake is an in-memory stand-in for the re-run and job endpoints.
type rerunFake struct {
	mu     sync.Mutex
	jobs   map[int64]*apitypes.Job
	next   int64
	idem   map[string]int64
	reruns []seenRerun
	final  string // state a job reaches on its second GET ("": stays queued)
	gets   map[int64]int
}

type seenRerun struct {
	ID  string
	Req apitypes.RerunRequest
	Key string
}

// newRerunHarness returns a harness whose server is a rerunFake holding job
// 7, which is not a re-run.
func newRerunHarness(t *testing.T) (*harness, *rerunFake) {
	t.Helper()
	rf := &rerunFake{jobs: map[int64]*apitypes.Job{}, next: 8, idem: map[string]int64{}, gets: map[int64]int{}}
	rf.jobs[7] = &apitypes.Job{ID: 7, Name: "sweep", Project: "default", State: "succeeded", SubmittedAt: testNow}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/jobs/{id}/rerun", rf.rerun)
	mux.HandleFunc("GET /api/v1/jobs/{id}", rf.get)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+testToken {
			fail(w, http.StatusUnauthorized, "unauthorized", "invalid or missing token")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	h := &harness{
		t:   t,
		srv: &fakeServer{t: t, srv: srv},
		vars: map[string]string{
			EnvServer:         srv.URL,
			EnvToken:          testToken,
			"XDG_CONFIG_HOME": t.TempDir(),
			"NO_COLOR":        "",
		},
	}
	return h, rf
}

func (rf *rerunFake) seen() []seenRerun {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	return append([]seenRerun(nil), rf.reruns...)
}

func (rf *rerunFake) rerun(w http.ResponseWriter, r *http.Request) {
	var req apitypes.RerunRequest
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		fail(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	rf.mu.Lock()
	defer rf.mu.Unlock()
	key := r.Header.Get("Idempotency-Key")
	rf.reruns = append(rf.reruns, seenRerun{ID: r.PathValue("id"), Req: req, Key: key})
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	orig := rf.jobs[id]
	if orig == nil {
		fail(w, http.StatusNotFound, "not_found", "job "+r.PathValue("id")+" does not exist; list jobs with: trainyard ls")
		return
	}
	for _, s := range req.Set {
		if s == "resources.gpus=-1" {
			fail(w, http.StatusBadRequest, "invalid_spec", "the re-run's job spec has 2 problem(s)",
				apitypes.FieldError{Path: "resources.gpus", Message: "must be 0 or more"},
				apitypes.FieldError{Path: "env", Message: `"pytorch" is not pinned to a version`})
			return
		}
	}
	if old, ok := rf.idem[key]; ok && key != "" {
		j := *rf.jobs[old]
		j.Created = new(false)
		reply(w, http.StatusOK, j)
		return
	}
	j := &apitypes.Job{ID: rf.next, Name: orig.Name, Project: orig.Project, State: "queued", SubmittedAt: testNow, RerunOf: id}
	rf.next++
	rf.jobs[j.ID] = j
	if key != "" {
		rf.idem[key] = j.ID
	}
	out := *j
	out.Created = new(true)
	reply(w, http.StatusCreated, out)
}

func (rf *rerunFake) get(w http.ResponseWriter, r *http.Request) {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
	j := rf.jobs[id]
	if j == nil {
		fail(w, http.StatusNotFound, "not_found", "job "+r.PathValue("id")+" does not exist")
		return
	}
	rf.gets[id]++
	if rf.final != "" && rf.gets[id] > 1 && j.RerunOf != 0 {
		j.State = rf.final
	}
	reply(w, http.StatusOK, *j)
}

func TestRerunPrintsIDAndSendsChanges(t *testing.T) {
	h, rf := newRerunHarness(t)
	r := h.mustRun(0, "rerun", "7", "--env", "pytorch-2.5@1", "--set", "params.lr=0.2", "--set", "labels.sweep=b", "--idempotency-key", "k-1")
	if r.stdout != "8\n" || r.stderr != "" {
		t.Errorf("stdout %q stderr %q; want the bare new id and nothing on a non-terminal stderr", r.stdout, r.stderr)
	}
	want := seenRerun{ID: "7", Req: apitypes.RerunRequest{Env: "pytorch-2.5@1", Set: []string{"params.lr=0.2", "labels.sweep=b"}}, Key: "k-1"}
	if got := rf.seen(); len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Fatalf("server saw %+v, want %+v", got, want)
	}

	h.terminal = true
	r = h.mustRun(0, "rerun", "#7")
	if want := "submitted job 9 (rerun of 7) — follow with: trainyard logs -f 9\n"; r.stdout != "9\n" || r.stderr != want {
		t.Errorf("on a terminal: stdout %q stderr %q; want %q and %q", r.stdout, r.stderr, "9\n", want)
	}
	if got := rf.seen()[1]; got.Key != "" || got.Req.Env != "" || got.Req.Set != nil {
		t.Errorf("a plain rerun sent %+v; want no changes and no key", got)
	}
	r = h.mustRun(0, "rerun", "7", "--idempotency-key", "k-1")
	if r.stdout != "8\n" || !strings.HasPrefix(r.stderr, "idempotency key matched existing job 8") {
		t.Errorf("replay: stdout %q stderr %q", r.stdout, r.stderr)
	}
}

func TestRerunStructuredOutput(t *testing.T) {
	for _, format := range []string{"json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			h, _ := newRerunHarness(t)
			r := h.mustRun(0, "rerun", "7", "-o", format)
			var m map[string]any
			var err error
			if format == "json" {
				err = json.Unmarshal([]byte(r.stdout), &m)
			} else {
				err = yaml.Unmarshal([]byte(r.stdout), &m)
			}
			if err != nil {
				t.Fatalf("-o %s printed %q: %v", format, r.stdout, err)
			}
			if m["id"] != float64(8) && m["id"] != 8 || m["rerun_of"] != float64(7) && m["rerun_of"] != 7 {
				t.Errorf("-o %s: id %v rerun_of %v; want 8 and 7", format, m["id"], m["rerun_of"])
			}
		})
	}
}

func TestRerunInvalidChangesExit2(t *testing.T) {
	h, _ := newRerunHarness(t)
	r := h.mustRun(2, "rerun", "7", "--env", "pytorch", "--set", "resources.gpus=-1")
	for _, want := range []string{"error: ", "resources.gpus: must be 0 or more", "env: "} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if r.stdout != "" {
		t.Errorf("stdout = %q, want nothing", r.stdout)
	}
	r = h.mustRun(ExitNotFound, "rerun", "99")
	if !strings.Contains(r.stderr, "job 99 does not exist") {
		t.Errorf("unknown job: stderr %q", r.stderr)
	}
}

func TestRerunUsageErrors(t *testing.T) {
	for name, args := range map[string][]string{
		"no id":           {"rerun"},
		"two ids":         {"rerun", "7", "8"},
		"bad id":          {"rerun", "seven"},
		"bad --set":       {"rerun", "7", "--set", "novalue"},
		"wait and follow": {"rerun", "7", "--wait", "--follow"},
		"bad output":      {"rerun", "7", "-o", "xml"},
	} {
		t.Run(name, func(t *testing.T) {
			h, rf := newRerunHarness(t)
			r := h.mustRun(2, args...)
			if !strings.HasPrefix(r.stderr, "error: ") {
				t.Errorf("stderr = %q, want an \"error: \" line", r.stderr)
			}
			if n := len(rf.seen()); n != 0 {
				t.Errorf("a usage error still sent %d re-run(s)", n)
			}
		})
	}
}

func TestRerunWait(t *testing.T) {
	for final, code := range map[string]int{"succeeded": 0, "failed": 1} {
		t.Run(final, func(t *testing.T) {
			h, rf := newRerunHarness(t)
			rf.final = final
			r := h.mustRun(code, "rerun", "7", "--wait")
			if r.stdout != "8\n" || !strings.Contains(r.stderr, "job 8 (sweep) "+final) {
				t.Errorf("stdout %q stderr %q; want the id and the final state %s", r.stdout, r.stderr, final)
			}
		})
	}
}

func TestShowNamesTheOriginal(t *testing.T) {
	h, _ := newRerunHarness(t)
	h.mustRun(0, "rerun", "7")
	r := h.mustRun(0, "show", "8")
	if !regexp.MustCompile(`(?m)^Rerun of:\s+7$`).MatchString(r.stdout) {
		t.Errorf("show of a re-run lacks \"Rerun of: 7\":\n%s", r.stdout)
	}
	if r = h.mustRun(0, "show", "7"); strings.Contains(r.stdout, "Rerun of") {
		t.Errorf("show of an ordinary job names an original:\n%s", r.stdout)
	}
}
