package alerts_test

import (
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"trainyard/internal/alerts"
)

// TestYAML checks the tags the server config parser relies on.
func TestYAML(t *testing.T) {
	src := `
alerts:
  resolve_after: 2d
  rules:
    queued_too_long: {after: 90m, severity: critical}
    idle_gpu: {enabled: false, below: 0.1, for: 30m}
    memory_near_limit: {above: 0.95}
    preemption_thrash: {severity: critical}
  channels:
    - {name: slack, type: webhook, url: "https://hooks.example.com/x", format: slack, min_severity: warning,
       headers: {Authorization: "Bearer t"}, timeout: 5s}
    - {name: log, type: log}
  delivery: {max_tries: 3}
`
	var doc struct {
		Alerts alerts.Config `yaml:"alerts"`
	}
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	c := doc.Alerts
	c.Defaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	r := c.Rules
	if c.ResolveAfter.D() != 48*time.Hour || r.QueuedTooLong.After.D() != 90*time.Minute || r.QueuedTooLong.Severity != alerts.SeverityCritical ||
		r.IdleGPU.On() || r.IdleGPU.Below != 0.1 || r.IdleGPU.For.D() != 30*time.Minute || !r.MemoryNearLimit.On() ||
		r.MemoryNearLimit.Above != 0.95 || r.MemoryNearLimit.For.D() != 2*time.Minute || c.Delivery.MaxTries != 3 ||
		!r.PreemptionThrash.On() || r.PreemptionThrash.Severity != alerts.SeverityCritical {
		t.Errorf("parsed config = %+v", c)
	}
	ch := c.Channels[0]
	if ch.Format != alerts.FormatSlack || ch.MinSeverity != alerts.SeverityWarning || ch.Headers["Authorization"] != "Bearer t" ||
		ch.Timeout.D() != 5*time.Second || c.Channels[1].Type != alerts.TypeLog {
		t.Errorf("channels = %+v", c.Channels)
	}
}
