package web_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
)

// newResourceEnv is newEnv with a service whose SampleHistory is history,
// and the store, to start attempts.
func newResourceEnv(t *testing.T, history func(jobID int64, attempt int) []domain.ResourceSample) (*env, *sqlite.Store) {
	t.Helper()
	e := newEnvWith(t, func(c *service.Config) { c.SampleHistory = history }, defaultPool)
	return e, e.st
}

// startAttempt moves a queued job to starting with its first attempt.
func startAttempt(t *testing.T, st *sqlite.Store, id int64) {
	t.Helper()
	start := store.Change{JobID: id, Move: domain.MoveStart(), At: time.Now(),
		Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting, Node: "n1"}}
	if errs, err := st.Apply(context.Background(), []store.Change{start}); err != nil || errs[0] != nil {
		t.Fatalf("start job %d: %v %v", id, err, errs)
	}
}

var svgRe = regexp.MustCompile(`<svg class="chart"[^>]*aria-label="([^"]*)"[^>]*data-points="(\d+)"[\s\S]*?</svg>`)

// charts returns each chart's data-points by its title, and its SVG.
func charts(body string) (map[string]string, map[string]string) {
	points, svgs := map[string]string{}, map[string]string{}
	for _, m := range svgRe.FindAllStringSubmatch(body, -1) {
		points[m[1]], svgs[m[1]] = m[2], m[0]
	}
	return points, svgs
}

// The job page charts the latest attempt's CPU cores (the derivative of
// its CPU seconds), memory with its limit, and each GPU's utilisation,
// from the readings the service keeps, and its live charts stream them;
// a job without readings gets none of these charts.
func TestJobPageChartsResourceUse(t *testing.T) {
	at := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	var sampled atomic.Int64 // the one job with readings
	history := func(id int64, attempt int) []domain.ResourceSample {
		if id != sampled.Load() || attempt != 1 {
			return nil
		}
		// 15 s apart: 1, 2, then 2 cores; 1 to 4 GiB of 8; GPU 0 and 1,
		// GPU 1 unread in the second.
		cpu := []float64{10, 25, 55, 85}
		out := make([]domain.ResourceSample, len(cpu))
		for i, c := range cpu {
			out[i] = domain.ResourceSample{At: at.Add(time.Duration(i) * 15 * time.Second), CPUSeconds: c,
				RSSBytes: int64(i+1) << 30, MemoryLimit: 8 << 30, GPUUtil: map[int]float64{0: 0.5, 1: 0.9}}
		}
		delete(out[1].GPUUtil, 1)
		return out
	}
	e, st := newResourceEnv(t, history)
	job := e.submit(e.admin, fmt.Sprintf(spec, "train", "default"))
	idle := e.submit(e.admin, fmt.Sprintf(spec, "idle", "default"))
	sampled.Store(job.ID)
	startAttempt(t, st, job.ID)
	startAttempt(t, st, idle.ID)
	b := e.signIn(e.admin)

	code, body := b.get(fmt.Sprintf("/jobs/%d", job.ID))
	if code != http.StatusOK {
		t.Fatalf("job page: %d\n%s", code, body)
	}
	points, svgs := charts(body)
	want := map[string]string{
		"CPU cores used (latest attempt)":     "3", // 4 readings, 3 intervals
		"Memory, GiB (latest attempt)":        "8", // resident and limit
		"GPU utilisation, % (latest attempt)": "7", // GPU 0 in 4, GPU 1 in 3
	}
	for title, n := range want {
		if points[title] != n {
			t.Errorf("chart %q has data-points=%q, want %q (charts: %v)", title, points[title], n, points)
		}
	}
	cpu := svgs["CPU cores used (latest attempt)"]
	for _, label := range []string{">2</text>", ">1</text>", "minutes since 09:00 UTC"} {
		if !strings.Contains(cpu, label) {
			t.Errorf("CPU chart lacks %q: want 1 to 2 cores over minutes since the first reading\n%s", label, cpu)
		}
	}
	mem := svgs["Memory, GiB (latest attempt)"]
	for _, s := range []string{`data-series="resident"`, `data-series="limit"`, ">8</text>", ">1</text>"} {
		if !strings.Contains(mem, s) {
			t.Errorf("memory chart lacks %q\n%s", s, mem)
		}
	}
	gpu := svgs["GPU utilisation, % (latest attempt)"]
	if !strings.Contains(gpu, `data-series="GPU 0"`) || !strings.Contains(gpu, `data-series="GPU 1"`) {
		t.Errorf("GPU chart lacks a series per GPU\n%s", gpu)
	}

	// The live charts carry them too.
	if got := firstEvent(t, b, fmt.Sprintf("/jobs/%d/charts", job.ID)); !strings.Contains(got, `aria-label="CPU cores used (latest attempt)" data-points="3"`) {
		t.Errorf("live charts lack the CPU chart:\n%s", got)
	}

	// A job without readings: no resource chart.
	_, body = b.get(fmt.Sprintf("/jobs/%d", idle.ID))
	if strings.Contains(body, "latest attempt)") {
		t.Errorf("job without readings shows resource charts:\n%s", body)
	}
}

// A member who may not read another member's job sees neither its page
// nor its resource charts, live or not.
func TestResourceChartsFollowJobRead(t *testing.T) {
	var sampled atomic.Int64
	e, st := newResourceEnv(t, func(id int64, attempt int) []domain.ResourceSample {
		if id != sampled.Load() {
			return nil
		}
		now := time.Now()
		return []domain.ResourceSample{{At: now, CPUSeconds: 1, RSSBytes: 1 << 30}, {At: now.Add(time.Second), CPUSeconds: 2, RSSBytes: 1 << 30}}
	})
	alice := e.user("alice", "member@vision")
	bob := e.user("bob", "member@vision")
	job := e.submit(alice, fmt.Sprintf(spec, "mine", "vision"))
	sampled.Store(job.ID)
	startAttempt(t, st, job.ID)

	_, body := e.signIn(alice).get(fmt.Sprintf("/jobs/%d", job.ID))
	if points, _ := charts(body); points["CPU cores used (latest attempt)"] != "1" {
		t.Fatalf("the owner's page: charts %v, want the CPU chart with 1 point", points)
	}
	other := e.signIn(bob)
	code, body := other.get(fmt.Sprintf("/jobs/%d", job.ID))
	if code == http.StatusOK || strings.Contains(body, "latest attempt)") {
		t.Errorf("another member: %d, page with resource charts: %v", code, strings.Contains(body, "latest attempt)"))
	}
	if got := firstEvent(t, other, fmt.Sprintf("/jobs/%d/charts", job.ID)); strings.Contains(got, "<svg") || !strings.HasPrefix(got, "event: problem") {
		t.Errorf("another member's live charts: %q, want a problem and no chart", got)
	}
}

// firstEvent reads the first event after the stream's retry line.
func firstEvent(t *testing.T, b *browser, path string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", b.e.srv.URL+path, nil)
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	var ev strings.Builder
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("%s: stream ended before an event: %v (read %q)", path, err, ev.String())
		}
		if line == "\n" {
			if s := ev.String(); s != "" && !strings.HasPrefix(s, "retry:") {
				return s
			}
			ev.Reset()
			continue
		}
		ev.WriteString(line)
	}
}
