package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
)

func writeSpec(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func ptr[T any](v T) *T { return &v }

func TestSubmitPrintsIDAndSendsSpecTextSetsAndKey(t *testing.T) {
	h := newHarness(t)
	spec := "name: smoke\nentrypoint: [python3, train.py]\n"
	file := writeSpec(t, t.TempDir(), "smoke.yaml", spec)

	r := h.mustRun(0, "submit", file, "--set", "params.lr=0.2", "--set", "labels.team=vision", "--idempotency-key", "k-1")
	if r.stdout != "1\n" {
		t.Errorf("stdout = %q, want the bare id %q", r.stdout, "1\n")
	}
	if r.stderr != "" {
		t.Errorf("stderr = %q, want nothing when stderr is not a terminal", r.stderr)
	}
	subs := h.srv.seenSubmits()
	if len(subs) != 1 {
		t.Fatalf("server saw %d submits, want 1", len(subs))
	}
	got := subs[0]
	if got.SpecText != spec {
		t.Errorf("spec text = %q, want the file's text %q", got.SpecText, spec)
	}
	if want := []string{"params.lr=0.2", "labels.team=vision"}; !reflect.DeepEqual(got.Req.Set, want) {
		t.Errorf("set = %q, want %q", got.Req.Set, want)
	}
	if got.Idempotency != "k-1" {
		t.Errorf("Idempotency-Key = %q, want k-1", got.Idempotency)
	}

	// The same key again returns the same job and says so on a terminal.
	h.terminal = true
	r = h.mustRun(0, "submit", file, "--idempotency-key", "k-1")
	if r.stdout != "1\n" || !strings.Contains(r.stderr, "idempotency key matched existing job 1 (smoke)") {
		t.Errorf("replay: stdout %q stderr %q", r.stdout, r.stderr)
	}
}

func TestSubmitNoteOnTerminal(t *testing.T) {
	h := newHarness(t)
	h.terminal = true
	file := writeSpec(t, t.TempDir(), "s.yaml", "name: smoke\n")
	r := h.mustRun(0, "submit", file)
	if r.stdout != "1\n" {
		t.Errorf("stdout = %q", r.stdout)
	}
	if want := "submitted job 1 (smoke) — follow with: trainyard logs -f 1\n"; r.stderr != want {
		t.Errorf("stderr = %q, want %q", r.stderr, want)
	}
	if h.srv.seenSubmits()[0].Idempotency != "" {
		t.Error("an Idempotency-Key was sent though none was given")
	}
}

func TestSubmitWorkdir(t *testing.T) {
	dir := t.TempDir()
	cwd, _ := os.Getwd()
	tests := map[string]struct {
		spec  string
		stdin bool
		sets  []string
		want  []string
	}{
		"relative workdir is resolved against the file's directory": {
			spec: "name: a\nworkdir: src/train\n",
			want: []string{"workdir=" + filepath.Join(dir, "src/train")},
		},
		"dot means the file's directory": {
			spec: "name: a\nworkdir: .\n",
			want: []string{"workdir=" + dir},
		},
		"appended after the user's own overrides": {
			spec: "name: a\nworkdir: ../x\n",
			sets: []string{"params.lr=1"},
			want: []string{"params.lr=1", "workdir=" + filepath.Join(filepath.Dir(dir), "x")},
		},
		"absolute workdir is left alone": {
			spec: "name: a\nworkdir: /srv/code\n",
			want: nil,
		},
		"user's --set workdir wins": {
			spec: "name: a\nworkdir: rel\n",
			sets: []string{"workdir=/mine"},
			want: []string{"workdir=/mine"},
		},
		"nested workdir is not top-level": {
			spec: "name: a\nparams: {workdir: rel}\n",
			want: nil,
		},
		"JSON documents work too": {
			spec: `{"name": "a", "workdir": "code"}`,
			want: []string{"workdir=" + filepath.Join(dir, "code")},
		},
		"unparsable document is sent as is": {
			spec: "name: [a\nworkdir: rel\n",
			want: nil,
		},
		"stdin resolves against the current directory": {
			spec:  "workdir: rel\n",
			stdin: true,
			want:  []string{"workdir=" + filepath.Join(cwd, "rel")},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			arg := "-"
			if tc.stdin {
				h.stdin = tc.spec
			} else {
				arg = writeSpec(t, dir, "job.yaml", tc.spec)
			}
			args := []string{"submit", arg}
			for _, s := range tc.sets {
				args = append(args, "--set", s)
			}
			h.mustRun(0, args...)
			got := h.srv.seenSubmits()[0]
			if !reflect.DeepEqual(got.Req.Set, tc.want) {
				t.Errorf("set = %q, want %q", got.Req.Set, tc.want)
			}
			if got.SpecText != tc.spec {
				t.Errorf("spec text was changed: %q", got.SpecText)
			}
		})
	}
}

