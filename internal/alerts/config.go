package alerts

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"slices"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/lazyre"
)

// Config is the `alerts:` section of the server config. Durations read as Go
// durations plus a day unit ("90s", "15m", "24h", "2d"). Call Defaults, then
// Validate; NewEngine and NewRoutes expect a config that passed both.
type Config struct {
	// Interval is how often the server evaluates the rules. Default 5s.
	Interval domain.Duration `yaml:"interval" json:"interval"`
	// ResolveAfter resolves an event alert (start failure, interruption,
	// stalled, artifact write failure) that nothing else resolved. Default 24h.
	ResolveAfter domain.Duration `yaml:"resolve_after" json:"resolve_after"`
	Rules        RulesConfig     `yaml:"rules" json:"rules"`
	Channels     []ChannelConfig `yaml:"channels" json:"channels"`
	Delivery     DeliveryConfig  `yaml:"delivery" json:"delivery"`
	// SMTP is the mail relay of job-end notifications to e-mail
	// addresses (smtp.go); nil: none, and specs may not name addresses.
	SMTP *SMTPConfig `yaml:"smtp,omitempty" json:"smtp,omitempty"`
}

// RulesConfig configures each rule. A rule left out keeps its defaults.
type RulesConfig struct {
	QueuedTooLong        QueuedRule    `yaml:"queued_too_long" json:"queued_too_long"`
	StartFailure         EventRule     `yaml:"start_failure" json:"start_failure"`
	Interruption         EventRule     `yaml:"interruption" json:"interruption"`
	Stalled              EventRule     `yaml:"stalled" json:"stalled"`
	IdleGPU              ThresholdRule `yaml:"idle_gpu" json:"idle_gpu"`
	MemoryNearLimit      ThresholdRule `yaml:"memory_near_limit" json:"memory_near_limit"`
	ArtifactWriteFailure EventRule     `yaml:"artifact_write_failure" json:"artifact_write_failure"`
	// PreemptionThrash fires while the control loop holds a job from
	// preemption because it was preempted too often (a preemption loop).
	PreemptionThrash RuleBase `yaml:"preemption_thrash" json:"preemption_thrash"`
	// LogTruncated fires once per attempt whose log reached its limit
	// (policy.log_limit, the pool's or the server's log_limit).
	LogTruncated RuleBase `yaml:"log_truncated" json:"log_truncated"`
	// BudgetThreshold fires once per period when a project's spend reaches
	// a threshold of its budget.
	BudgetThreshold BudgetRule `yaml:"budget_threshold" json:"budget_threshold"`
	// SpendRate fires while a project's running jobs cost more per hour
	// than its budget's rate limit.
	SpendRate RuleBase `yaml:"spend_rate" json:"spend_rate"`
	// WeeklyReport sends a review of the past week once a week (off unless
	// enabled).
	WeeklyReport ReportRule `yaml:"weekly_report" json:"weekly_report"`
	// Runaway fires while an attempt has run past Factor times the
	// expected duration (the p90 of its user's last successful runs of
	// the job's name) and reported no training progress for Quiet.
	Runaway RunawayRule `yaml:"runaway" json:"runaway"`
	// GrantExpiring fires while a running attempt holds capacity only a
	// compute grant gives its project, and the grant ends within the
	// server's grant_warning: its end will preempt the attempt.
	GrantExpiring RuleBase `yaml:"grant_expiring" json:"grant_expiring"`
}

// RunawayRule is runaway: Factor (default 3) times the expected duration,
// and no progress for Quiet (default 1h).
type RunawayRule struct {
	RuleBase `yaml:",inline"`
	Factor   float64         `yaml:"factor" json:"factor"`
	Quiet    domain.Duration `yaml:"quiet" json:"quiet"`
}

// BudgetRule is budget_threshold: Severity is that of thresholds under
// 100% (default warning), ExceededSeverity that of 100% and more (default
// critical: the budget is used up).
type BudgetRule struct {
	RuleBase         `yaml:",inline"`
	ExceededSeverity Severity `yaml:"exceeded_severity" json:"exceeded_severity"`
}

