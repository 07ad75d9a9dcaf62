package alerting

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"mime/quotedprintable"
	"net"
	"net/smtp"
	"os"
	"strconv"
	"strings"
	"time"

	"trainyard/internal/alerts"
)

// SMTPPassword returns the password of c: getenv(alerts.SMTPPasswordEnv) when
// set, else the first line of PasswordFile, else "". Errors name the
// file, never its content.
func SMTPPassword(c alerts.SMTPConfig, getenv func(string) string) (string, error) {
	if p := getenv(alerts.SMTPPasswordEnv); p != "" {
		return p, nil
	}
	if c.PasswordFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(c.PasswordFile)
	if err != nil {
		return "", fmt.Errorf("alerts.smtp.password_file: cannot read %s: %w; check the path and that the server may read it", c.PasswordFile, errors.Unwrap(err))
	}
	p, _, _ := strings.Cut(string(b), "\n")
	p = strings.TrimRight(p, "\r")
	if p == "" {
		return "", fmt.Errorf("alerts.smtp.password_file: %s is empty; write the password on its first line", c.PasswordFile)
	}
	return p, nil
}

// Mailer sends e-mails through an SMTP relay (SMTPConfig). Safe for
// concurrent use: each Send is its own connection.
type Mailer struct {
	cfg      alerts.SMTPConfig
	password string
	tls      *tls.Config
	now      func() time.Time
	hello    string
}

// Mail is one message: one recipient, a subject and a plain-text body.
// ID, when set, makes the Message-ID stable across retries, so that a
// receiver can drop a repeat.
type Mail struct {
	To      string
	Subject string
	Body    string
	ID      string
}

// NewMailer returns a mailer for a config that passed Validate. tlsConfig
// nil verifies the relay against the system's CAs and c.CAFile; now reads
// the clock for the Date header.
func NewMailer(c alerts.SMTPConfig, password string, tlsConfig *tls.Config, now func() time.Time) (*Mailer, error) {
	c.Defaults()
	if c.Username != "" && password == "" {
		return nil, fmt.Errorf("alerts.smtp: username %q has no password; set %s or alerts.smtp.password_file", c.Username, alerts.SMTPPasswordEnv)
	}
	if tlsConfig == nil {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		if c.CAFile != "" {
			pem, err := os.ReadFile(c.CAFile)
			if err != nil {
				return nil, fmt.Errorf("alerts.smtp.ca_file: cannot read %s: %w", c.CAFile, errors.Unwrap(err))
			}
			pool, err := x509.SystemCertPool()
			if err != nil {
				pool = x509.NewCertPool()
			}
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("alerts.smtp.ca_file: %s holds no PEM certificate", c.CAFile)
			}
			tlsConfig.RootCAs = pool
		}
	}
	tlsConfig = tlsConfig.Clone()
	if tlsConfig.ServerName == "" {
		tlsConfig.ServerName = c.Host
	}
	hello, _ := os.Hostname()
	if hello == "" || strings.ContainsAny(hello, " \r\n") {
		hello = "localhost"
	}
	return &Mailer{cfg: c, password: password, tls: tlsConfig, now: now, hello: hello}, nil
}

// String names the relay, never the password.
func (m *Mailer) String() string {
	return "smtp relay " + net.JoinHostPort(m.cfg.Host, strconv.Itoa(m.cfg.Port))
}

// Send delivers one message. Errors say which step failed and never
// contain the password.
func (m *Mailer) Send(ctx context.Context, msg Mail) error {
	if err := m.send(ctx, msg); err != nil {
		s := err.Error()
		if len(m.password) >= 3 {
			s = strings.ReplaceAll(s, m.password, "[redacted]")
		}
		return fmt.Errorf("%s: %s", m, s)
	}
	return nil
}

func (m *Mailer) send(ctx context.Context, msg Mail) error {
	if msg := alerts.CheckAddress(msg.To); msg != "" {
		return fmt.Errorf("recipient %s", msg)
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.Timeout.D())
	defer cancel()
	addr := net.JoinHostPort(m.cfg.Host, strconv.Itoa(m.cfg.Port))
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("connect failed: %w; check alerts.smtp.host and port and that the relay is reachable from the server", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	c, err := smtp.NewClient(conn, m.cfg.Host)
	if err != nil {
		return fmt.Errorf("greeting: %w", err)
	}
	defer c.Close()
	if err := c.Hello(m.hello); err != nil {
		return fmt.Errorf("EHLO: %w", err)
	}
	if ok, _ := c.Extension("STARTTLS"); ok {
		if err := c.StartTLS(m.tls); err != nil {
			return fmt.Errorf("STARTTLS: %w; check the relay's certificate (alerts.smtp.ca_file for a private CA)", err)
		}
	} else if !m.cfg.Insecure {
		return errors.New("the relay does not offer STARTTLS, which is required; use a relay that does (insecure: true is allowed only for one on this machine)")
	}
	if m.cfg.Username != "" {
		if err := c.Auth(smtp.PlainAuth("", m.cfg.Username, m.password, m.cfg.Host)); err != nil {
			return fmt.Errorf("login as %s: %w; check alerts.smtp.username and the password", m.cfg.Username, err)
		}
	}
	if err := c.Mail(m.cfg.From); err != nil {
		return fmt.Errorf("MAIL FROM %s: %w", m.cfg.From, err)
	}
	if err := c.Rcpt(msg.To); err != nil {
		return fmt.Errorf("RCPT TO %s: %w", msg.To, err)
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("DATA: %w", err)
	}
	if _, err := w.Write(m.compose(msg)); err != nil {
		return fmt.Errorf("send message: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("message refused: %w", err)
	}
	return c.Quit()
}

// compose returns the message's headers and quoted-printable body.
func (m *Mailer) compose(msg Mail) []byte {
	var b strings.Builder
	id := msg.ID
	if id == "" {
		var r [12]byte
		_, _ = rand.Read(r[:])
		id = hex.EncodeToString(r[:])
	}
	domainPart := m.cfg.From[strings.LastIndexByte(m.cfg.From, '@')+1:]
	header := func(k, v string) {
		fmt.Fprintf(&b, "%s: %s\r\n", k, strings.NewReplacer("\r", "", "\n", "").Replace(v))
	}
	header("From", m.cfg.From)
	header("To", msg.To)
	header("Subject", mime.QEncoding.Encode("utf-8", msg.Subject))
	header("Date", m.now().UTC().Format(time.RFC1123Z))
	header("Message-ID", "<trainyard."+id+"@"+domainPart+">")
	header("MIME-Version", "1.0")
	header("Content-Type", "text/plain; charset=utf-8")
	header("Content-Transfer-Encoding", "quoted-printable")
	header("Auto-Submitted", "auto-generated")
	b.WriteString("\r\n")
	qp := quotedprintable.NewWriter(&crlfWriter{&b})
	_, _ = qp.Write([]byte(msg.Body))
	_ = qp.Close()
	return []byte(b.String())
}

// crlfWriter writes text with every line ending as CRLF.
type crlfWriter struct{ b *strings.Builder }

func (w *crlfWriter) Write(p []byte) (int, error) {
	s := strings.ReplaceAll(strings.ReplaceAll(string(p), "\r\n", "\n"), "\n", "\r\n")
	w.b.WriteString(s)
	return len(p), nil
}
