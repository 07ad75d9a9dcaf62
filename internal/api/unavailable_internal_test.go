package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
)

// An error that wraps domain.ErrUnavailable, however deep, is a 503 with
// Retry-After and a message that says what to do, never a 500; the
// driver's text stays out of the answer.
func TestWriteErrorMapsStoreOutageTo503(t *testing.T) {
	h := &handler{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	cause := fmt.Errorf("look up token: %w (failed to connect to `user=trainyard database=prod`: 10.0.0.7:5432: connection refused)", domain.ErrUnavailable)
	for name, err := range map[string]error{
		"direct":        cause,
		"wrapped again": fmt.Errorf("authenticate: %w", cause),
		"joined":        errors.Join(errors.New("list jobs"), cause),
		"store kind":    domain.Errorf(domain.ErrUnavailable, "the write connection is gone"),
	} {
		rec := httptest.NewRecorder()
		h.writeError(rec, httptest.NewRequest("GET", "/api/v1/jobs/1", nil), err)
		if rec.Code != http.StatusServiceUnavailable {
			t.Errorf("%s: status %d, want 503", name, rec.Code)
		}
		if ra := rec.Header().Get("Retry-After"); ra != "2" {
			t.Errorf("%s: Retry-After %q, want 2", name, ra)
		}
		var body apitypes.Error
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%s: body %q: %v", name, rec.Body, err)
		}
		if body.Error.Code != "store_unavailable" || !strings.Contains(body.Error.Message, "retry") || !strings.Contains(body.Error.Message, "check the database") {
			t.Errorf("%s: body %+v", name, body.Error)
		}
		if strings.Contains(rec.Body.String(), "10.0.0.7") || strings.Contains(rec.Body.String(), "trainyard database") {
			t.Errorf("%s: the answer leaks the driver's text: %s", name, rec.Body)
		}
	}

	// Other failures keep their status.
	rec := httptest.NewRecorder()
	h.writeError(rec, httptest.NewRequest("GET", "/api/v1/jobs/1", nil), errors.New("boom"))
	if rec.Code != http.StatusInternalServerError || rec.Header().Get("Retry-After") != "" {
		t.Errorf("an unexpected error: %d (Retry-After %q), want 500 without Retry-After", rec.Code, rec.Header().Get("Retry-After"))
	}
}

// /readyz answers an outage as API calls do: 503, Retry-After, and the code
// store_unavailable, with the cause for the operator.
func TestReadyzDuringStoreOutage(t *testing.T) {
	ready := func(context.Context) error {
		return fmt.Errorf("ping postgres store: %w (connection refused)", domain.ErrUnavailable)
	}
	srv := httptest.NewServer(Handler(Config{Ready: ready, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body apitypes.Error
	json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "2" || body.Error.Code != "store_unavailable" ||
		!strings.Contains(body.Error.Message, "connection refused") {
		t.Errorf("readyz: %d, Retry-After %q, %+v", resp.StatusCode, resp.Header.Get("Retry-After"), body.Error)
	}
}