func TestSubmitValidationErrorsExit2(t *testing.T) {
	h := newHarness(t)
	file := writeSpec(t, t.TempDir(), "bad.yaml", "name: x\nresources:\n  gpus: -1\n")
	r := h.mustRun(2, "submit", file)
	want := "error: the job spec is invalid\n  resources.gpus (line 3): must be 0 or more\n  policy.retries: needs policy.reentrant: true\n"
	if r.stderr != want {
		t.Errorf("stderr = %q, want %q", r.stderr, want)
	}
	if r.stdout != "" {
		t.Errorf("stdout = %q, want nothing", r.stdout)
	}
}

func TestSubmitUsageErrors(t *testing.T) {
	file := writeSpec(t, t.TempDir(), "s.yaml", "name: a\n")
	tests := map[string][]string{
		"missing file":         {"submit", filepath.Join(t.TempDir(), "nope.yaml")},
		"no file":              {"submit"},
		"bad --set":            {"submit", file, "--set", "novalue"},
		"wait and follow":      {"submit", file, "--wait", "--follow"},
		"bad output":           {"submit", file, "-o", "xml"},
		"unknown flag":         {"submit", file, "--nope"},
		"unknown command":      {"submitt", file},
		"unknown spec command": {"spec", "lint"},
		"bad job id":           {"show", "abc"},
		"zero job id":          {"logs", "0"},
		"unknown state":        {"ls", "--state", "runing"},
		"too many args":        {"why", "1", "2"},
	}
	for name, args := range tests {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			r := h.mustRun(2, args...)
			if !strings.HasPrefix(r.stderr, "error: ") {
				t.Errorf("stderr = %q, want an \"error: \" line", r.stderr)
			}
			if len(h.srv.seenSubmits()) != 0 {
				t.Error("a usage error still submitted a job")
			}
		})
	}
}

func TestSubmitWait(t *testing.T) {
	tests := map[string]struct {
		final     string
		reason    string
		wantCode  int
		wantFinal string
	}{
		"succeeded exits 0": {final: "succeeded", wantCode: 0, wantFinal: "job 1 (smoke) succeeded\n"},
		"failed exits 1":    {final: "failed", reason: "ExitCode", wantCode: 1, wantFinal: "job 1 (smoke) failed: ExitCode — exit code 3\n"},
		"canceled exits 1":  {final: "canceled", reason: "CanceledByUser", wantCode: 1, wantFinal: "job 1 (smoke) canceled: CanceledByUser — exit code 3\n"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			gets := 0
			h.srv.progress = func(j *apitypes.Job) {
				gets++
				switch gets {
				case 1:
					j.State = "starting"
				case 2:
					j.State = "running"
				default:
					j.State, j.Reason = tc.final, tc.reason
					if tc.reason != "" {
						j.Message = "exit code 3"
					}
				}
			}
			file := writeSpec(t, t.TempDir(), "s.yaml", "name: smoke\n")
			r := h.mustRun(tc.wantCode, "submit", file, "--wait")
			if r.stdout != "1\n" {
				t.Errorf("stdout = %q, want the id", r.stdout)
			}
			if r.stderr != tc.wantFinal {
				t.Errorf("stderr = %q, want %q", r.stderr, tc.wantFinal)
			}
			h.srv.mu.Lock() // progress runs under the server's lock
			n := gets
			h.srv.mu.Unlock()
			if n < 3 {
				t.Errorf("polled %d times, want until terminal (3)", n)
			}
		})
	}
}

