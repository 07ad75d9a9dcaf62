package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

// metrics reads a job's series through the API.
func (s *server) metrics(id int64, key string) map[string][]apitypes.MetricPoint {
	s.t.Helper()
	var out apitypes.MetricSeries
	path := fmt.Sprintf("/api/v1/jobs/%d/metrics?max=100000", id)
	if key != "" {
		path += "&key=" + key
	}
	if code := s.api("GET", path, nil, &out); code != 200 {
		s.t.Fatalf("GET %s: status %d", path, code)
	}
	return out.Series
}

// The sample trainer's stdout progress lines and an SDK-reporting job both
// become a loss series visible through the API and the CLI.
func TestTrainingMetrics(t *testing.T) {
	s := startServer(t, serverOpts{})
	root := repoRoot()
	trainer := s.submit(fmt.Sprintf("name: trainer\nworkdir: %s\nentrypoint: [python3, trainer.py, --steps, \"40\", --report-every, \"5\"]\n",
		filepath.Join(root, "examples")))
	sdkScript := `import trainyard_sdk as ty
for step in range(30):
    ty.report(step, loss=10.0 / (step + 1), lr=0.1)
`
	sdk := s.submit(fmt.Sprintf("name: sdk\nenv_vars: {PYTHONPATH: %s}\nentrypoint: [python3, -c, %q]\n",
		filepath.Join(root, "sdk", "python"), sdkScript))
	for _, id := range []int64{trainer.ID, sdk.ID} {
		if j := s.waitState(id, time.Minute, "succeeded", "failed"); j.State != "succeeded" {
			t.Fatalf("job %d %s: %s\n%s", id, j.State, j.Message, s.mustCLI("logs", fmt.Sprint(id)))
		}
	}

	// Stdout path: 40 steps reported every 5 steps.
	loss := s.metrics(trainer.ID, "loss")["loss"]
	if len(loss) < 8 {
		t.Fatalf("trainer loss series has %d points, want at least 8: %+v", len(loss), loss)
	}
	if first, last := loss[0], loss[len(loss)-1]; !(last.Value < first.Value) || last.Step <= first.Step {
		t.Errorf("trainer loss did not go down over the steps: first %+v, last %+v", first, last)
	}
	// SDK path: every step arrives, nothing fell back to stdout.
	series := s.metrics(sdk.ID, "")
	if got := len(series["loss"]); got != 30 {
		t.Fatalf("SDK loss series has %d points, want 30: %+v", got, series)
	}
	if p := series["loss"][4]; p.Step != 4 || p.Value != 2 || p.Attempt != 1 {
		t.Errorf("SDK point 4 = %+v, want step 4 value 2 attempt 1", p)
	}
	if logs := s.mustCLI("logs", fmt.Sprint(sdk.ID)); strings.Contains(logs, "trainyard: {") {
		t.Errorf("the SDK fell back to progress lines:\n%s", logs)
	}

	// CLI: table with a sparkline, JSON and CSV.
	table := s.mustCLI("metrics", fmt.Sprint(trainer.ID))
	if !strings.Contains(table, "loss") || !strings.ContainsAny(table, "▁█") {
		t.Errorf("metrics table lacks the loss sparkline:\n%s", table)
	}
	var viaCLI apitypes.MetricSeries
	if err := json.Unmarshal([]byte(s.mustCLI("metrics", fmt.Sprint(sdk.ID), "--key", "loss", "-o", "json")), &viaCLI); err != nil {
		t.Fatal(err)
	}
	if len(viaCLI.Series) != 1 || len(viaCLI.Series["loss"]) != 30 {
		t.Errorf("metrics --key loss -o json: %d series, %d loss points; want 1 and 30", len(viaCLI.Series), len(viaCLI.Series["loss"]))
	}
	csv := s.mustCLI("metrics", fmt.Sprint(sdk.ID), "--key", "lr", "--max", "9", "-o", "csv")
	if lines := strings.Split(strings.TrimSpace(csv), "\n"); len(lines) < 2 || len(lines) > 10 || lines[0] != "key,step,value,at,attempt" {
		t.Errorf("metrics -o csv --max 9 gave %d lines:\n%s", len(lines), csv)
	}
}

// The SDK's own tests, against this real server (admin token, a finished
// job's attempt 1).
func TestPythonSDK(t *testing.T) {
	s := startServer(t, serverOpts{})
	job := s.submit("name: target\nentrypoint: [\"true\"]\n")
	if j := s.waitState(job.ID, time.Minute, "succeeded", "failed"); j.State != "succeeded" {
		t.Fatalf("job %s: %s", j.State, j.Message)
	}
	cmd := exec.Command("python3", "-m", "unittest", "-v", "test_trainyard_sdk", "test_client")
	cmd.Dir = filepath.Join(repoRoot(), "sdk", "python")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1",
		"TRAINYARD_SDK_TEST_API="+s.url, "TRAINYARD_SDK_TEST_TOKEN="+s.token,
		fmt.Sprintf("TRAINYARD_SDK_TEST_JOB=%d", job.ID), "TRAINYARD_SDK_TEST_ATTEMPT=1")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "skipped") {
		t.Fatalf("python SDK tests: %v\n%s", err, out)
	}
}

