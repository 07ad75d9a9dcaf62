package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// jobWithAttempt submits a job and records its first attempt as running.
func (e *env) jobWithAttempt() int64 {
	e.t.Helper()
	spec, _ := json.Marshal("name: m\nentrypoint: [\"true\"]\n")
	code, body := e.do("POST", "/api/v1/jobs", e.token, apitypes.SubmitRequest{Spec: spec})
	if code != 201 {
		e.t.Fatalf("submit: %d %s", code, body)
	}
	var j apitypes.Job
	_ = json.Unmarshal(body, &j)
	errs, err := e.st.Apply(context.Background(), []store.Change{
		{JobID: j.ID, Move: domain.MoveStart(), At: time.Now(), Attempt: &store.AttemptChange{Create: true, Number: 1, To: domain.AttemptRunning}},
		{JobID: j.ID, Move: domain.MoveRun(), At: time.Now()}})
	if err != nil || errs[0] != nil || errs[1] != nil {
		e.t.Fatalf("create attempt: %v %v", err, errs)
	}
	return j.ID
}

func TestMetricsReportAndRead(t *testing.T) {
	e := newEnv(t)
	id := e.jobWithAttempt()
	report := fmt.Sprintf("/api/v1/jobs/%d/attempts/1/metrics", id)
	tests := map[string]struct {
		path, body string
		want       int
	}{
		"stored":         {report, `{"points": [{"step": 1, "metrics": {"loss": 0.9}}, {"step": 2, "metrics": {"loss": 0.5, "acc": 0.7}}]}`, 200},
		"no attempt 2":   {fmt.Sprintf("/api/v1/jobs/%d/attempts/2/metrics", id), `{"points": [{"step": 1, "metrics": {"loss": 1}}]}`, 404},
		"no such job":    {"/api/v1/jobs/999/attempts/1/metrics", `{"points": [{"step": 1, "metrics": {"loss": 1}}]}`, 404},
		"empty":          {report, `{"points": []}`, 400},
		"negative step":  {report, `{"points": [{"step": -1, "metrics": {"loss": 1}}]}`, 400},
		"not a number":   {report, `{"points": [{"step": 1, "metrics": {"loss": "x"}}]}`, 400},
		"escape in name": {report, `{"points": [{"step": 1, "metrics": {"loss\u001b[2J": 1}}]}`, 400},
		"bidi in name":   {report, `{"points": [{"step": 1, "metrics": {"loss\u202e": 1}}]}`, 400},
		"bad attempt":    {fmt.Sprintf("/api/v1/jobs/%d/attempts/zero/metrics", id), `{"points": []}`, 400},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if code, body := e.do("POST", tc.path, e.token, tc.body); code != tc.want {
				t.Errorf("status %d, want %d: %s", code, tc.want, body)
			}
		})
	}
	code, body := e.do("GET", fmt.Sprintf("/api/v1/jobs/%d/metrics", id), e.token, nil)
	var got apitypes.MetricSeries
	if code != 200 || json.Unmarshal(body, &got) != nil {
		t.Fatalf("GET metrics: %d %s", code, body)
	}
	if l := got.Series["loss"]; len(l) != 2 || l[0].Step != 1 || l[1].Value != 0.5 || len(got.Series["acc"]) != 1 {
		t.Errorf("series = %+v", got.Series)
	}
	code, body = e.do("GET", fmt.Sprintf("/api/v1/jobs/%d/metrics?key=acc&max=2", id), e.token, nil)
	if code != 400 || !strings.Contains(string(body), "max") {
		t.Errorf("max=2: %d %s; want 400 naming max", code, body)
	}
	if code, _ := e.do("GET", fmt.Sprintf("/api/v1/jobs/%d/metrics", id), "", nil); code != 401 {
		t.Errorf("without a token: %d, want 401", code)
	}
}

// Reports over the API keep each rank's series apart, as progress lines
// do: rank 0 under the plain key, rank N under "<key>/rankN", and "rank"
// itself is no metric; a fractional rank is an ordinary metric.
func TestMetricsReportPerRank(t *testing.T) {
	e := newEnv(t)
	id := e.jobWithAttempt()
	body := `{"points": [{"step": 1, "metrics": {"loss": 0.9, "rank": 0}}, {"step": 1, "metrics": {"loss": 0.8, "rank": 1}},
		{"step": 1, "metrics": {"loss": 0.7, "rank": 1.5}}]}`
	if code, b := e.do("POST", fmt.Sprintf("/api/v1/jobs/%d/attempts/1/metrics", id), e.token, body); code != 200 {
		t.Fatalf("report: %d %s", code, b)
	}
	code, b := e.do("GET", fmt.Sprintf("/api/v1/jobs/%d/metrics", id), e.token, nil)
	var got apitypes.MetricSeries
	if code != 200 || json.Unmarshal(b, &got) != nil {
		t.Fatalf("GET metrics: %d %s", code, b)
	}
	if l := got.Series["loss/rank1"]; len(l) != 1 || l[0].Value != 0.8 {
		t.Errorf("loss/rank1 = %+v, want the rank-1 point", l)
	}
	if l := got.Series["loss"]; len(l) < 1 || len(got.Series["rank"]) != 1 || got.Series["rank"][0].Value != 1.5 {
		t.Errorf("series = %+v; want loss from ranks 0 (and the unranked report) and rank only as the fractional metric", got.Series)
	}
}

// BenchmarkMetricsIngest reports 100-point batches through the HTTP API on
// SQLite from 4 concurrent clients (the SDK's batch size).
func BenchmarkMetricsIngest(b *testing.B) {
	e := newEnv(b)
	id := e.jobWithAttempt()
	const batch = 100
	var sb strings.Builder
	sb.WriteString(`{"points": [`)
	for i := range batch {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"step": %d, "metrics": {"loss": %g}}`, i, 1/float64(i+1))
	}
	sb.WriteString("]}")
	body := sb.String()
	url := fmt.Sprintf("%s/api/v1/jobs/%d/attempts/1/metrics", e.srv.URL, id)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	var next atomic.Int64
	start := time.Now()
	b.ResetTimer()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				req, _ := http.NewRequest("POST", url, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+e.token)
				resp, err := client.Do(req)
				if err != nil {
					b.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Errorf("status %d", resp.StatusCode)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "points/s")
}