func TestSubmitWaitJSONPrintsFinalJob(t *testing.T) {
	h := newHarness(t)
	h.srv.progress = func(j *apitypes.Job) { j.State = "succeeded" }
	file := writeSpec(t, t.TempDir(), "s.yaml", "name: smoke\n")
	r := h.mustRun(0, "submit", file, "--wait", "-o", "json")
	var job apitypes.Job
	if err := json.Unmarshal([]byte(r.stdout), &job); err != nil {
		t.Fatalf("stdout is not one JSON job: %v\n%s", err, r.stdout)
	}
	if job.ID != 1 || job.State != "succeeded" {
		t.Errorf("job = %d %s, want 1 succeeded", job.ID, job.State)
	}
}

func TestSubmitFollowStreamsEveryAttempt(t *testing.T) {
	h := newHarness(t)
	// The job runs attempt 1 (preempted), goes back to the queue, runs
	// attempt 2 and fails. Each GET moves it one step.
	steps := []func(j *apitypes.Job){
		func(j *apitypes.Job) { j.State, j.AttemptCount = "running", 1 },
		func(j *apitypes.Job) { j.State = "queued" },
		func(j *apitypes.Job) { j.State = "queued" },
		func(j *apitypes.Job) { j.State, j.AttemptCount = "running", 2 },
		func(j *apitypes.Job) { j.State, j.Reason, j.Message = "failed", "ExitCode", "exit code 1" },
	}
	gets := 0
	h.srv.progress = func(j *apitypes.Job) {
		steps[min(gets, len(steps)-1)](j)
		gets++
	}
	h.srv.setLog(1, 1, "epoch 1\n")
	h.srv.setLog(1, 2, "resumed\nepoch 2\n")
	file := writeSpec(t, t.TempDir(), "s.yaml", "name: smoke\n")
	r := h.mustRun(1, "submit", file, "--follow")
	if want := "1\nepoch 1\nresumed\nepoch 2\n"; r.stdout != want {
		t.Errorf("stdout = %q, want %q", r.stdout, want)
	}
	wantErr := "==> job 1 attempt 1 <==\n==> job 1 attempt 2 <==\njob 1 (smoke) failed: ExitCode — exit code 1\n"
	if r.stderr != wantErr {
		t.Errorf("stderr = %q, want %q", r.stderr, wantErr)
	}
	var logReqs []string
	for _, req := range h.srv.seenRequests() {
		if strings.Contains(req, "/logs") {
			logReqs = append(logReqs, req)
		}
	}
	want := []string{"GET /api/v1/jobs/1/logs?attempt=1&follow=true", "GET /api/v1/jobs/1/logs?attempt=2&follow=true"}
	if !reflect.DeepEqual(logReqs, want) {
		t.Errorf("log requests = %q, want %q", logReqs, want)
	}
}

// listFixture adds four jobs submitted 50h, 3h, 5m and 12s before testNow.
func listFixture(h *harness) {
	started := testNow.Add(-4 * time.Minute)
	finished := testNow.Add(-time.Minute)
	h.srv.addJob(apitypes.Job{Name: "old-baseline", Project: "vision", Pool: "standard", State: "succeeded", AttemptCount: 1,
		SubmittedAt: testNow.Add(-50 * time.Hour), Submitter: "ana",
		Resources: apitypes.Resources{GPUs: 8, CPUs: 32, Memory: "256GiB", Nodes: 2}})
	h.srv.addJob(apitypes.Job{Name: "lr-sweep-3", Project: "nlp", Pool: "standard", State: "failed", Reason: "OOMKilled", AttemptCount: 3,
		SubmittedAt: testNow.Add(-3 * time.Hour), Submitter: "bo", StartedAt: &started, FinishedAt: &finished,
		Resources: apitypes.Resources{GPUs: 1, CPUs: 8, Memory: "32GiB", Nodes: 1}, Cost: "12.605", Currency: "EUR"})
	h.srv.addJob(apitypes.Job{Name: "r", Project: "vision", Pool: "default", State: "running", AttemptCount: 1,
		SubmittedAt: testNow.Add(-5 * time.Minute), Submitter: "ana", StartedAt: &started,
		Resources: apitypes.Resources{CPUs: 0.5, Memory: "1GiB", Nodes: 1}})
	h.srv.addJob(apitypes.Job{Name: "smoke", Project: "default", Pool: "default", State: "queued", Reason: "NoCapacity",
		SubmittedAt: testNow.Add(-12 * time.Second), Submitter: "cy"})
}

