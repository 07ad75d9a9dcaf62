package alerts

import (
	"fmt"
	"net/mail"
	"net/netip"
	"strings"
	"time"

	"trainyard/internal/domain"
)

// SMTPConfig is `alerts.smtp`: the mail relay that job-end notifications
// to e-mail addresses go through. The connection is upgraded with
// STARTTLS, which is required unless Insecure (allowed only for a relay on
// this machine). The password is never in the config file: it comes from
// the environment variable SMTPPasswordEnv or from PasswordFile.
type SMTPConfig struct {
	// Host and Port of the relay (port default 587, submission).
	Host string `yaml:"host" json:"host"`
	Port int    `yaml:"port" json:"port"`
	// From is the sender's address, e.g. trainyard@example.com.
	From string `yaml:"from" json:"from"`
	// Username, when set, logs in with AUTH PLAIN (over TLS only).
	Username string `yaml:"username,omitempty" json:"username,omitempty"`
	// PasswordFile holds the password (its first line); the environment
	// variable TRAINYARD_SMTP_PASSWORD takes precedence.
	PasswordFile string `yaml:"password_file,omitempty" json:"password_file,omitempty"`
	// CAFile is a PEM bundle of the CAs that may sign the relay's
	// certificate, besides the system's (a private CA).
	CAFile string `yaml:"ca_file,omitempty" json:"ca_file,omitempty"`
	// Insecure sends without TLS when the relay offers no STARTTLS:
	// allowed only when Host is this machine (localhost, 127.0.0.1, ::1).
	Insecure bool `yaml:"insecure,omitempty" json:"insecure,omitempty"`
	// Timeout bounds one delivery: connect, talk and send (default 30s).
	Timeout domain.Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
}

// SMTPPasswordEnv is the environment variable the SMTP password is read
// from (before SMTPConfig.PasswordFile).
const SMTPPasswordEnv = "TRAINYARD_SMTP_PASSWORD"

// SMTP defaults.
const (
	DefaultSMTPPort    = 587
	DefaultSMTPTimeout = 30 * time.Second
)

// Defaults fills the unset fields of c (Config.Defaults calls it).
func (c *SMTPConfig) Defaults() {
	if c.Port == 0 {
		c.Port = DefaultSMTPPort
	}
	setDur(&c.Timeout, DefaultSMTPTimeout)
}

// validate reports c's problems under "alerts.smtp.".
func (c *SMTPConfig) validate(bad func(field, format string, args ...any)) {
	switch {
	case c.Host == "":
		bad("smtp.host", "is required; set the mail relay's host name, e.g. smtp.example.com")
	case strings.ContainsAny(c.Host, " /@\r\n") || strings.Contains(c.Host, ":") && !isIP(c.Host):
		bad("smtp.host", "%q is not a host name; give the host alone and the port in smtp.port", c.Host)
	}
	if c.Port < 1 || c.Port > 65535 {
		bad("smtp.port", "must be between 1 and 65535 (got %d); 587 is the usual submission port", c.Port)
	}
	if msg := CheckAddress(c.From); msg != "" {
		bad("smtp.from", "%s", msg)
	}
	if c.Insecure && !LoopbackHost(c.Host) {
		bad("smtp.insecure", "is allowed only for a relay on this machine (localhost, 127.0.0.1 or ::1), not %q: without TLS the password and the mail cross the network in clear text; remove insecure", c.Host)
	}
	if c.PasswordFile != "" && c.Username == "" {
		bad("smtp.username", "is required with password_file; set the account to log in as")
	}
	if c.Timeout <= 0 || c.Timeout.D() > MaxWebhookTimeout {
		bad("smtp.timeout", "must be between 1ms and %s (got %s)", domain.FormatDuration(MaxWebhookTimeout), c.Timeout)
	}
}

// CheckAddress returns why a is not a plain e-mail address, or "".
func CheckAddress(a string) string {
	if a == "" {
		return "is required; set the sender's address, e.g. trainyard@example.com"
	}
	p, err := mail.ParseAddress(a)
	if err != nil || p.Address != a || strings.ContainsAny(a, "\r\n<> ") {
		return fmt.Sprintf("%q is not a plain e-mail address; write it as local@domain, without a display name", a)
	}
	return ""
}

// LoopbackHost reports whether host names this machine.
func LoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback()
}

func isIP(host string) bool {
	_, err := netip.ParseAddr(host)
	return err == nil
}
