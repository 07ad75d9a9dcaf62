package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trainyard/internal/codepkg"
)

// The code: section sets the unpack limits; what it leaves out keeps the
// defaults, and a bad value names its key and the fix.
func TestCodeLimitsConfig(t *testing.T) {
	load := func(t *testing.T, text string) (codepkg.Limits, error) {
		t.Helper()
		cfg := configFromText(t, text)
		return cfg.Code.limits()
	}
	tests := map[string]struct {
		text string
		want codepkg.Limits
	}{
		"absent":    {"listen: 127.0.0.1:0\n", codepkg.Limits{MaxBytes: 2 << 30, MaxFiles: 100_000}},
		"both":      {"code: {max_unpacked: 512MiB, max_files: 5000}\n", codepkg.Limits{MaxBytes: 512 << 20, MaxFiles: 5000}},
		"size only": {"code: {max_unpacked: 8GiB}\n", codepkg.Limits{MaxBytes: 8 << 30, MaxFiles: 100_000}},
	}
	for name, tc := range tests {
		if got, err := load(t, tc.text); err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", name, got, err, tc.want)
		}
	}
	for text, want := range map[string]string{
		"code: {max_unpacked: lots}\n": "code.max_unpacked",
		"code: {max_unpacked: 0}\n":    "code.max_unpacked",
		"code: {max_files: -1}\n":      "code.max_files",
	} {
		if _, err := load(t, text); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want an error naming %s", text, err, want)
		}
	}
}

// configFromText loads a server config file with the given text.
func configFromText(t *testing.T, text string) serverConfig {
	t.Helper()
	p := filepath.Join(t.TempDir(), "server.yaml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadServerConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}