// checkAligned fails unless every row has a cell starting exactly where each
// header column starts.
func checkAligned(t *testing.T, table string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(table, "\n"), "\n")
	header := lines[0]
	var starts []int
	for i := range header {
		if header[i] != ' ' && (i == 0 || header[i-1] == ' ') {
			starts = append(starts, i)
		}
	}
	for _, row := range lines[1:] {
		for _, s := range starts {
			if s >= len(row) || row[s] == ' ' || (s > 0 && row[s-1] != ' ') {
				t.Errorf("row %q has no cell starting at column %d (header %q)", row, s, header)
			}
		}
	}
}

func TestLsTable(t *testing.T) {
	h := newHarness(t)
	listFixture(h)
	r := h.mustRun(0, "ls")
	want := `ID  NAME          PROJECT  STATE      REASON      ATTEMPTS  AGE
4   smoke         default  queued     NoCapacity  0         12s
3   r             vision   running    -           1         5m
2   lr-sweep-3    nlp      failed     OOMKilled   3         3h
1   old-baseline  vision   succeeded  -           1         2d
`
	if r.stdout != want {
		t.Errorf("ls =\n%s\nwant\n%s", r.stdout, want)
	}
	checkAligned(t, r.stdout)
}

func TestLsWide(t *testing.T) {
	h := newHarness(t)
	listFixture(h)
	r := h.mustRun(0, "ls", "-o", "wide", "--state", "running,failed")
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("want header + 2 rows, got:\n%s", r.stdout)
	}
	for _, col := range []string{"POOL", "RESOURCES", "SUBMITTER", "STARTED", "DURATION", "COST"} {
		if !strings.Contains(lines[0], col) {
			t.Errorf("header %q lacks %s", lines[0], col)
		}
	}
	// Running: started 4m ago, still running → duration 4m0s, in a pool
	// without rates. Failed: ran 3m, cost 12.605, to the cent.
	if !strings.Contains(lines[1], "gpu=0 cpu=0.5 mem=1GiB") || !strings.HasSuffix(lines[1], "4m0s      -") {
		t.Errorf("running row = %q", lines[1])
	}
	if !strings.Contains(lines[2], "gpu=1 cpu=8 mem=32GiB") || !strings.HasSuffix(lines[2], "3m0s      12.61") {
		t.Errorf("failed row = %q", lines[2])
	}
	checkAligned(t, r.stdout)
	if got := h.srv.seenRequests(); got[len(got)-1] != "GET /api/v1/jobs?state=running%2Cfailed" {
		t.Errorf("request = %q", got[len(got)-1])
	}
}

func TestLsColorKeepsAlignment(t *testing.T) {
	h := newHarness(t)
	listFixture(h)
	h.terminal = true
	r := h.mustRun(0, "ls")
	if !strings.Contains(r.stdout, colorGreen+"succeeded"+colorReset) || !strings.Contains(r.stdout, colorRed+"failed"+colorReset) ||
		!strings.Contains(r.stdout, colorYellow+"queued"+colorReset) {
		t.Fatalf("states are not coloured on a terminal:\n%q", r.stdout)
	}
	plain := r.stdout
	for _, c := range []string{colorReset, colorDefault, colorRed, colorGreen, colorYellow, colorBlue} {
		plain = strings.ReplaceAll(plain, c, "")
	}
	checkAligned(t, plain)

	h.vars["NO_COLOR"] = "1"
	if r := h.mustRun(0, "ls"); strings.Contains(r.stdout, "\x1b[") {
		t.Errorf("NO_COLOR set but output is coloured:\n%q", r.stdout)
	}
}

