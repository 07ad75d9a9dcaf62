package alerts

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Channel delivers notifications somewhere. Send returns an error when the
// notification may not have arrived; the Dispatcher then retries it. Send must
// be safe for concurrent use.
type Channel interface {
	Name() string
	Send(ctx context.Context, n Notification) error
}

// PayloadVersion is the version field of the generic webhook body.
const PayloadVersion = 1

// Payload is the generic JSON webhook body: the version, then every field of
// the alert ("status" is firing, resolved or test):
//
//	{"version":1,"key":"stalled/job=42","rule":"stalled","severity":"critical",
//	 "status":"firing","summary":"job 42 (resnet) stalled on attempt 2: …",
//	 "labels":{"job":42,"job_name":"resnet","attempt":2,"project":"vision",
//	 "pool":"standard","owner":"alice"},"fired_at":"2025-01-02T03:04:05Z"}
type Payload struct {
	Version int `json:"version"`
	Alert
}

// SlackPayload is the body a Slack-format webhook sends (Slack incoming
// webhooks and compatible receivers such as Mattermost).
type SlackPayload struct {
	Text string `json:"text"`
}

// Webhook posts each notification as JSON to a URL. Redirects are not
// followed (a 3xx is an error), so headers never reach another host.
type Webhook struct {
	name    string
	url     string
	format  string
	headers map[string]string
	client  *http.Client
}

// NewWebhook returns the webhook of a channel config that passed Validate.
// A nil client gets a new one; the channel's timeout bounds each request
// either way.
func NewWebhook(c ChannelConfig, client *http.Client) (*Webhook, error) {
	if msg := checkURL(c.URL); msg != "" {
		return nil, fmt.Errorf("channel %q url: %s", c.Name, msg)
	}
	timeout := c.Timeout.D()
	if timeout <= 0 {
		timeout = DefaultWebhookTimeout
	}
	hc := &http.Client{Timeout: timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if client != nil {
		hc.Transport = client.Transport
		hc.Jar = client.Jar
	}
	format := c.Format
	if format == "" {
		format = FormatJSON
	}
	return &Webhook{name: c.Name, url: c.URL, format: format, headers: c.Headers, client: hc}, nil
}

// Name returns the channel name.
func (w *Webhook) Name() string { return w.name }

// String names the channel and its host, never its path or headers.
func (w *Webhook) String() string {
	return fmt.Sprintf("webhook channel %q (%s)", w.name, RedactURL(w.url))
}

// Send posts n. Any status outside 2xx is an error naming the status code.
// Errors never contain the URL's path or query, nor header values.
func (w *Webhook) Send(ctx context.Context, n Notification) error {
	var body any = Payload{Version: PayloadVersion, Alert: n.Alert}
	if w.format == FormatSlack {
		body = SlackPayload{Text: SlackText(n)}
	}
	return w.post(ctx, body, string(n.Status))
}

// post sends body as JSON; what names it in errors ("firing", "job end").
func (w *Webhook) post(ctx context.Context, body any, what string) error {
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("%s: encode %s notification: %w", w, what, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("%s: build request: %s", w, w.redact(err.Error()))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "trainyard-alerts/1")
	for k, v := range w.headers {
		req.Header.Set(k, v)
	}
	resp, err := w.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // *url.Error repeats the full URL
		}
		return fmt.Errorf("%s: POST failed: %s; check that the receiver is up and reachable from the server", w, w.redact(err.Error()))
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%s: receiver answered %d %s; check its logs and the channel's url and headers", w, resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	return nil
}

// redact removes anything secret that may have slipped into s.
func (w *Webhook) redact(s string) string {
	if w.url != "" {
		s = strings.ReplaceAll(s, w.url, RedactURL(w.url))
	}
	if p, err := url.Parse(w.url); err == nil {
		for _, secret := range []string{p.RawQuery, p.EscapedPath(), p.Path} {
			if len(secret) > 1 {
				s = strings.ReplaceAll(s, secret, "/[redacted]")
			}
		}
	}
	for _, v := range w.headers {
		if v != "" {
			s = strings.ReplaceAll(s, v, "[redacted]")
		}
	}
	return s
}

