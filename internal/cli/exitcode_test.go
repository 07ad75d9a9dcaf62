package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"trainyard/internal/client"
	"trainyard/internal/domain"
)

func TestExitCode(t *testing.T) {
	api := func(status int) error {
		return fmt.Errorf("doing it: %w", &client.APIError{Status: status, Message: "x"})
	}
	for name, tc := range map[string]struct {
		err  error
		want int
	}{
		"nil":                    {nil, ExitOK},
		"other":                  {errors.New("disk full"), ExitFailure},
		"carried":                {&exitError{code: ExitConflict}, ExitConflict},
		"interrupted":            {fmt.Errorf("waiting: %w", context.Canceled), ExitInterrupted},
		"invalid spec":           {fmt.Errorf("load: %w", domain.ErrInvalid), ExitUsage},
		"400":                    {api(http.StatusBadRequest), ExitUsage},
		"422":                    {api(http.StatusUnprocessableEntity), ExitUsage},
		"404":                    {api(http.StatusNotFound), ExitNotFound},
		"401":                    {api(http.StatusUnauthorized), ExitPermission},
		"403":                    {api(http.StatusForbidden), ExitPermission},
		"409":                    {api(http.StatusConflict), ExitConflict},
		"503":                    {api(http.StatusServiceUnavailable), ExitUnavailable},
		"502":                    {api(http.StatusBadGateway), ExitUnavailable},
		"500":                    {api(http.StatusInternalServerError), ExitFailure},
		"unreachable":            {&client.UnreachableError{URL: "http://x", Err: errors.New("refused")}, ExitUnavailable},
		"scheme, wrapping a 400": {&client.SchemeError{URL: "http://x", Err: api(http.StatusBadRequest)}, ExitUnavailable},
	} {
		if got := ExitCode(tc.err); got != tc.want {
			t.Errorf("%s: ExitCode(%v) = %d, want %d", name, tc.err, got, tc.want)
		}
	}
}

// TestSchemeMismatch: https:// against a plain HTTP server, and http://
// against an HTTPS one, say what happened and what to change, and exit 5.
func TestSchemeMismatch(t *testing.T) {
	h := newHarness(t)
	host := strings.TrimPrefix(h.srv.srv.URL, "http://")
	h.vars[EnvServer] = "https://" + host
	r := h.mustRun(ExitUnavailable, "ls")
	want := "error: the server at https://" + host + " answered in plain HTTP, not HTTPS; use http://" + host
	if !strings.HasPrefix(r.stderr, want) || !strings.Contains(r.stderr, "--tls-cert") || strings.Contains(r.stderr, "HTTPS client") {
		t.Errorf("https:// to a plain server: stderr %q, want it to start %q and name --tls-cert", r.stderr, want)
	}

	tlsSrv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(tlsSrv.Close)
	h = newHarness(t)
	host = strings.TrimPrefix(tlsSrv.URL, "https://")
	h.vars[EnvServer] = "http://" + host
	r = h.mustRun(ExitUnavailable, "ls")
	if want := "error: the server at http://" + host + " serves HTTPS, not plain HTTP; use https://" + host; !strings.HasPrefix(r.stderr, want) {
		t.Errorf("http:// to an HTTPS server: stderr %q, want it to start %q", r.stderr, want)
	}
}

func TestUnavailableServerExits5(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fail(w, http.StatusServiceUnavailable, "unavailable", "this replica does not lead; try the leader")
	}))
	t.Cleanup(srv.Close)
	h := newHarness(t)
	h.vars[EnvServer] = srv.URL
	if r := h.mustRun(ExitUnavailable, "show", "1"); !strings.Contains(r.stderr, "does not lead") {
		t.Errorf("stderr %q", r.stderr)
	}
}

// TestMissingInputFileIsUsage: the same mistake, a file that is not
// there, exits 2 whichever command reads it.
func TestMissingInputFileIsUsage(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	for _, argv := range [][]string{
		{"submit", missing}, {"sim", missing}, {"spec", "validate", missing},
		{"template", "create", "t", "-f", missing}, {"env", "register", "e", "-f", missing},
	} {
		h := newHarness(t)
		if r := h.mustRun(ExitUsage, argv...); !strings.Contains(r.stderr, "no such file") {
			t.Errorf("%v: stderr %q, want the reason", argv, r.stderr)
		}
	}
}
