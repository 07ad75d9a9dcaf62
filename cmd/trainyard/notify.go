package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"

	"trainyard/internal/alerting"
	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store"
)

// newNotifier wires the job-end notifier (docs/observability.md#job-end-
// notifications): the alerts section's channels and smtp relay, whose
// password comes from TRAINYARD_SMTP_PASSWORD or alerts.smtp.password_file,
// and the links' base: public_url, else listenURL with this host's name
// for an unspecified address.
func newNotifier(cfg serverConfig, st store.Store, log *slog.Logger, listenURL string, cost func(context.Context, domain.Job) string) (*alerting.Notifier, error) {
	var mailer *alerting.Mailer
	if sc := cfg.Alerts.SMTP; sc != nil {
		pw, err := alerting.SMTPPassword(*sc, os.Getenv)
		if err != nil {
			return nil, fmt.Errorf("server config %w", err)
		}
		if mailer, err = alerting.NewMailer(*sc, pw, nil, clock.Real{}.Now); err != nil {
			return nil, fmt.Errorf("server config %w", err)
		}
	}
	n, err := alerting.NewNotifier(alerting.NotifierConfig{Store: st, Alerts: cfg.Alerts, Mailer: mailer,
		PublicURL: publicURL(cfg.PublicURL, listenURL), Cost: cost, Logger: log, Clock: clock.Real{}})
	if err != nil {
		return nil, fmt.Errorf("server config: %w", err)
	}
	return n, nil
}

// publicURL is configured, else listen with an unspecified host (0.0.0.0,
// [::]) replaced by this machine's name.
func publicURL(configured, listen string) string {
	if configured != "" {
		return configured
	}
	u, err := url.Parse(listen)
	if err != nil {
		return listen
	}
	host, port, err := net.SplitHostPort(u.Host)
	if ip := net.ParseIP(host); err == nil && ip != nil && ip.IsUnspecified() {
		if name, err := os.Hostname(); err == nil && name != "" {
			u.Host = net.JoinHostPort(name, port)
		}
	}
	return u.String()
}

// checkPublicURL reports a public_url that cannot make links.
func checkPublicURL(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("server config public_url: %q is not a URL; write it as https://trainyard.example", s)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("server config public_url: %q must start with http:// or https://", s)
	case u.Host == "":
		return fmt.Errorf("server config public_url: %q has no host; write it as https://trainyard.example", s)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("server config public_url: %q must be a plain address without user, query or fragment; write it as https://trainyard.example[/prefix]", s)
	}
	return nil
}

// jobCost formats what j cost in the server's currency; "" when its pool
// has no rates or the price cannot be read now.
func jobCost(ctx context.Context, svc *service.Service, j domain.Job, currency string) string {
	if svc == nil {
		return ""
	}
	costs, err := svc.Jobs.Costs(ctx, []domain.Job{j})
	if err != nil || len(costs) != 1 || !costs[0].Priced {
		return ""
	}
	return costs[0].Cost.Cents() + " " + currency
}