// SlackText is the one-line message of a Slack-format webhook: an emoji and
// the status or severity, the summary, and for a resolved alert why.
func SlackText(n Notification) string {
	var b strings.Builder
	switch n.Status {
	case StatusResolved:
		b.WriteString(":white_check_mark: *RESOLVED* ")
	case StatusTest:
		b.WriteString(":test_tube: *TEST* ")
	default:
		switch n.Severity {
		case SeverityCritical:
			b.WriteString(":red_circle: *CRITICAL* ")
		case SeverityWarning:
			b.WriteString(":warning: *WARNING* ")
		default:
			b.WriteString(":information_source: *INFO* ")
		}
	}
	b.WriteString(n.Summary)
	if n.Status == StatusResolved && n.Resolution != "" {
		b.WriteString(" — resolved: ")
		b.WriteString(n.Resolution)
	}
	fmt.Fprintf(&b, " (`%s`)", n.Key)
	return b.String()
}

// Log writes notifications to the server log: critical alerts at Error,
// warnings at Warn, the rest (and every resolution) at Info.
type Log struct {
	name   string
	logger *slog.Logger
}

// NewLog returns a log channel; a nil logger means slog.Default().
func NewLog(name string, logger *slog.Logger) *Log {
	if logger == nil {
		logger = slog.Default()
	}
	return &Log{name: name, logger: logger}
}

// Name returns the channel name.
func (l *Log) Name() string { return l.name }

// Send logs n; it fails only if ctx is done.
func (l *Log) Send(ctx context.Context, n Notification) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	level := slog.LevelInfo
	if n.Status == StatusFiring {
		switch n.Severity {
		case SeverityCritical:
			level = slog.LevelError
		case SeverityWarning:
			level = slog.LevelWarn
		}
	}
	attrs := []slog.Attr{
		slog.String("channel", l.name), slog.String("key", n.Key), slog.String("rule", string(n.Rule)),
		slog.String("severity", string(n.Severity)), slog.String("summary", n.Summary),
	}
	if n.Labels.Job != 0 {
		attrs = append(attrs, slog.Int64("job", n.Labels.Job))
	}
	if n.Labels.Attempt != 0 {
		attrs = append(attrs, slog.Int("attempt", n.Labels.Attempt))
	}
	for _, kv := range [][2]string{{"project", n.Labels.Project}, {"pool", n.Labels.Pool}, {"owner", n.Labels.Owner}, {"resolution", n.Resolution}} {
		if kv[1] != "" {
			attrs = append(attrs, slog.String(kv[0], kv[1]))
		}
	}
	l.logger.LogAttrs(ctx, level, "alert "+string(n.Status), attrs...)
	return nil
}

// Route is a channel and the lowest severity it is sent.
type Route struct {
	Channel     Channel
	MinSeverity Severity
}

// NewRoutes builds the channels of a config that passed Defaults and
// Validate. Log channels write to logger (nil: slog.Default()); webhooks use
// client's transport (nil: http.DefaultTransport).
func NewRoutes(cfg Config, logger *slog.Logger, client *http.Client) ([]Route, error) {
	var routes []Route
	for i, c := range cfg.Channels {
		var ch Channel
		switch c.Type {
		case TypeWebhook:
			w, err := NewWebhook(c, client)
			if err != nil {
				return nil, fmt.Errorf("alerts.channels[%d]: %w", i, err)
			}
			ch = w
		case TypeLog:
			ch = NewLog(c.Name, logger)
		default:
			return nil, fmt.Errorf("alerts.channels[%d].type: unknown type %q; use webhook or log", i, c.Type)
		}
		min := c.MinSeverity
		if min == "" {
			min = SeverityInfo
		}
		routes = append(routes, Route{Channel: ch, MinSeverity: min})
	}
	return routes, nil
}

// testNotification is what Dispatcher.Test sends to channel.
func testNotification(channel string, now time.Time) Notification {
	return Notification{Alert{
		Key: "test/channel=" + channel, Rule: RuleTest, Severity: SeverityInfo, Status: StatusTest,
		Summary: fmt.Sprintf("test notification from trainyard to channel %q: if you can read this, the channel works", channel),
		FiredAt: now,
	}}
}
