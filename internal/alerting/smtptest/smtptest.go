// Package smtptest is an SMTP receiver for tests: it speaks enough SMTP
// (EHLO, STARTTLS with a self-signed certificate made at start, AUTH
// PLAIN, MAIL, RCPT, DATA) for net/smtp and records what it receives.
package smtptest

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"
)

// Options configure a Server.
type Options struct {
	// NoTLS leaves STARTTLS out of the offered extensions.
	NoTLS bool
	// User and Password, when User is set, are the only credentials
	// AUTH PLAIN accepts; without them every login is accepted.
	User, Password string
}

// Message is one message received.
type Message struct {
	From string
	To   []string
	Data string // headers and body, LF line ends, dot-unstuffed
	TLS  bool   // the session had been upgraded with STARTTLS
	User string // who logged in ("" without AUTH)
}

// Server is a running SMTP receiver on 127.0.0.1.
type Server struct {
	Host string // 127.0.0.1
	Port int
	opts Options
	ln   net.Listener
	cert tls.Certificate
	pool *x509.CertPool

	mu       sync.Mutex
	msgs     []Message
	failNext int
	wg       sync.WaitGroup
}

// Start starts a receiver; it stops when the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	cert, pool, err := selfSigned()
	if err != nil {
		t.Fatalf("smtptest: certificate: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("smtptest: listen: %v", err)
	}
	s := &Server{Host: "127.0.0.1", Port: ln.Addr().(*net.TCPAddr).Port, opts: opts, ln: ln, cert: cert, pool: pool}
	s.wg.Add(1)
	go s.serve()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

// TLSConfig is a client config that trusts the receiver's certificate.
func (s *Server) TLSConfig() *tls.Config {
	return &tls.Config{RootCAs: s.pool, MinVersion: tls.VersionTLS12}
}

// CertPEM is the receiver's certificate in PEM, for a client's CA file.
func (s *Server) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.cert.Certificate[0]})
}

// Messages returns the messages received so far.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.msgs...)
}

// FailNext makes the next n messages fail with 451 after DATA.
func (s *Server) FailNext(n int) {
	s.mu.Lock()
	s.failNext = n
	s.mu.Unlock()
}

func (s *Server) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(time.Minute))
			s.session(c)
		}()
	}
}

func (s *Server) session(conn net.Conn) {
	tp := textproto.NewConn(conn)
	reply := func(format string, args ...any) { _ = tp.PrintfLine(format, args...) }
	reply("220 localhost smtptest ESMTP")
	var (
		m      Message
		secure bool
		user   string
	)
	for {
		line, err := tp.ReadLine()
		if err != nil {
			return
		}
		verb, arg, _ := strings.Cut(line, " ")
		switch strings.ToUpper(verb) {
		case "EHLO", "HELO":
			lines := []string{"localhost"}
			if !secure && !s.opts.NoTLS {
				lines = append(lines, "STARTTLS")
			}
			lines = append(lines, "AUTH PLAIN", "8BITMIME")
			for i, l := range lines {
				sep := "-"
				if i == len(lines)-1 {
					sep = " "
				}
				reply("250%s%s", sep, l)
			}
		case "STARTTLS":
			if secure || s.opts.NoTLS {
				reply("503 not now")
				continue
			}
			reply("220 go ahead")
			tc := tls.Server(conn, &tls.Config{Certificates: []tls.Certificate{s.cert}})
			if err := tc.Handshake(); err != nil {
				return
			}
			conn, secure = tc, true
			tp = textproto.NewConn(tc)
		case "AUTH":
			mech, resp, _ := strings.Cut(arg, " ")
			if !strings.EqualFold(mech, "PLAIN") {
				reply("504 only PLAIN")
				continue
			}
			b, err := base64.StdEncoding.DecodeString(resp)
			parts := strings.Split(string(b), "\x00")
			if err != nil || len(parts) != 3 || (s.opts.User != "" && (parts[1] != s.opts.User || parts[2] != s.opts.Password)) {
				reply("535 5.7.8 authentication failed")
				continue
			}
			user = parts[1]
			reply("235 2.7.0 ok")
		case "MAIL":
			m = Message{From: addr(arg), TLS: secure, User: user}
			reply("250 ok")
		case "RCPT":
			m.To = append(m.To, addr(arg))
			reply("250 ok")
		case "DATA":
			reply("354 go ahead")
			r := bufio.NewReader(tp.DotReader())
			var b strings.Builder
			if _, err := r.WriteTo(&b); err != nil {
				return
			}
			m.Data = b.String()
			s.mu.Lock()
			fail := s.failNext > 0
			if fail {
				s.failNext--
			} else {
				s.msgs = append(s.msgs, m)
			}
			s.mu.Unlock()
			if fail {
				reply("451 4.3.0 try again later")
			} else {
				reply("250 queued")
			}
		case "RSET", "NOOP":
			reply("250 ok")
		case "QUIT":
			reply("221 bye")
			return
		default:
			reply("502 unknown command")
		}
	}
}

// addr returns the address of "FROM:<a@b>" or "TO:<a@b>".
func addr(arg string) string {
	_, a, _ := strings.Cut(arg, ":")
	a, _, _ = strings.Cut(strings.TrimSpace(a), " ")
	return strings.Trim(a, "<>")
}

// selfSigned makes a certificate for 127.0.0.1 and localhost, and a pool
// that trusts it.
func selfSigned() (tls.Certificate, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "smtptest"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("parse: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool, nil
}
