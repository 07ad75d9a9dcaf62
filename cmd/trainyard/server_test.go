package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api"
	"trainyard/internal/cli"
)

func TestServerConfigSecurityKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.yaml")
	body := "metrics_token: s3cret\nmetrics: {auth: loopback}\naudit_witness: /mnt/other/trainyard-audit.witness\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadServerConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Metrics.Auth != "loopback" || cfg.MetricsToken != "s3cret" || cfg.AuditWitness != "/mnt/other/trainyard-audit.witness" {
		t.Fatalf("config = %+v", cfg)
	}
}

func TestParseMetricsAuth(t *testing.T) {
	tests := []struct {
		auth, token string
		want        api.MetricsAuth
		err         string
	}{
		{want: api.MetricsAuthLoopback},
		{token: "t", want: api.MetricsAuthToken}, // metrics_token alone keeps requiring it everywhere
		{auth: "loopback", token: "t", want: api.MetricsAuthLoopback},
		{auth: "token", want: api.MetricsAuthToken},
		{auth: "none", want: api.MetricsAuthNone},
		{auth: "none", token: "t", err: "metrics.auth: none opens /metrics to everyone, yet metrics_token is set"},
		{auth: "open", err: `metrics.auth: "open" is not one of loopback (the default), token or none`},
	}
	for _, tc := range tests {
		var cfg serverConfig
		cfg.Metrics.Auth, cfg.MetricsToken = tc.auth, tc.token
		got, err := parseMetricsAuth(cfg)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("auth %q, token %q: error %v, want %q", tc.auth, tc.token, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("auth %q, token %q = %q, %v; want %q", tc.auth, tc.token, got, err, tc.want)
		}
	}
}

func TestWarnPlaintext(t *testing.T) {
	for addr, warn := range map[string]bool{
		"127.0.0.1:7070": false, "127.8.9.1:7070": false, "[::1]:7070": false,
		"0.0.0.0:7070": true, "[::]:7070": true, "192.0.2.10:7070": true, "[2001:db8::1]:7070": true,
	} {
		tcp, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		warnPlaintext(slog.New(slog.NewTextHandler(&buf, nil)), tcp)
		got := strings.Contains(buf.String(), "level=WARN") && strings.Contains(buf.String(), "without TLS") &&
			strings.Contains(buf.String(), "tls_cert")
		if got != warn {
			t.Errorf("listening on %s: warned %v, want %v (%q)", addr, got, warn, buf.String())
		}
	}
}

// On a TLS first start the CLI config names the server's certificate, by
// absolute path, so the CLI on this machine trusts it.
func TestBootstrapWritesCAFile(t *testing.T) {
	home := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", home)
	t.Chdir(t.TempDir())
	if err := os.WriteFile("cert.pem", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cert, _ := filepath.Abs("cert.pem")
	svc := newService(t)
	if err := bootstrap(context.Background(), svc, t.TempDir(), "https://127.0.0.1:7070", "cert.pem"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(cli.ConfigPath())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "ca_file: "+cert+"\n") || !strings.Contains(string(b), "server: https://127.0.0.1:7070\n") {
		t.Fatalf("CLI config after a TLS first start:\n%s\nwant server https://127.0.0.1:7070 and ca_file %s", b, cert)
	}

	// Without TLS there is no ca_file.
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	if err := bootstrap(context.Background(), newService(t), t.TempDir(), "http://127.0.0.1:7070", ""); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(cli.ConfigPath()); strings.Contains(string(b), "ca_file") {
		t.Fatalf("CLI config of a plain HTTP start names a ca_file:\n%s", b)
	}
}

// startServer runs a server on data in this process until the test ends
// and returns its URL, read from server.json once it listens.
func startServer(t *testing.T, data string) string {
	t.Helper()
	return startServerWith(t, serverConfig{Data: data})
}

// startServerWith is startServer with a config (listening on a free port,
// isolation off).
func startServerWith(t *testing.T, cfg serverConfig) string {
	t.Helper()
	data := cfg.Data
	cfg.Listen, cfg.Isolation = "127.0.0.1:0", isolationOff
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // bootstrap writes the CLI config there
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- runServer(ctx, cfg)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server on %s: %v", data, err)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		var info struct{ URL string }
		if b, err := os.ReadFile(filepath.Join(data, "server.json")); err == nil && json.Unmarshal(b, &info) == nil && info.URL != "" {
			return info.URL
		}
		select {
		case err := <-done:
			t.Fatalf("server on %s stopped before it listened: %v", data, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("server on %s wrote no server.json within 30s", data)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A second server on a running server's data directory exits 2 naming the
// running one, which keeps serving with its files untouched.
func TestSecondServerOnDataDirectoryRefused(t *testing.T) {
	data := t.TempDir()
	url := startServer(t, data)
	before, err := os.ReadFile(filepath.Join(data, "server.json"))
	if err != nil {
		t.Fatal(err)
	}

	root := rootCommand()
	var stderr bytes.Buffer
	root.SetOut(io.Discard)
	root.SetErr(&stderr)
	root.SetArgs([]string{"server", "--data", data, "--listen", "127.0.0.1:0"})
	// Bounded: a second server that was not refused would serve until cancelled.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := cli.ExecuteContext(ctx, root)
	if code != 2 {
		t.Errorf("second server exited %d, want 2; stderr:\n%s", code, stderr.String())
	}
	for _, want := range []string{"data directory " + data + " is in use", fmt.Sprintf("pid %d", os.Getpid()), "at " + url, "--data"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}

	after, err := os.ReadFile(filepath.Join(data, "server.json"))
	if err != nil || !bytes.Equal(before, after) {
		t.Errorf("server.json after the refused start = %q, %v; want it unchanged: %q", after, err, before)
	}
	resp, err := http.Get(url + "/healthz")
	if err != nil {
		t.Fatalf("first server after the refused start: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first server after the refused start: GET /healthz = %s", resp.Status)
	}
}

// Replicas of one PostgreSQL store may share a data directory (shared
// locks), but never with an SQLite server (exclusive), in either order.
func TestDataLockSharedByReplicasOnly(t *testing.T) {
	dir := t.TempDir()
	a, err := lockDataDir(dir, true)
	if err != nil {
		t.Fatal(err)
	}
	b, err := lockDataDir(dir, true)
	if err != nil {
		t.Fatalf("a second replica could not share the data directory: %v", err)
	}
	if l, err := lockDataDir(dir, false); err == nil {
		l.Close()
		t.Fatal("an SQLite server took a data directory replicas hold")
	}
	a.Close()
	b.Close()
	c, err := lockDataDir(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if l, err := lockDataDir(dir, true); err == nil {
		l.Close()
		t.Fatal("a replica took a data directory an SQLite server holds")
	}
}