// RuleBase holds what every rule has: an on/off switch (on unless
// `enabled: false`) and a severity.
type RuleBase struct {
	Enabled  *bool    `yaml:"enabled,omitempty" json:"enabled,omitempty"`
	Severity Severity `yaml:"severity" json:"severity"`
}

// On reports whether the rule is enabled (it is unless set to false).
func (r RuleBase) On() bool { return r.Enabled == nil || *r.Enabled }

// EventRule fires when an attempt ends a certain way.
type EventRule struct {
	RuleBase `yaml:",inline"`
}

// QueuedRule fires when a job has waited in the queue for After.
type QueuedRule struct {
	RuleBase `yaml:",inline"`
	After    domain.Duration `yaml:"after" json:"after"`
}

// ThresholdRule fires when a sampled ratio stays beyond a threshold for For:
// GPU utilisation below Below (idle_gpu), or resident memory above Above of
// the limit (memory_near_limit). Ratios are 0–1.
type ThresholdRule struct {
	RuleBase `yaml:",inline"`
	Below    float64         `yaml:"below,omitempty" json:"below,omitempty"`
	Above    float64         `yaml:"above,omitempty" json:"above,omitempty"`
	For      domain.Duration `yaml:"for" json:"for"`
}

// Channel types.
const (
	TypeWebhook = "webhook"
	TypeLog     = "log"
)

// Webhook body formats.
const (
	FormatJSON  = "json"
	FormatSlack = "slack"
)

// ChannelConfig is one notification channel. URL and header values may hold
// tokens: they never appear in errors, logs or String.
type ChannelConfig struct {
	Name string `yaml:"name" json:"name"`
	// Type is "webhook" or "log" (the server log).
	Type string `yaml:"type" json:"type"`
	// URL is the webhook endpoint (http or https).
	URL string `yaml:"url,omitempty" json:"url,omitempty"`
	// Format is the webhook body: "json" (default) or "slack".
	Format string `yaml:"format,omitempty" json:"format,omitempty"`
	// MinSeverity drops alerts below it (default info: send all).
	MinSeverity Severity `yaml:"min_severity,omitempty" json:"min_severity,omitempty"`
	// Headers are added to each webhook request (e.g. Authorization).
	Headers map[string]string `yaml:"headers,omitempty" json:"headers,omitempty"`
	// Timeout bounds one webhook request (default 10s, at most 5m).
	Timeout domain.Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
}

// String describes the channel without its secrets.
func (c ChannelConfig) String() string {
	if c.Type == TypeWebhook {
		return fmt.Sprintf("%s channel %q (%s)", c.Type, c.Name, RedactURL(c.URL))
	}
	return fmt.Sprintf("%s channel %q", c.Type, c.Name)
}

// GoString is String, so that %#v does not print secrets either.
func (c ChannelConfig) GoString() string { return c.String() }

// LogValue logs the channel without its secrets.
func (c ChannelConfig) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("name", c.Name), slog.String("type", c.Type)}
	if c.Type == TypeWebhook {
		attrs = append(attrs, slog.String("url", RedactURL(c.URL)), slog.String("format", c.Format))
	}
	return slog.GroupValue(attrs...)
}

// DeliveryConfig bounds retries of failed sends. A send that fails is retried
// after Backoff, then twice that, and so on up to MaxBackoff, until it
// succeeds, MaxTries sends failed, or the next try would come later than
// MaxAge after the alert was handed over.
type DeliveryConfig struct {
	MaxTries   int             `yaml:"max_tries" json:"max_tries"`     // default 8
	MaxAge     domain.Duration `yaml:"max_age" json:"max_age"`         // default 1h
	Backoff    domain.Duration `yaml:"backoff" json:"backoff"`         // default 1s
	MaxBackoff domain.Duration `yaml:"max_backoff" json:"max_backoff"` // default 5m
}

