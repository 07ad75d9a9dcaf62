package main

import (
	"os"
	"strings"
	"testing"
)

func TestPublicURL(t *testing.T) {
	host, _ := os.Hostname()
	for _, tc := range []struct{ configured, listen, want string }{
		{"https://ty.example/prefix", "http://127.0.0.1:7070", "https://ty.example/prefix"},
		{"", "http://127.0.0.1:7070", "http://127.0.0.1:7070"},
		{"", "https://0.0.0.0:7443", "https://" + host + ":7443"},
		{"", "http://[::]:7070", "http://" + host + ":7070"},
	} {
		if host == "" {
			t.Skip("this machine has no host name")
		}
		if got := publicURL(tc.configured, tc.listen); got != tc.want {
			t.Errorf("publicURL(%q, %q) = %q, want %q", tc.configured, tc.listen, got, tc.want)
		}
	}
	for s, want := range map[string]string{
		"ftp://ty.example":           "must start with http:// or https://",
		"https://":                   "has no host",
		"https://u:p@ty.example":     "without user, query or fragment",
		"https://ty.example/?token=": "without user, query or fragment",
	} {
		if err := checkPublicURL(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("checkPublicURL(%q) = %v, want %q", s, err, want)
		}
	}
	if err := checkPublicURL("https://ty.example/trainyard"); err != nil {
		t.Errorf("a good URL: %v", err)
	}
}