func TestLsJSON(t *testing.T) {
	h := newHarness(t)
	listFixture(h)
	r := h.mustRun(0, "ls", "-o", "json", "--project", "vision")
	var raw map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
	jobs, _ := raw["jobs"].([]any)
	if len(jobs) != 2 {
		t.Fatalf("jobs = %d, want 2 of project vision", len(jobs))
	}
	first := jobs[0].(map[string]any)
	for _, k := range []string{"id", "name", "project", "state", "submitted_at", "resources", "attempt_count"} {
		if _, ok := first[k]; !ok {
			t.Errorf("job JSON lacks %q: %v", k, first)
		}
	}
	if first["name"] != "r" || first["state"] != "running" {
		t.Errorf("first job = %v", first)
	}
}

// --user, --pool and --name reach the server as user, pool and q, with
// the other filters and on every page of --all.
func TestLsFilters(t *testing.T) {
	h := newHarness(t)
	listFixture(h)
	h.srv.pageSize = 1
	r := h.mustRun(0, "ls", "--user", "ana", "--pool", "standard", "--name", "BASE", "--state", "succeeded", "-o", "json")
	var list apitypes.JobList
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Jobs) != 1 || list.Jobs[0].Name != "old-baseline" {
		t.Fatalf("ls --user ana --pool standard --name BASE = %s (%v); want old-baseline", r.stdout, err)
	}
	want := "GET /api/v1/jobs?pool=standard&q=BASE&state=succeeded&user=ana"
	if reqs := h.srv.seenRequests(); !slices.Contains(reqs, want) {
		t.Errorf("requests %q; want %q", reqs, want)
	}
	r = h.mustRun(0, "ls", "--all", "--name", "E", "--pool", "standard")
	if !strings.Contains(r.stdout, "old-baseline") || !strings.Contains(r.stdout, "lr-sweep-3") || strings.Contains(r.stdout, "smoke") {
		t.Errorf("ls --all --name E --pool standard:\n%s", r.stdout)
	}
	want = "GET /api/v1/jobs?cursor=1&pool=standard&q=E"
	if reqs := h.srv.seenRequests(); !slices.Contains(reqs, want) {
		t.Errorf("requests %q; want the second page %q", reqs, want)
	}
}

// Against a real server: --name matches in either case, and a name the
// server refuses is a usage error (exit 2) that says why.
func TestLsFiltersOnTheServer(t *testing.T) {
	h := newContractHarness(t) // one job, "first", by admin in pool default
	for _, args := range [][]string{{"--name", "IRS"}, {"--user", "admin", "--pool", "default", "--name", "first"}} {
		r := h.mustRun(0, append([]string{"ls", "-o", "json"}, args...)...)
		var list apitypes.JobList
		if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Jobs) != 1 || list.Jobs[0].Name != "first" {
			t.Errorf("ls %q = %s (%v); want the job first", args, r.stdout, err)
		}
	}
	for _, args := range [][]string{{"--name", "second"}, {"--user", "nobody"}, {"--pool", "other"}} {
		if r := h.mustRun(0, append([]string{"ls"}, args...)...); r.stdout != "" || r.stderr != "no jobs found\n" {
			t.Errorf("ls %q: stdout %q stderr %q; want no jobs", args, r.stdout, r.stderr)
		}
	}
	r := h.mustRun(ExitUsage, "ls", "--name", strings.Repeat("x", 201))
	if !strings.Contains(r.stderr, "q: is 201 characters long; use at most 200") {
		t.Errorf("a too long --name: stderr %q", r.stderr)
	}
}

func TestLsPaging(t *testing.T) {
	h := newHarness(t)
	listFixture(h)
	h.srv.pageSize = 3

	r := h.mustRun(0, "ls", "-o", "json")
	var list apitypes.JobList
	_ = json.Unmarshal([]byte(r.stdout), &list)
	if len(list.Jobs) != 3 || list.NextCursor == "" {
		t.Errorf("one page: %d jobs, cursor %q; want 3 and a cursor", len(list.Jobs), list.NextCursor)
	}

	r = h.mustRun(0, "ls", "--all", "--limit", "2", "-o", "json")
	list = apitypes.JobList{}
	_ = json.Unmarshal([]byte(r.stdout), &list)
	var ids []int64
	for _, j := range list.Jobs {
		ids = append(ids, j.ID)
	}
	if !reflect.DeepEqual(ids, []int64{4, 3, 2, 1}) || list.NextCursor != "" {
		t.Errorf("--all ids = %v cursor %q; want [4 3 2 1] and no cursor", ids, list.NextCursor)
	}
	reqs := h.srv.seenRequests()
	if !slices.Contains(reqs, "GET /api/v1/jobs?cursor=2&limit=2") {
		t.Errorf("second page was not requested with the cursor: %q", reqs)
	}
}