// Default values.
const (
	DefaultResolveAfter   = 24 * time.Hour
	DefaultQueuedAfter    = time.Hour
	DefaultIdleBelow      = 0.05
	DefaultIdleFor        = 15 * time.Minute
	DefaultMemoryAbove    = 0.9
	DefaultMemoryFor      = 2 * time.Minute
	DefaultRunawayFactor  = 3
	DefaultRunawayQuiet   = time.Hour
	DefaultWebhookTimeout = 10 * time.Second
	MaxWebhookTimeout     = 5 * time.Minute
	DefaultMaxTries       = 8
	DefaultMaxAge         = time.Hour
	DefaultBackoff        = time.Second
	DefaultMaxBackoff     = 5 * time.Minute
)

// Defaults fills every unset (zero) field with its default. Set values,
// including invalid ones, are left for Validate to report.
func (c *Config) Defaults() {
	setDur(&c.ResolveAfter, DefaultResolveAfter)
	r := &c.Rules
	setSev(&r.QueuedTooLong.Severity, SeverityWarning)
	setDur(&r.QueuedTooLong.After, DefaultQueuedAfter)
	setSev(&r.StartFailure.Severity, SeverityCritical)
	setSev(&r.Interruption.Severity, SeverityWarning)
	setSev(&r.Stalled.Severity, SeverityCritical)
	setSev(&r.IdleGPU.Severity, SeverityWarning)
	if r.IdleGPU.Below == 0 {
		r.IdleGPU.Below = DefaultIdleBelow
	}
	setDur(&r.IdleGPU.For, DefaultIdleFor)
	setSev(&r.MemoryNearLimit.Severity, SeverityWarning)
	if r.MemoryNearLimit.Above == 0 {
		r.MemoryNearLimit.Above = DefaultMemoryAbove
	}
	setDur(&r.MemoryNearLimit.For, DefaultMemoryFor)
	setSev(&r.ArtifactWriteFailure.Severity, SeverityCritical)
	setSev(&r.PreemptionThrash.Severity, SeverityWarning)
	setSev(&r.LogTruncated.Severity, SeverityWarning)
	setSev(&r.BudgetThreshold.Severity, SeverityWarning)
	setSev(&r.BudgetThreshold.ExceededSeverity, SeverityCritical)
	setSev(&r.SpendRate.Severity, SeverityWarning)
	setSev(&r.WeeklyReport.Severity, SeverityInfo)
	for _, f := range []struct {
		v *string
		d string
	}{{&r.WeeklyReport.Day, DefaultReportDay},
		{&r.WeeklyReport.At, DefaultReportAt}, {&r.WeeklyReport.By, DefaultReportBy}} {
		if *f.v == "" {
			*f.v = f.d
		}
	}
	setSev(&r.Runaway.Severity, SeverityWarning)
	setSev(&r.GrantExpiring.Severity, SeverityWarning)
	if r.Runaway.Factor == 0 {
		r.Runaway.Factor = DefaultRunawayFactor
	}
	setDur(&r.Runaway.Quiet, DefaultRunawayQuiet)
	if len(c.Channels) == 0 {
		// With no channel configured, alerts still reach the server log.
		c.Channels = []ChannelConfig{{Name: "log", Type: TypeLog}}
	}
	for i := range c.Channels {
		ch := &c.Channels[i]
		setSev(&ch.MinSeverity, SeverityInfo)
		if ch.Type == TypeWebhook {
			if ch.Format == "" {
				ch.Format = FormatJSON
			}
			setDur(&ch.Timeout, DefaultWebhookTimeout)
		}
	}
	if c.SMTP != nil {
		c.SMTP.Defaults()
	}
	d := &c.Delivery
	if d.MaxTries == 0 {
		d.MaxTries = DefaultMaxTries
	}
	setDur(&d.MaxAge, DefaultMaxAge)
	setDur(&d.Backoff, DefaultBackoff)
	setDur(&d.MaxBackoff, DefaultMaxBackoff)
}

