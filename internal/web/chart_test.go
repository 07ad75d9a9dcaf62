package web

import (
	"math"
	"strings"
	"testing"
)

// TestChartEscapesWhatJobsName: a metric's name comes from the job; in
// the chart it is text, never markup.
func TestChartEscapesWhatJobsName(t *testing.T) {
	evil := `"><script>alert(1)</script><x a="`
	out := string(svgChart(evil, evil, nil, series{Name: evil, Points: []point{{1, 2}, {2, 3}}}, series{Name: "b", Points: []point{{1, 1}}}))
	if strings.Contains(out, "<script") || strings.Contains(out, "<x ") {
		t.Fatalf("a name became markup:\n%s", out)
	}
	if !strings.Contains(out, `data-points="3"`) {
		t.Errorf("want 3 points counted:\n%s", out)
	}
}

// TestChartSkipsWhatCannotBeDrawn: NaN and infinite values are left out,
// a flat series still gets a visible range, and no points says so.
func TestChartSkipsWhatCannotBeDrawn(t *testing.T) {
	out := string(svgChart("loss", "step", nil, series{Name: "loss", Points: []point{{0, math.NaN()}, {1, 5}, {2, math.Inf(1)}, {3, 5}}}))
	if !strings.Contains(out, `data-points="2"`) || strings.Contains(out, "NaN") || strings.Contains(out, "Inf") {
		t.Errorf("NaN and Inf not skipped:\n%s", out)
	}
	if out := string(svgChart("loss", "step", nil)); !strings.Contains(out, "no data yet") || !strings.Contains(out, `data-points="0"`) {
		t.Errorf("an empty chart:\n%s", out)
	}
}