func TestLsEmpty(t *testing.T) {
	h := newHarness(t)
	r := h.mustRun(0, "ls")
	if r.stdout != "" || r.stderr != "no jobs found\n" {
		t.Errorf("stdout %q stderr %q", r.stdout, r.stderr)
	}
	r = h.mustRun(0, "ls", "-o", "json")
	if strings.TrimSpace(r.stdout) != `{
  "jobs": []
}` {
		t.Errorf("empty JSON list = %q", r.stdout)
	}
}

func detailedJob(h *harness) {
	started := testNow.Add(-90 * time.Minute)
	mid := testNow.Add(-60 * time.Minute)
	finished := testNow.Add(-30 * time.Minute)
	h.srv.addJob(apitypes.Job{
		Name: "resnet", Project: "vision", Pool: "standard", State: "failed", Reason: "ExitCode",
		Message: "attempt 2 exited with code 1", Priority: "normal", Submitter: "ana",
		SubmittedAt: testNow.Add(-2 * time.Hour), StartedAt: &started, FinishedAt: &finished,
		Resources: apitypes.Resources{GPUs: 1, CPUs: 8, Memory: "32GiB", Nodes: 1},
		OutputDir: "/artifacts/vision/resnet/1", AttemptCount: 2, SpecHash: "sha256:abc",
		Spec: json.RawMessage(`{"name":"resnet","params":{"lr":"0.1"}}`),
		Attempts: []apitypes.Attempt{
			{Number: 1, State: "preempted", Reason: "Preempted", CreatedAt: started, StartedAt: &started, FinishedAt: &mid},
			{Number: 2, State: "failed", Reason: "ExitCode", ExitCode: ptr(1), CreatedAt: mid, StartedAt: &mid, FinishedAt: &finished},
		},
		Transitions: []apitypes.Transition{
			{At: testNow.Add(-2 * time.Hour), From: "", To: "queued", Actor: "ana"},
			{At: started, From: "queued", To: "starting", Actor: "scheduler", Attempt: 1},
			{At: finished, From: "running", To: "failed", Actor: "control", Reason: "ExitCode", Message: "exit code 1"},
		},
	})
}

func TestShowHuman(t *testing.T) {
	h := newHarness(t)
	detailedJob(h)
	r := h.mustRun(0, "show", "1")
	for _, want := range []string{
		"State:       failed (ExitCode)\n",
		"Message:     attempt 2 exited with code 1\n",
		"Attempts:    2\n",
		"Output dir:  /artifacts/vision/resnet/1\n",
		"Spec hash:   sha256:abc\n",
		"Resources:   gpu=1 cpu=8 mem=32GiB\n",
		"Duration:    1h0m\n",
		"  N  STATE      EXIT  REASON     STARTED",
		"  1  preempted  -     Preempted  ",
		"  2  failed     1     ExitCode   ",
		"queued → starting  scheduler",
		"(new) → queued",
		"running → failed   control    ExitCode  exit code 1",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("show output lacks %q:\n%s", want, r.stdout)
		}
	}
}

