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

// An alert about a project's budget has no job: the JOB column shows "-".
func TestAlertsLsProjectAlert(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/alerts" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(apitypes.AlertList{Alerts: []apitypes.Alert{
			{ID: 3, Key: "budget_threshold/project=vision/period=2026-12/at=80", Rule: "budget_threshold", Severity: "warning",
				State: "firing", Summary: "project vision has spent 4,012.50 of its 5,000.00 USD budget for 2026-12 (80%)",
				Project: "vision", FiredAt: testNow.Add(-5 * time.Minute)},
			{ID: 2, Key: "stalled/job=42", Rule: "stalled", Severity: "critical", State: "firing", Summary: "job 42 stalled",
				Job: 42, FiredAt: testNow.Add(-10 * time.Minute)},
		}})
	}))
	defer srv.Close()
	h := newHarness(t)
	h.vars[EnvServer] = srv.URL
	out := h.mustRun(0, "alerts", "ls").stdout
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("output:\n%s", out)
	}
	if f := strings.Fields(lines[1]); f[0] != "3" || f[3] != "budget_threshold" || f[4] != "-" || strings.Contains(lines[1], "job 0") {
		t.Errorf("budget alert row = %q", lines[1])
	}
	if f := strings.Fields(lines[2]); f[4] != "42" {
		t.Errorf("job alert row = %q", lines[2])
	}
}
