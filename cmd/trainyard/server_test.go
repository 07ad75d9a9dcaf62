package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trainyard/internal/api"
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