func TestShowJSONAndYAMLFieldNames(t *testing.T) {
	h := newHarness(t)
	detailedJob(h)
	check := func(format string, m map[string]any) {
		t.Helper()
		for _, k := range []string{"id", "name", "project", "state", "reason", "message", "attempts", "transitions", "spec"} {
			if _, ok := m[k]; !ok {
				t.Errorf("%s: job lacks %q", format, k)
			}
		}
		attempts, _ := m["attempts"].([]any)
		if len(attempts) != 2 {
			t.Fatalf("%s: attempts = %v", format, m["attempts"])
		}
		a1, a2 := attempts[0].(map[string]any), attempts[1].(map[string]any)
		if a1["state"] != "preempted" || a1["exit_code"] != nil {
			t.Errorf("%s: attempt 1 = %v, want state preempted and exit_code null", format, a1)
		}
		if _, ok := a1["exit_code"]; !ok {
			t.Errorf("%s: attempt 1 lacks exit_code", format)
		}
		if a2["state"] != "failed" || a2["exit_code"] != float64(1) && a2["exit_code"] != 1 {
			t.Errorf("%s: attempt 2 = %v, want state failed and exit_code 1", format, a2)
		}
		if spec, _ := m["spec"].(map[string]any); spec["name"] != "resnet" {
			t.Errorf("%s: spec = %v", format, m["spec"])
		}
	}

	r := h.mustRun(0, "show", "1", "-o", "json")
	var m map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	check("json", m)

	r = h.mustRun(0, "show", "1", "-o", "yaml")
	m = nil
	if err := yaml.Unmarshal([]byte(r.stdout), &m); err != nil {
		t.Fatalf("not YAML: %v\n%s", err, r.stdout)
	}
	check("yaml", m)
	if strings.Contains(r.stdout, "{") {
		t.Errorf("YAML output uses flow style:\n%s", r.stdout)
	}
	// A string that looks like a number must stay a string.
	if !strings.Contains(r.stdout, `lr: "0.1"`) {
		t.Errorf("YAML lost the quoting of a numeric string:\n%s", r.stdout)
	}
}

func TestShowNotFoundExits3(t *testing.T) {
	h := newHarness(t)
	r := h.mustRun(ExitNotFound, "show", "99")
	if r.stderr != "error: job 99 not found\n" {
		t.Errorf("stderr = %q", r.stderr)
	}
}

func TestLogs(t *testing.T) {
	h := newHarness(t)
	h.srv.addJob(apitypes.Job{Name: "a", State: "running", AttemptCount: 2})
	h.srv.setLog(1, 1, "first\n")
	h.srv.setLog(1, 2, "second\n")

	if r := h.mustRun(0, "logs", "1"); r.stdout != "second\n" {
		t.Errorf("latest attempt = %q", r.stdout)
	}
	if r := h.mustRun(0, "logs", "1", "--attempt", "1", "-f", "--tail", "5", "--timestamps"); r.stdout != "first\n" {
		t.Errorf("attempt 1 = %q", r.stdout)
	}
	reqs := h.srv.seenRequests()
	if got := reqs[len(reqs)-1]; got != "GET /api/v1/jobs/1/logs?attempt=1&follow=true&tail=5&timestamps=true" {
		t.Errorf("request = %q", got)
	}
	if r := h.mustRun(ExitNotFound, "logs", "1", "--attempt", "7"); !strings.Contains(r.stderr, "no log for attempt 7") {
		t.Errorf("stderr = %q", r.stderr)
	}
}

func TestCancel(t *testing.T) {
	h := newHarness(t)
	h.srv.addJob(apitypes.Job{Name: "q", State: "queued"})
	h.srv.addJob(apitypes.Job{Name: "r", State: "running"})
	h.srv.addJob(apitypes.Job{Name: "s", State: "succeeded"})

	if r := h.mustRun(0, "cancel", "1", "--reason", "wrong lr"); r.stdout != "canceled job 1\n" {
		t.Errorf("queued: %q", r.stdout)
	}
	if r := h.mustRun(0, "cancel", "2"); r.stdout != "cancel requested for job 2 (running); it will stop within its grace period\n" {
		t.Errorf("running: %q", r.stdout)
	}
	if r := h.mustRun(ExitConflict, "cancel", "3"); r.stderr != "error: job 3 already ended (succeeded)\n" {
		t.Errorf("ended: %q", r.stderr)
	}
}

func TestWhy(t *testing.T) {
	h := newHarness(t)
	h.srv.addJob(apitypes.Job{Name: "q", State: "queued"})
	r := h.mustRun(0, "why", "1")
	want := `job 1: queued (NoCapacity)
  project vision uses 8 of 8 GPUs in pool standard
evidence:
  - pool standard: 8/8 GPUs allocated
  - job asks for 2 GPUs
hint: wait for a running job to finish, or lower resources.gpus
`
	if r.stdout != want {
		t.Errorf("why =\n%s\nwant\n%s", r.stdout, want)
	}
}

