package api_test

import (
	"net/url"
	"testing"
)

func TestLogFilterErrorsNameTheParameter(t *testing.T) {
	e := newEnv(t)
	e.submit("name: a\nentrypoint: [true]\n")
	tests := map[string]struct {
		query string
		field string
	}{
		"bad grep":  {"grep=" + url.QueryEscape("loss("), "grep"},
		"bad since": {"since=yesterday", "since"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			code, b := e.do("GET", "/api/v1/jobs/1/logs?"+tt.query, e.token, nil)
			got := decodeErr(t, b)
			if code != 400 || got.Code != "invalid_request" || len(got.Fields) != 1 || got.Fields[0].Path != tt.field {
				t.Fatalf("%d %+v; want 400 invalid_request naming %s", code, got, tt.field)
			}
		})
	}
}
