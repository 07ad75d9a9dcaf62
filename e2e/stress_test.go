package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

// 50 concurrent submissions of 1-CPU jobs on a 2-CPU inventory: never more
// than 2 run at once, all succeed, ids are unique.
func TestConcurrentSubmissionsRespectInventory(t *testing.T) {
	s := startServer(t, serverOpts{cpus: 2})
	slots := sharedDir(t)
	// Each job registers itself in a shared directory, counts who else is
	// there, and fails if it ever sees more than 2.
	spec := fmt.Sprintf(`name: conc
resources: {cpus: 1}
entrypoint: 'touch %[1]s/$TRAINYARD_JOB_ID || exit 9; n=$(ls %[1]s | wc -l); echo "running with $n"; sleep 0.05; rm %[1]s/$TRAINYARD_JOB_ID; [ "$n" -le 2 ]'
`, slots)
	const n = 50
	ids := make([]int64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i] = s.submit(spec).ID
		}()
	}
	wg.Wait()
	seen := map[int64]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("duplicate id %d", id)
		}
		seen[id] = true
	}
	type span struct{ start, end time.Time }
	var spans []span
	for _, id := range ids {
		j := s.waitState(id, 2*time.Minute, "succeeded", "failed")
		if j.State != "succeeded" {
			t.Fatalf("job %d %s: %s", id, j.State, j.Message)
		}
		a := s.job(id).Attempts
		if len(a) != 1 {
			t.Fatalf("job %d has %d attempts", id, len(a))
		}
		spans = append(spans, span{a[0].CreatedAt, *a[0].FinishedAt})
	}
	// The platform's own record agrees: at most 2 attempts hold resources at once.
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, sp := range spans {
		edges = append(edges, edge{sp.start, 1}, edge{sp.end, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].delta < edges[j].delta
		}
		return edges[i].at.Before(edges[j].at)
	})
	cur, peak := 0, 0
	for _, e := range edges {
		cur += e.delta
		peak = max(peak, cur)
	}
	if peak > 2 {
		t.Fatalf("%d attempts overlapped on a 2-CPU inventory", peak)
	}
}

// kill -9 the server while 5 jobs run; 2 finish while it is down. After a
// restart every job ends in its true state with one attempt and full logs.
func TestServerKill9Recovery(t *testing.T) {
	s := startServer(t, serverOpts{cpus: 8})
	gate := sharedDir(t)
	var ids []int64
	for i := range 5 {
		// Jobs 0 and 1 end as soon as their gate file appears; the others wait
		// for their own gate, opened after the restart. Job 1 fails on purpose.
		code := 0
		if i == 1 {
			code = 4
		}
		spec := fmt.Sprintf(`name: survivor-%d
resources: {cpus: 1}
entrypoint: 'echo start; while [ ! -e %s/%d ]; do sleep 0.05; done; echo done; touch %s/ended-%d; exit %d'
`, i, gate, i, gate, i, code)
		ids = append(ids, s.submit(spec).ID)
	}
	for _, id := range ids {
		s.waitState(id, 30*time.Second, "running")
	}
	s.kill9()

	for _, i := range []int{0, 1} {
		os.WriteFile(filepath.Join(gate, fmt.Sprint(i)), nil, 0o644)
	}
	for _, i := range []int{0, 1} {
		waitFor(t, 10*time.Second, "jobs to finish while the server is down", func() bool {
			_, err := os.Stat(filepath.Join(gate, fmt.Sprintf("ended-%d", i)))
			return err == nil
		})
	}
	s.start()
	for _, i := range []int{2, 3, 4} {
		os.WriteFile(filepath.Join(gate, fmt.Sprint(i)), nil, 0o644)
	}
	for i, id := range ids {
		want := "succeeded"
		if i == 1 {
			want = "failed"
		}
		j := s.waitState(id, time.Minute, "succeeded", "failed", "canceled")
		if j.State != want {
			t.Errorf("job %d ended %s (%s: %s), want %s", i, j.State, j.Reason, j.Message, want)
		}
		full := s.job(id)
		if len(full.Attempts) != 1 {
			t.Errorf("job %d has %d attempts, want exactly 1", i, len(full.Attempts))
		}
		if logs := s.mustCLI("logs", fmt.Sprint(id)); logs != "start\ndone\n" {
			t.Errorf("job %d log = %q, want start and done", i, logs)
		}
	}
	if code := *s.job(ids[1]).Attempts[0].ExitCode; code != 4 {
		t.Errorf("exit code recorded across the restart = %d, want 4", code)
	}
}