// A job that never reports progress fails HealthCheckFailed after
// health.first_progress; one that reports and then stops fails Stalled.
func TestHealthChecks(t *testing.T) {
	s := startServer(t, serverOpts{})
	silent := s.submit("name: silent\nentrypoint: [sleep, \"60\"]\nhealth: {first_progress: 2s}\n")
	stall := s.submit(fmt.Sprintf("name: stall\nentrypoint: [python3, -c, %q]\nhealth: {first_progress: 30s, stall: 2s}\n",
		`import time
for step in range(3):
    print('trainyard: {"step": %d, "loss": 1.0}' % step, flush=True)
    time.sleep(0.2)
time.sleep(60)
`))
	for id, want := range map[int64]string{silent.ID: "HealthCheckFailed", stall.ID: "Stalled"} {
		j := s.waitState(id, 45*time.Second, "succeeded", "failed", "canceled")
		if j.State != "failed" || j.Reason != want {
			t.Errorf("job %d: %s (%s) %s; want failed (%s)", id, j.State, j.Reason, j.Message, want)
		}
		var d apitypes.Job
		s.api("GET", fmt.Sprintf("/api/v1/jobs/%d", id), nil, &d)
		if len(d.Attempts) != 1 || d.Attempts[0].Reason != want {
			t.Errorf("job %d attempts: %+v; want one, ended %s", id, d.Attempts, want)
		}
	}
	if pts := s.metrics(stall.ID, "loss")["loss"]; len(pts) != 3 {
		t.Errorf("stalled job's loss series: %d points, want 3", len(pts))
	}
}

// Two runs of the sample trainer (examples/smoke.yaml) at two learning
// rates: compare shows the differing param and both loss summaries, and
// metrics overlays both curves.
func TestCompareSampleTrainerRuns(t *testing.T) {
	s := startServer(t, serverOpts{})
	spec := filepath.Join(repoRoot(), "examples", "smoke.yaml")
	a := strings.TrimSpace(s.mustCLI("submit", spec))
	b := strings.TrimSpace(s.mustCLI("submit", spec, "--set", "params.lr=0.2"))
	for _, id := range []string{a, b} {
		var n int64
		fmt.Sscan(id, &n)
		if j := s.waitState(n, time.Minute, "succeeded", "failed"); j.State != "succeeded" {
			t.Fatalf("job %s %s: %s\n%s", id, j.State, j.Message, s.mustCLI("logs", id))
		}
	}
	out := s.mustCLI("compare", a, b)
	row := func(prefix string) []string {
		for l := range strings.SplitSeq(out, "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), prefix) {
				return strings.Fields(l)
			}
		}
		return nil
	}
	if f := row("params.lr"); len(f) != 3 || f[1] != "0.05" || f[2] != "0.2" {
		t.Errorf("params.lr row %q, want 0.05 and 0.2:\n%s", f, out)
	}
	if !strings.Contains(out, "Differences (1):") {
		t.Errorf("want one difference, params.lr:\n%s", out)
	}
	if f := row("loss"); len(f) != 6 || f[1] != "last" || f[3] != "@40" || f[5] != "@40" {
		t.Errorf("loss row %q, want both jobs' last loss at step 40:\n%s", f, out)
	}
	if f := row("State"); strings.Join(f, " ") != "State succeeded (Completed) succeeded (Completed)" {
		t.Errorf("State row %q:\n%s", f, out)
	}
	var c apitypes.Comparison
	if err := json.Unmarshal([]byte(s.mustCLI("compare", a, b, "-o", "json")), &c); err != nil {
		t.Fatal(err)
	}
	for _, j := range c.Jobs {
		if len(j.Metrics) != 1 || j.Metrics[0].Key != "loss" || !(j.Metrics[0].Min <= j.Metrics[0].Last && j.Metrics[0].Last < j.Metrics[0].Max) ||
			j.RunSeconds <= 0 || j.Env == "" {
			t.Errorf("job %d: %+v", j.ID, j)
		}
	}
	overlay := s.mustCLI("metrics", a, b, "--key", "loss")
	if !strings.HasPrefix(overlay, "loss: every job on one scale, steps ") || strings.Count(overlay, "\n") != 4 {
		t.Errorf("metrics overlay:\n%s", overlay)
	}
	csvOut := s.mustCLI("metrics", a, b, "--key", "loss", "-o", "csv")
	if !strings.HasPrefix(csvOut, "job,key,step,value,at,attempt\n"+a+",loss,") || !strings.Contains(csvOut, "\n"+b+",loss,") {
		t.Errorf("metrics csv:\n%s", csvOut)
	}
}
