package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

// newCostHarness returns a harness whose server answers GET /api/v1/cost
// with rep and records each request's query.
func newCostHarness(t *testing.T, rep apitypes.CostReport) (*harness, *[]string) {
	t.Helper()
	var queries []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "GET" || r.URL.Path != "/api/v1/cost" || r.Header.Get("Authorization") != "Bearer "+testToken {
			fail(w, http.StatusNotFound, "not_found", "no such route in this test")
			return
		}
		queries = append(queries, r.URL.RawQuery)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(rep)
	}))
	t.Cleanup(srv.Close)
	return &harness{t: t, srv: &fakeServer{t: t, srv: srv}, vars: map[string]string{
		EnvServer: srv.URL, EnvToken: testToken, "XDG_CONFIG_HOME": t.TempDir(), "NO_COLOR": "",
	}}, &queries
}

var costReport = apitypes.CostReport{By: "project", Since: testNow.Add(-30 * 24 * time.Hour), Until: testNow, Currency: "EUR",
	Lines: []apitypes.CostLine{
		{Group: "vision", GPUHours: 11, CPUHours: 6, Cost: "23.46", Waste: "4.20", Attempts: 3, RunningPerHour: "2.10"},
		{Group: "nlp", GPUHours: 0, CPUHours: 30, Cost: "1.5025", Waste: "1.5025", Attempts: 1, RunningPerHour: "0.00"},
	},
	Total: apitypes.CostLine{Group: "total", GPUHours: 11, CPUHours: 36, Cost: "24.9625", Waste: "5.7025", Attempts: 4, RunningPerHour: "2.10"},
}

func TestCostTable(t *testing.T) {
	h, queries := newCostHarness(t, costReport)
	r := h.mustRun(0, "cost")
	want := `PROJECT  GPU-H  CPU-H  COST (EUR)  WASTE  RUNNING/H  ATTEMPTS
vision   11.0   6.0    23.46       4.20   2.10       3
nlp      0.0    30.0   1.50        1.50   0.00       1
TOTAL    11.0   36.0   24.96       5.70   2.10       4
since 2025-12-03 12:00 UTC, until 2026-01-02 12:00 UTC
`
	if r.stdout != want {
		t.Errorf("table:\n%s\nwant:\n%s", r.stdout, want)
	}
	h.mustRun(0, "cost", "--project", "vision", "--since", "7d", "--by", "user")
	if got := strings.Join(*queries, " "); got != "by=project&since=30d by=user&project=vision&since=7d" {
		t.Errorf("queries = %s", got)
	}
}

func TestCostCSVAndJSON(t *testing.T) {
	h, _ := newCostHarness(t, costReport)
	r := h.mustRun(0, "cost", "-o", "csv")
	want := `project,gpu_hours,cpu_hours,cost,waste,running_per_hour,attempts,local_gib_days,object_gib_days,storage_cost,currency
vision,11,6,23.46,4.20,2.10,3,0,0,0,EUR
nlp,0,30,1.5025,1.5025,0.00,1,0,0,0,EUR
total,11,36,24.9625,5.7025,2.10,4,0,0,0,EUR
`
	if r.stdout != want {
		t.Errorf("csv:\n%s\nwant:\n%s", r.stdout, want)
	}
	r = h.mustRun(0, "cost", "-o", "json")
	var got apitypes.CostReport
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil || got.Total.Cost != "24.9625" || len(got.Lines) != 2 {
		t.Errorf("json = %s (%v)", r.stdout, err)
	}
}

func TestCostBadBy(t *testing.T) {
	h, queries := newCostHarness(t, costReport)
	r := h.run("cost", "--by", "team")
	if r.code == 0 || !strings.Contains(r.stderr, `invalid --by "team": want one of project, pool, user, job, day`) || len(*queries) != 0 {
		t.Errorf("exit %d, stderr %q, %d requests", r.code, r.stderr, len(*queries))
	}
}

func TestCostEmpty(t *testing.T) {
	h, _ := newCostHarness(t, apitypes.CostReport{By: "project", Since: testNow.Add(-time.Hour), Until: testNow})
	r := h.mustRun(0, "cost")
	if r.stdout != "" || !strings.Contains(r.stderr, "no attempts ran since 2026-01-02 11:00 UTC") {
		t.Errorf("stdout %q, stderr %q", r.stdout, r.stderr)
	}
}

// Storage lines follow the compute table, per tier, to the cent.
func TestCostStorageTable(t *testing.T) {
	rep := costReport
	day := time.Date(2025, 12, 3, 0, 0, 0, 0, time.UTC)
	rep.Storage = apitypes.StorageCost{Since: day, Until: day.AddDate(0, 0, 30),
		Lines: []apitypes.StorageLine{{Group: "vision", LocalGiBDays: 310, ObjectGiBDays: 1240.5, LocalCost: "31", ObjectCost: "24.81", Cost: "55.81"}},
		Total: apitypes.StorageLine{Group: "total", LocalGiBDays: 310, ObjectGiBDays: 1240.5, LocalCost: "31", ObjectCost: "24.81", Cost: "55.81"}}
	h, _ := newCostHarness(t, rep)
	r := h.mustRun(0, "cost")
	want := `
PROJECT  LOCAL GiB-DAYS  OBJECT GiB-DAYS  LOCAL COST  OBJECT COST  STORAGE COST (EUR)
vision   310.00          1240.50          31.00       24.81        55.81
TOTAL    310.00          1240.50          31.00       24.81        55.81
storage: whole UTC days 2025-12-03 to 2026-01-01 (a month is 30 days)
`
	if !strings.HasSuffix(r.stdout, want) {
		t.Errorf("table:\n%s\nwant it to end with:\n%s", r.stdout, want)
	}
	// In CSV, each group's storage follows its compute, exact; a group
	// that only stored gets a row of its own.
	rep.Storage.Lines = append(rep.Storage.Lines, apitypes.StorageLine{Group: "archive", LocalGiBDays: 2, Cost: "0.2"})
	h, _ = newCostHarness(t, rep)
	r = h.mustRun(0, "cost", "-o", "csv")
	wantCSV := `project,gpu_hours,cpu_hours,cost,waste,running_per_hour,attempts,local_gib_days,object_gib_days,storage_cost,currency
vision,11,6,23.46,4.20,2.10,3,310,1240.5,55.81,EUR
nlp,0,30,1.5025,1.5025,0.00,1,0,0,0,EUR
archive,0,0,0,0,0,0,2,0,0.2,EUR
total,11,36,24.9625,5.7025,2.10,4,310,1240.5,55.81,EUR
`
	if r.stdout != wantCSV {
		t.Errorf("csv:\n%s\nwant:\n%s", r.stdout, wantCSV)
	}
}