// Invalid specs are refused with every error and its field path; nothing is stored.
func TestInvalidSpecsAreRejected(t *testing.T) {
	s := startServer(t, serverOpts{})
	cases := map[string]struct {
		spec  string
		paths []string
	}{
		"unknown field":             {"name: a\nentrypoint: [true]\ngpu: 1\n", []string{"gpu"}},
		"negative gpus":             {"name: a\nentrypoint: [true]\nresources: {gpus: -1}\n", []string{"resources.gpus"}},
		"memory lots":               {"name: a\nentrypoint: [true]\nresources: {memory: lots}\n", []string{"resources.memory"}},
		"name with spaces":          {"name: my job\nentrypoint: [true]\n", []string{"name"}},
		"uppercase name":            {"name: MyJob\nentrypoint: [true]\n", []string{"name"}},
		"retries without reentrant": {"name: a\nentrypoint: [true]\npolicy: {retries: 1}\n", []string{"policy.retries"}},
		"output without id":         {"name: a\nentrypoint: [true]\noutputs: {path: /tmp/out}\n", []string{"outputs.path"}},
		"empty entrypoint":          {"name: a\nentrypoint: []\n", []string{"entrypoint"}},
		"empty shell entrypoint":    {"name: a\nentrypoint: ''\n", []string{"entrypoint"}},
		"missing name":              {"entrypoint: [true]\n", []string{"name"}},
		"zero cpus":                 {"name: a\nentrypoint: [true]\nresources: {cpus: 0}\n", []string{"resources.cpus"}},
		"zero nodes":                {"name: a\nentrypoint: [true]\nresources: {nodes: 0}\n", []string{"resources.nodes"}},
		"bad priority":              {"name: a\nentrypoint: [true]\npolicy: {priority: asap}\n", []string{"policy.priority"}},
		"bad timeout":               {"name: a\nentrypoint: [true]\npolicy: {timeout: forever}\n", []string{"policy.timeout"}},
		"unpinned env":              {"name: a\nentrypoint: [true]\nenv: pytorch\n", []string{"env"}},
		"latest env":                {"name: a\nentrypoint: [true]\nenv: pytorch@latest\n", []string{"env"}},
		"reserved env var":          {"name: a\nentrypoint: [true]\nenv_vars: {TRAINYARD_JOB_ID: x}\n", []string{"env_vars.TRAINYARD_JOB_ID"}},
		"bad param name":            {"name: a\nentrypoint: [true]\nparams: {learning-rate: 1}\n", []string{"params.learning-rate"}},
		"relative input":            {"name: a\nentrypoint: [true]\ninputs: [{name: d, path: data, version: v1}]\n", []string{"inputs[0].path"}},
		"gpus not a number":         {"name: a\nentrypoint: [true]\nresources: {gpus: two}\n", []string{"resources.gpus"}},
		"unknown secret":            {"name: a\nentrypoint: [true]\nsecrets: [WANDB_API_KEY]\n", []string{"secrets[0]"}},
		"not a mapping":             {"- a\n- b\n", nil},
		"several problems": {"name: Bad Name\nentrypoint: []\nresources: {gpus: -2, memory: lots}\npolicy: {retries: 3}\n",
			[]string{"name", "entrypoint", "resources.gpus", "resources.memory", "policy.retries"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			b, _ := json.Marshal(tc.spec)
			var e apitypes.Error
			code := s.api("POST", "/api/v1/jobs", apitypes.SubmitRequest{Spec: b}, &e)
			if code != 400 || e.Error.Code != "invalid_spec" || len(e.Error.Fields) == 0 {
				t.Fatalf("status %d, error %+v; want 400 invalid_spec with fields", code, e)
			}
			got := map[string]bool{}
			for _, f := range e.Error.Fields {
				got[f.Path] = true
				if f.Message == "" {
					t.Errorf("field %s has no message", f.Path)
				}
			}
			for _, p := range tc.paths {
				if !got[p] {
					t.Errorf("no error for %s; got %+v", p, e.Error.Fields)
				}
			}
		})
	}
	// A bad override is refused the same way.
	b, _ := json.Marshal("name: a\nentrypoint: [true]\n")
	var e apitypes.Error
	if code := s.api("POST", "/api/v1/jobs", apitypes.SubmitRequest{Spec: b, Set: []string{"resources.gpus=-1"}}, &e); code != 400 {
		t.Errorf("bad --set: status %d", code)
	}
	var list apitypes.JobList
	s.api("GET", "/api/v1/jobs", nil, &list)
	if len(list.Jobs) != 0 {
		t.Fatalf("%d jobs stored after only invalid submits", len(list.Jobs))
	}
	// The CLI prints every error with its path and exits 2.
	spec := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(spec, []byte(cases["several problems"].spec), 0o644)
	_, errOut, code := s.cli("submit", spec)
	if code != 2 {
		t.Errorf("CLI exit %d, want 2", code)
	}
	for _, p := range cases["several problems"].paths {
		if !strings.Contains(errOut, p) {
			t.Errorf("CLI output lacks %s:\n%s", p, errOut)
		}
	}
}
