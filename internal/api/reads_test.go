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

	"trainyard/internal/api/apitypes"
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

func TestShowAndListAnswerNotModified(t *testing.T) {
	e := newEnv(t)
	_, j := e.submit("name: a\nentrypoint: [\"true\"]\n")
	show := fmt.Sprintf("/api/v1/jobs/%d", j.ID)
	for _, path := range []string{show, "/api/v1/jobs?limit=10"} {
		resp, body := e.get(path, e.token)
		tag := resp.Header.Get("ETag")
		if resp.StatusCode != 200 || len(tag) < 3 || tag[0] != '"' || tag[len(tag)-1] != '"' {
			t.Fatalf("%s: %d, ETag %q; want 200 with a strong tag", path, resp.StatusCode, tag)
		}
		if again, b := e.get(path, e.token); again.Header.Get("ETag") != tag || !bytes.Equal(b, body) {
			t.Errorf("%s: a second read is tagged %q, the first %q", path, again.Header.Get("ETag"), tag)
		}
		for _, inm := range []string{tag, "W/" + tag, `"other", ` + tag, "*"} {
			resp, b := e.get(path, e.token, "If-None-Match", inm)
			if resp.StatusCode != 304 || len(b) != 0 || resp.Header.Get("ETag") != tag {
				t.Errorf("%s If-None-Match %s: %d %q ETag %q; want 304 with no body and the tag", path, inm, resp.StatusCode, b, resp.Header.Get("ETag"))
			}
		}
		if resp, b := e.get(path, e.token, "If-None-Match", `"other"`); resp.StatusCode != 200 || !bytes.Equal(b, body) {
			t.Errorf("%s with another tag: %d %q; want 200 and the answer", path, resp.StatusCode, b)
		}
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		if resp, _ := e.get(path+sep+"pretty=1", e.token, "If-None-Match", tag); resp.StatusCode != 200 || resp.Header.Get("ETag") == tag {
			t.Errorf("%s indented, with the compact answer's tag: %d, ETag %q; want 200 with another tag", path, resp.StatusCode, resp.Header.Get("ETag"))
		}
	}
	resp, _ := e.get(show, e.token)
	showTag := resp.Header.Get("ETag")
	resp, _ = e.get("/api/v1/jobs?limit=10", e.token)
	listTag := resp.Header.Get("ETag")
	// A change to the job is a new answer for both.
	if code, b := e.do("POST", show+"/cancel", e.token, nil); code != 200 {
		t.Fatalf("cancel: %d %s", code, b)
	}
	for path, tag := range map[string]string{show: showTag, "/api/v1/jobs?limit=10": listTag} {
		resp, b := e.get(path, e.token, "If-None-Match", tag)
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"canceled"`) || resp.Header.Get("ETag") == tag {
			t.Errorf("%s after cancel, with the old tag: %d %s ETag %q", path, resp.StatusCode, b, resp.Header.Get("ETag"))
		}
	}
	// A new job is a new page.
	resp, _ = e.get("/api/v1/jobs?limit=10", e.token)
	listTag = resp.Header.Get("ETag")
	e.submit("name: b\nentrypoint: [\"true\"]\n")
	if resp, b := e.get("/api/v1/jobs?limit=10", e.token, "If-None-Match", listTag); resp.StatusCode != 200 || !strings.Contains(string(b), `"name":"b"`) {
		t.Errorf("list after a submit, with the old tag: %d %s", resp.StatusCode, b)
	}
	// Errors carry no tag, and a tag does not turn them into a 304.
	if resp, b := e.get("/api/v1/jobs/999", e.token, "If-None-Match", "*"); resp.StatusCode != 404 || resp.Header.Get("ETag") != "" {
		t.Errorf("missing job with If-None-Match *: %d %s ETag %q; want 404 without a tag", resp.StatusCode, b, resp.Header.Get("ETag"))
	}
}

// TestNotModifiedKeepsJobsHidden: If-None-Match does not reveal a job the
// caller may not read, nor skip the audit record of the refusal.
func TestNotModifiedKeepsJobsHidden(t *testing.T) {
	e := newAuthzEnv(t)
	path := fmt.Sprintf("/api/v1/jobs/%d", e.jobs["other-project"])
	resp, _ := e.get(path, e.token)
	tag := resp.Header.Get("ETag")
	if resp.StatusCode != 200 || tag == "" {
		t.Fatalf("admin show: %d, ETag %q", resp.StatusCode, tag)
	}
	denied := countDenied(t, e.st)
	_, missing := e.get("/api/v1/jobs/999999", e.tokens["member"])
	for _, inm := range []string{tag, "*"} {
		resp, b := e.get(path, e.tokens["member"], "If-None-Match", inm)
		if resp.StatusCode != 404 || resp.Header.Get("ETag") != "" ||
			decodeErr(t, b).Message != strings.Replace(decodeErr(t, missing).Message, "999999", strconv.FormatInt(e.jobs["other-project"], 10), 1) {
			t.Errorf("member show of carol's job, If-None-Match %s: %d %s ETag %q; want the 404 of a missing job", inm, resp.StatusCode, b, resp.Header.Get("ETag"))
		}
	}
	if n := countDenied(t, e.st); n != denied+2 {
		t.Errorf("%d denials recorded for the two refused reads, want 2", n-denied)
	}
	// The member's list leaves carol's job out, so its tag differs.
	resp, b := e.get("/api/v1/jobs", e.tokens["member"])
	var l apitypes.JobList
	if err := json.Unmarshal(b, &l); err != nil || resp.StatusCode != 200 || len(l.Jobs) == 0 || strings.Contains(string(b), "carol") {
		t.Fatalf("member list: %d %s", resp.StatusCode, b)
	}
	adminResp, _ := e.get("/api/v1/jobs", e.token)
	if resp.Header.Get("ETag") == adminResp.Header.Get("ETag") {
		t.Errorf("the member's list and the admin's have the same tag %s", resp.Header.Get("ETag"))
	}
}