func TestVersion(t *testing.T) {
	h := newHarness(t)
	r := h.mustRun(0, "version")
	want := "client: 1.2.3 (commit abc)\nserver: 9.9.9 (commit srvcommit, store sqlite) at " + h.srv.srv.URL + "\n"
	if r.stdout != want {
		t.Errorf("version = %q, want %q", r.stdout, want)
	}

	h.vars[EnvServer] = "http://127.0.0.1:1" // nothing listens on port 1
	r = h.mustRun(0, "version")
	if r.stdout != "client: 1.2.3 (commit abc)\nserver: unavailable\n" || !strings.Contains(r.stderr, "not reachable") {
		t.Errorf("unreachable: stdout %q stderr %q", r.stdout, r.stderr)
	}
}

func TestUnreachableAndRejectedToken(t *testing.T) {
	h := newHarness(t)
	h.vars[EnvServer] = "http://127.0.0.1:1"
	r := h.mustRun(ExitUnavailable, "ls")
	for _, s := range []string{"error: the Trainyard server at http://127.0.0.1:1 is not reachable", "trainyard server", "TRAINYARD_SERVER"} {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr %q lacks %q", r.stderr, s)
		}
	}

	h = newHarness(t)
	h.vars[EnvToken] = "wrong"
	r = h.mustRun(ExitPermission, "ls")
	for _, s := range []string{"invalid or missing token", "TRAINYARD_TOKEN", "config file"} {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr %q lacks %q", r.stderr, s)
		}
	}
}

func TestSpecValidate(t *testing.T) {
	dir := t.TempDir()
	good := writeSpec(t, dir, "good.yaml", "name: a\nworkdir: code\n")
	bad := writeSpec(t, dir, "bad.yaml", "name: A\n")

	h := newHarness(t)
	var gotSets []string
	h.loadSpec = func(doc []byte, sets []string) (domain.Spec, error) {
		gotSets = sets
		if strings.Contains(string(doc), "name: A") {
			return domain.Spec{}, domain.FieldErrors{
				{Path: "name", Line: 1, Message: "use lowercase letters, digits and '-'"},
				{Path: "entrypoint", Message: "required"},
			}
		}
		return domain.Spec{}, nil
	}
	r := h.mustRun(0, "spec", "validate", good, "--set", "params.lr=1")
	if r.stdout != "ok\n" {
		t.Errorf("stdout = %q", r.stdout)
	}
	if want := []string{"params.lr=1", "workdir=" + filepath.Join(dir, "code")}; !reflect.DeepEqual(gotSets, want) {
		t.Errorf("sets = %q, want %q", gotSets, want)
	}

	r = h.mustRun(2, "spec", "validate", bad)
	want := "error: the job spec is invalid (2 problem(s)):\n  name (line 1): use lowercase letters, digits and '-'\n  entrypoint: required\n"
	if r.stderr != want {
		t.Errorf("stderr = %q, want %q", r.stderr, want)
	}
	if len(h.srv.seenRequests()) != 0 {
		t.Error("spec validate contacted the server")
	}
}

func TestSpecSchema(t *testing.T) {
	h := newHarness(t)
	if r := h.mustRun(0, "spec", "schema"); r.stdout != "{\"title\":\"stub schema\"}\n" {
		t.Errorf("stdout = %q", r.stdout)
	}
}

func TestUnknownCommandSuggests(t *testing.T) {
	h := newHarness(t)
	r := h.mustRun(2, "lss")
	if !strings.HasPrefix(r.stderr, "error: unknown command \"lss\" for \"trainyard\"; did you mean ls") {
		t.Errorf("stderr = %q", r.stderr)
	}
}

func TestRootHelpAndCompletion(t *testing.T) {
	h := newHarness(t)
	r := h.mustRun(0)
	if !strings.Contains(r.stdout, "trainyard submits training jobs") || !strings.Contains(r.stdout, "submit") {
		t.Errorf("root help = %q", r.stdout)
	}
	if strings.Contains(r.stdout, "docs") {
		t.Errorf("hidden docs command is listed:\n%s", r.stdout)
	}
	r = h.mustRun(0, "completion", "bash")
	if !strings.Contains(r.stdout, "bash completion") {
		t.Errorf("completion bash printed %d bytes without a bash script", len(r.stdout))
	}
}
