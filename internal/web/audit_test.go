package web_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"trainyard/internal/store/sqlite"
)

var (
	auditRowRe = regexp.MustCompile(`<tr id="rec-(\d+)"`)
	buttonRe   = regexp.MustCompile(`<button[^>]*>([^<]*)</button>`)
	nextRe     = regexp.MustCompile(`<a href="([^"]+)" rel="next">Next page</a>`)
)

// seqs returns the record numbers an audit page lists.
func seqs(body string) []string {
	var out []string
	for _, m := range auditRowRe.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// unescape undoes what html/template does to a link's ampersands.
func unescape(s string) string { return strings.ReplaceAll(s, "&amp;", "&") }

// TestAuditPage: an admin sees the log in order, a page at a time with
// a link to the next, filtered as trainyard audit ls filters, and the
// chain verified when they ask.
func TestAuditPage(t *testing.T) {
	e := newEnv(t)
	for i := range 60 {
		if _, err := e.svc.Identity.CreateUser(context.Background(), adminP, fmt.Sprintf("user%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	b := e.signIn(e.admin)
	code, body := b.get("/audit")
	if code != http.StatusOK {
		t.Fatalf("GET /audit as an admin: %d\n%s", code, body)
	}
	for _, want := range []string{"<h1>Audit log</h1>", `aria-current="page">Audit`, `name="actor"`, `name="action"`, `name="target"`, `name="since"`,
		"pool.write", "pool/default", "user:admin", "Verify the chain"} {
		if !strings.Contains(body, want) {
			t.Errorf("the audit page lacks %q", want)
		}
	}
	if strings.Contains(body, "The chain is intact") {
		t.Error("the chain was verified without being asked: verifying reads the whole log")
	}
	first := seqs(body)
	if len(first) != 50 || first[0] != "1" || first[49] != "50" {
		t.Fatalf("the first page lists %d records (%v), want 1 to 50", len(first), first)
	}
	m := nextRe.FindStringSubmatch(body)
	if m == nil || !strings.Contains(m[1], "after=50") {
		t.Fatalf("no next page after record 50: %v", m)
	}
	code, body = b.get(unescape(m[1]))
	if page := seqs(body); code != http.StatusOK || len(page) == 0 || page[0] != "51" || !strings.Contains(body, ">First page</a>") {
		t.Errorf("the next page: %d, records %v, want from 51 with a link to the first", code, page)
	}

	// Filters, a smaller page and the cursor.
	code, body = b.get("/audit?action=user.write&limit=2")
	page := seqs(body)
	if code != http.StatusOK || len(page) != 2 || strings.Contains(body, "pool.write") {
		t.Fatalf("?action=user.write&limit=2: %d, records %v", code, page)
	}
	m = nextRe.FindStringSubmatch(body)
	if m == nil || !strings.Contains(unescape(m[1]), "action=user.write") || !strings.Contains(m[1], "after="+page[1]) {
		t.Fatalf("the next page of a filtered list: %v, want the filter and after=%s", m, page[1])
	}
	code, body = b.get(unescape(m[1]))
	if next := seqs(body); code != http.StatusOK || len(next) != 2 || atoi(next[0]) <= atoi(page[1]) {
		t.Errorf("the filtered next page: %d, records %v after %v", code, next, page)
	}
	if code, body = b.get("/audit?actor=nobody"); code != http.StatusOK || len(seqs(body)) != 0 || !strings.Contains(body, "No records match") {
		t.Errorf("?actor=nobody: %d, want no records", code)
	}
	if code, body = b.get("/audit?actor=admin&target=pool/&since=1h"); code != http.StatusOK || len(seqs(body)) != 1 || !strings.Contains(body, "pool/default") {
		t.Errorf("?actor=admin&target=pool/&since=1h: %d, records %v, want the pool's alone", code, seqs(body))
	}
	if code, body = b.get("/audit?since=2099-01-01"); code != http.StatusOK || len(seqs(body)) != 0 {
		t.Errorf("?since=2099-01-01: %d, records %v, want none", code, seqs(body))
	}
	for _, q := range []string{"since=lately", "after=-1", "limit=5000"} {
		if code, _ := b.get("/audit?" + q); code != http.StatusBadRequest {
			t.Errorf("?%s: %d, want 400", q, code)
		}
	}

	code, body = b.get("/audit?verify=1")
	if code != http.StatusOK || !strings.Contains(body, "The chain is intact") || !strings.Contains(body, "records checked") {
		t.Errorf("?verify=1: %d, want the chain intact", code)
	}
}

// TestAuditPageForAuditorsOnly: a member is refused with the service's
// reason; an auditor is shown the log and the chain's verification, with
// no form that posts but signing out and no button but filtering.
func TestAuditPageForAuditorsOnly(t *testing.T) {
	e := newEnv(t)
	bob := e.signIn(e.user("bob", "member@vision"))
	code, body := bob.get("/audit")
	if code != http.StatusForbidden {
		t.Fatalf("GET /audit as a member: %d, want 403", code)
	}
	if strings.Contains(body, `href="/audit"`) || strings.Contains(body, "user:admin") {
		t.Error("the member's refusal links the audit log or shows a record")
	}
	if code, _ := bob.get("/audit?verify=1"); code != http.StatusForbidden {
		t.Errorf("verify as a member: %d, want 403", code)
	}

	carol := e.signIn(e.user("carol", "auditor"))
	for _, path := range []string{"/audit", "/audit?verify=1", "/audit?action=user.write"} {
		code, body := carol.get(path)
		if code != http.StatusOK || len(seqs(body)) == 0 {
			t.Errorf("GET %s as an auditor: %d with %d records", path, code, len(seqs(body)))
			continue
		}
		if n := strings.Count(body, `method="post"`); n != 1 || !strings.Contains(body, `<form method="post" action="/signout"`) {
			t.Errorf("%s as an auditor: %d forms that post, want the sign-out form alone", path, n)
		}
		var buttons []string
		for _, m := range buttonRe.FindAllStringSubmatch(body, -1) {
			buttons = append(buttons, m[1])
		}
		if fmt.Sprint(buttons) != "[Sign out Filter]" {
			t.Errorf("%s as an auditor has buttons %q, want Sign out and Filter alone", path, buttons)
		}
	}
}

// TestAuditPageShowsABrokenChain: a record changed behind the server's
// back is named when the chain is verified, with a link to the page that
// starts at it.
func TestAuditPageShowsABrokenChain(t *testing.T) {
	e := newStoreEnv(t)
	db, err := sql.Open("sqlite", "file:"+e.st.(*sqlite.Store).Path())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE audit SET actor = 'user:someone-else' WHERE seq = 4`); err != nil {
		t.Fatal(err)
	}
	b := e.signIn(e.admin)
	code, body := b.get("/audit?verify=1")
	if code != http.StatusOK || !strings.Contains(body, "The chain is broken (modified)") || !strings.Contains(body, "record 4 was modified") ||
		!strings.Contains(body, `<a href="/audit?after=3">Show the records from there</a>`) {
		t.Errorf("verify of a changed log: %d, want the break at record 4 named and linked", code)
	}
}