func setDur(d *domain.Duration, v time.Duration) {
	if *d == 0 {
		*d = domain.Duration(v)
	}
}

func setSev(s *Severity, v Severity) {
	if *s == "" {
		*s = v
	}
}

var (
	channelName = lazyre.New(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	headerName  = lazyre.New("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// Validate reports every problem in c, each naming its field path from
// "alerts." and the fix. It expects Defaults to have run. Secrets (URLs,
// header values) never appear in the errors.
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("alerts.%s: %s", field, fmt.Sprintf(format, args...)))
	}
	positive := func(field string, d domain.Duration) {
		if d <= 0 {
			bad(field, "must be a positive duration (got %s); use forms like 90s, 15m, 24h or 2d", d)
		}
	}
	sev := func(field string, s Severity) {
		if !s.Valid() {
			bad(field, "unknown severity %q; use info, warning or critical", s)
		}
	}
	ratio := func(field string, v float64) {
		if !(v > 0 && v <= 1) {
			bad(field, "must be a ratio in (0, 1] (got %g); write 5%% as 0.05", v)
		}
	}
	positive("resolve_after", c.ResolveAfter)

	r := c.Rules
	sev("rules.queued_too_long.severity", r.QueuedTooLong.Severity)
	positive("rules.queued_too_long.after", r.QueuedTooLong.After)
	sev("rules.start_failure.severity", r.StartFailure.Severity)
	sev("rules.interruption.severity", r.Interruption.Severity)
	sev("rules.stalled.severity", r.Stalled.Severity)
	sev("rules.artifact_write_failure.severity", r.ArtifactWriteFailure.Severity)
	sev("rules.preemption_thrash.severity", r.PreemptionThrash.Severity)
	sev("rules.log_truncated.severity", r.LogTruncated.Severity)
	sev("rules.budget_threshold.severity", r.BudgetThreshold.Severity)
	sev("rules.budget_threshold.exceeded_severity", r.BudgetThreshold.ExceededSeverity)
	sev("rules.spend_rate.severity", r.SpendRate.Severity)
	sev("rules.weekly_report.severity", r.WeeklyReport.Severity)
	r.WeeklyReport.check(bad)
	sev("rules.idle_gpu.severity", r.IdleGPU.Severity)
	ratio("rules.idle_gpu.below", r.IdleGPU.Below)
	if r.IdleGPU.Above != 0 {
		bad("rules.idle_gpu.above", "is not a field of idle_gpu; use below (GPU utilisation under which a GPU counts as idle)")
	}
	if r.IdleGPU.For < 0 {
		bad("rules.idle_gpu.for", "must not be negative (got %s)", r.IdleGPU.For)
	}
	sev("rules.runaway.severity", r.Runaway.Severity)
	if !(r.Runaway.Factor >= 1) || math.IsInf(r.Runaway.Factor, 0) {
		bad("rules.runaway.factor", "must be 1 or more (got %g): how many times the expected duration a run may take, e.g. 3", r.Runaway.Factor)
	}
	positive("rules.runaway.quiet", r.Runaway.Quiet)
	sev("rules.grant_expiring.severity", r.GrantExpiring.Severity)
	sev("rules.memory_near_limit.severity", r.MemoryNearLimit.Severity)
	ratio("rules.memory_near_limit.above", r.MemoryNearLimit.Above)
	if r.MemoryNearLimit.Below != 0 {
		bad("rules.memory_near_limit.below", "is not a field of memory_near_limit; use above (share of the memory limit)")
	}
	if r.MemoryNearLimit.For < 0 {
		bad("rules.memory_near_limit.for", "must not be negative (got %s)", r.MemoryNearLimit.For)
	}

	seen := map[string]int{}
	for i, ch := range c.Channels {
		p := fmt.Sprintf("channels[%d]", i)
		switch {
		case ch.Name == "":
			bad(p+".name", "is required; name the channel (e.g. ops-slack) so `trainyard alerts test NAME` can find it")
		case !channelName.MatchString(ch.Name):
			bad(p+".name", "%q is not a valid name; use 1–63 of a-z, 0-9, '-' and '_', starting with a letter or digit", ch.Name)
		default:
			if j, dup := seen[ch.Name]; dup {
				bad(p+".name", "%q is already the name of channels[%d]; give each channel its own name", ch.Name, j)
			} else {
				seen[ch.Name] = i
			}
		}
		if !ch.MinSeverity.Valid() {
			bad(p+".min_severity", "unknown severity %q; use info, warning or critical", ch.MinSeverity)
		}
		switch ch.Type {
		case TypeWebhook:
			if msg := checkURL(ch.URL); msg != "" {
				bad(p+".url", "%s", msg)
			}
			if ch.Format != FormatJSON && ch.Format != FormatSlack {
				bad(p+".format", "unknown format %q; use json (generic body) or slack (Slack-compatible {\"text\": ...})", ch.Format)
			}
			if ch.Timeout <= 0 || ch.Timeout.D() > MaxWebhookTimeout {
				bad(p+".timeout", "must be between 1ms and %s (got %s)", domain.FormatDuration(MaxWebhookTimeout), ch.Timeout)
			}
			names := make([]string, 0, len(ch.Headers))
			for h := range ch.Headers {
				names = append(names, h)
			}
			slices.Sort(names)
			for _, h := range names {
				if !headerName.MatchString(h) {
					bad(fmt.Sprintf("%s.headers[%q]", p, h), "is not a valid HTTP header name; use letters, digits and '-'")
				}
				if strings.ContainsAny(ch.Headers[h], "\r\n") {
					bad(fmt.Sprintf("%s.headers[%q]", p, h), "value contains a line break; put the value on one line")
				}
			}
		case TypeLog:
			if ch.URL != "" {
				bad(p+".url", "is only for webhook channels; remove it or set type: webhook")
			}
			if ch.Format != "" {
				bad(p+".format", "is only for webhook channels; remove it")
			}
			if len(ch.Headers) > 0 {
				bad(p+".headers", "are only for webhook channels; remove them")
			}
		case "":
			bad(p+".type", "is required; use webhook or log")
		default:
			bad(p+".type", "unknown type %q; use webhook or log", ch.Type)
		}
	}

	if c.SMTP != nil {
		c.SMTP.validate(bad)
	}
	d := c.Delivery
	if d.MaxTries < 1 || d.MaxTries > 100 {
		bad("delivery.max_tries", "must be between 1 and 100 (got %d)", d.MaxTries)
	}
	positive("delivery.max_age", d.MaxAge)
	positive("delivery.backoff", d.Backoff)
	positive("delivery.max_backoff", d.MaxBackoff)
	if d.Backoff > 0 && d.MaxBackoff > 0 && d.MaxBackoff < d.Backoff {
		bad("delivery.max_backoff", "(%s) is below delivery.backoff (%s); raise it or lower backoff", d.MaxBackoff, d.Backoff)
	}
	return errors.Join(errs...)
}

// checkURL returns why u is not a usable webhook URL, or "". The message never
// repeats u.
func checkURL(u string) string {
	if u == "" {
		return "is required for a webhook channel; set the receiver's http(s) URL"
	}
	p, err := url.Parse(u)
	if err != nil {
		return "is not a valid URL; check for spaces or stray characters (the value is not shown because it may hold a token)"
	}
	if p.Scheme != "http" && p.Scheme != "https" {
		return "must start with http:// or https://"
	}
	if p.Host == "" {
		return "has no host; write it as https://host/path"
	}
	if p.User != nil {
		return "must not carry user:password; send credentials in headers (e.g. Authorization)"
	}
	return ""
}

// RedactURL returns only the scheme and host of u ("https://hooks.slack.com"),
// so that a token in its path, query or user info is never shown.
func RedactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" {
		return "(invalid URL)"
	}
	return p.Scheme + "://" + p.Host
}
