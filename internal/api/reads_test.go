package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// get sends a GET with extra headers and returns the answer, body read.
func (e *env) get(path, token string, header ...string) (*http.Response, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp, b
}

func TestJSONIsCompactUnlessPrettyIsAsked(t *testing.T) {
	e := newEnv(t)
	_, j := e.submit("name: a\nentrypoint: [\"true\"]\n")
	for _, path := range []string{fmt.Sprintf("/api/v1/jobs/%d", j.ID), "/api/v1/jobs", "/api/v1/whoami", "/api/v1/jobs/999"} {
		resp, compact := e.get(path, e.token)
		if resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Content-Length") != strconv.Itoa(len(compact)) {
			t.Errorf("%s: Content-Type %q, Content-Length %q for %d bytes", path, resp.Header.Get("Content-Type"), resp.Header.Get("Content-Length"), len(compact))
		}
		var want bytes.Buffer
		if err := json.Compact(&want, compact); err != nil || want.String()+"\n" != string(compact) {
			t.Errorf("%s: not one line of compact JSON: %q", path, compact)
		}
		for _, q := range []string{"pretty", "pretty=1", "pretty=true", "pretty=yes"} {
			sep := "?"
			if strings.Contains(path, "?") {
				sep = "&"
			}
			presp, pretty := e.get(path+sep+q, e.token)
			var indented bytes.Buffer
			json.Indent(&indented, compact, "", "  ")
			if presp.StatusCode != resp.StatusCode || indented.String() != string(pretty) {
				t.Errorf("%s?%s: %d %q; want %d and the compact answer indented", path, q, presp.StatusCode, pretty, resp.StatusCode)
			}
		}
		if _, b := e.get(path+"?pretty=0", e.token); !bytes.Equal(b, compact) {
			t.Errorf("%s?pretty=0: %q, want the compact answer", path, b)
		}
	}
}
