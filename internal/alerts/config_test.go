package alerts

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
)

func TestDefaults(t *testing.T) {
	var c Config
	c.Channels = []ChannelConfig{{Name: "hook", Type: TypeWebhook, URL: "https://example.com/x"}, {Name: "log", Type: TypeLog}}
	c.Defaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	r := c.Rules
	checks := []struct {
		name      string
		got, want any
	}{
		{"resolve_after", c.ResolveAfter.D(), 24 * time.Hour},
		{"queued after", r.QueuedTooLong.After.D(), time.Hour},
		{"queued severity", r.QueuedTooLong.Severity, SeverityWarning},
		{"start_failure", r.StartFailure.Severity, SeverityCritical},
		{"interruption", r.Interruption.Severity, SeverityWarning},
		{"stalled", r.Stalled.Severity, SeverityCritical},
		{"idle below", r.IdleGPU.Below, 0.05},
		{"idle for", r.IdleGPU.For.D(), 15 * time.Minute},
		{"idle severity", r.IdleGPU.Severity, SeverityWarning},
		{"mem above", r.MemoryNearLimit.Above, 0.9},
		{"mem for", r.MemoryNearLimit.For.D(), 2 * time.Minute},
		{"artifact", r.ArtifactWriteFailure.Severity, SeverityCritical},
		{"preemption_thrash", r.PreemptionThrash.Severity, SeverityWarning},
		{"log_truncated", r.LogTruncated.Severity, SeverityWarning},
		{"enabled", r.IdleGPU.On(), true},
		{"format", c.Channels[0].Format, FormatJSON},
		{"timeout", c.Channels[0].Timeout.D(), 10 * time.Second},
		{"min severity", c.Channels[1].MinSeverity, SeverityInfo},
		{"log format", c.Channels[1].Format, ""},
		{"max tries", c.Delivery.MaxTries, 8},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
}

func TestValidateNamesFieldsAndHidesSecrets(t *testing.T) {
	const token = "T000/B000/XXXXsecret"
	c := Config{
		ResolveAfter: domain.Duration(-time.Hour),
		Rules: RulesConfig{
			Stalled:         EventRule{RuleBase{Severity: "page"}},
			IdleGPU:         ThresholdRule{Below: 5},
			MemoryNearLimit: ThresholdRule{Above: 0.9, For: domain.Duration(-time.Second)},
			Runaway:         RunawayRule{Factor: 0.5},
		},
		Channels: []ChannelConfig{
			{Name: "ok", Type: TypeLog},
			{Name: "slack", Type: TypeWebhook, URL: "ftp://hooks.example.com/services/" + token, Format: "xml",
				Headers: map[string]string{"Authorization": "Bearer " + token, "Bad Header": "v"}},
			{Name: "ok", Type: TypeWebhook, URL: "https://user:xsecretx@example.com/"},
			{Type: "email"},
			{Name: "Logs!", Type: TypeLog, URL: "https://example.com/" + token},
			{Name: "nohost", Type: TypeWebhook, URL: "https:///" + token, Timeout: domain.Duration(time.Hour)},
			{Name: "broken", Type: TypeWebhook, URL: "http://exa mple.com/%zz" + token},
		},
		Delivery: DeliveryConfig{MaxTries: 1000},
	}
	c.Defaults()
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate accepted a bad config")
	}
	msg := err.Error()
	for _, want := range []string{
		"alerts.resolve_after: must be a positive duration (got -1h)",
		`alerts.rules.stalled.severity: unknown severity "page"; use info, warning or critical`,
		"alerts.rules.idle_gpu.below: must be a ratio in (0, 1] (got 5); write 5% as 0.05",
		"alerts.rules.memory_near_limit.for: must not be negative",
		"alerts.rules.runaway.factor: must be 1 or more (got 0.5)",
		`alerts.channels[1].url: must start with http:// or https://`,
		`alerts.channels[1].format: unknown format "xml"`,
		`alerts.channels[1].headers["Bad Header"]: is not a valid HTTP header name`,
		`alerts.channels[2].name: "ok" is already the name of channels[0]`,
		"alerts.channels[2].url: must not carry user:password",
		"alerts.channels[3].name: is required",
		`alerts.channels[3].type: unknown type "email"; use webhook or log`,
		`alerts.channels[4].name: "Logs!" is not a valid name`,
		"alerts.channels[4].url: is only for webhook channels",
		"alerts.channels[5].url: has no host",
		"alerts.channels[5].timeout: must be between 1ms and 5m (got 1h)",
		"alerts.channels[6].url: is not a valid URL",
		"alerts.delivery.max_tries: must be between 1 and 100 (got 1000)",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("errors lack %q; got:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, token) || strings.Contains(msg, "secret") {
		t.Errorf("errors reveal a secret:\n%s", msg)
	}
	if n := strings.Count(msg, "\n") + 1; n != 18 {
		t.Errorf("got %d errors, want 18:\n%s", n, msg)
	}
}

func TestChannelConfigStringHidesSecrets(t *testing.T) {
	c := ChannelConfig{Name: "slack", Type: TypeWebhook, URL: "https://hooks.slack.com/services/T0/B0/SECRET?x=1",
		Headers: map[string]string{"Authorization": "Bearer HEADERSECRET"}}
	for _, s := range []string{c.String(), fmt.Sprintf("%v %+v %#v", c, c, c), c.LogValue().String()} {
		if strings.Contains(s, "SECRET") {
			t.Errorf("%q reveals a secret", s)
		}
		if !strings.Contains(s, "https://hooks.slack.com") {
			t.Errorf("%q does not name the host", s)
		}
	}
	if got := RedactURL("https://u:p@h.example:8443/a/b?t=1"); got != "https://h.example:8443" {
		t.Errorf("RedactURL = %q", got)
	}
}
