package metrics

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

var seriesName = regexp.MustCompile(`\b(?:trainyard|go|process)_[a-z0-9_]+`)

// used returns every series name an expression mentions, histogram suffixes
// removed.
func used(expr string) []string {
	var out []string
	for _, n := range seriesName.FindAllString(expr, -1) {
		for _, suf := range []string{"_bucket", "_count", "_sum"} {
			if b, ok := strings.CutSuffix(n, suf); ok && strings.HasSuffix(b, "_seconds") {
				n = b
			}
		}
		out = append(out, n)
	}
	return out
}

// The example alerting rules and dashboard are valid and use only series the
// exposition has.
func TestDeployFilesUseRealSeries(t *testing.T) {
	fams := scrape(t, populated(t))
	root := filepath.Join("..", "..", "deploy")
	check := func(file, expr string) {
		t.Helper()
		names := used(expr)
		if len(names) == 0 {
			t.Errorf("%s: expression %q uses no trainyard series", file, expr)
		}
		for _, n := range names {
			if fams[n] == nil {
				t.Errorf("%s: %q uses %s, which /metrics does not expose", file, expr, n)
			}
		}
	}

	b, err := os.ReadFile(filepath.Join(root, "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&rules); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Annotations["summary"] == "" || r.Labels["severity"] == "" {
				t.Errorf("alerts.yml: rule %+v needs alert, expr, labels.severity and annotations.summary", r)
			}
			alerts[r.Alert] = true
			check("alerts.yml", r.Expr)
		}
	}
	for _, want := range []string{"TrainyardJobQueuedTooLong", "TrainyardHighFailureRate", "TrainyardGPUIdle", "TrainyardAttemptMemoryNearLimit", "TrainyardSchedulerSlow"} {
		if !alerts[want] {
			t.Errorf("alerts.yml lacks alert %s", want)
		}
	}

	b, err = os.ReadFile(filepath.Join(root, "grafana", "trainyard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("trainyard.json: %v", err)
	}
	if dash.Title == "" || len(dash.Panels) < 6 {
		t.Fatalf("trainyard.json: want a titled dashboard with at least 6 panels, got %q with %d", dash.Title, len(dash.Panels))
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("trainyard.json: panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			check("trainyard.json panel "+p.Title, tg.Expr)
		}
	}
}
