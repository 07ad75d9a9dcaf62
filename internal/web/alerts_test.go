package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// alerts stores three alerts, as the alerter would: 1 fires about bob's
// job in vision, 2 about nlp's budget (no job), 3 fired about dave's job
// in nlp and resolved.
func (e *storeEnv) alerts() (train, prep domain.Job) {
	e.t.Helper()
	train = e.job("train", "vision", "bob", domain.Resources{CPUs: 1})
	prep = e.job("prep", "nlp", "dave", domain.Resources{CPUs: 1})
	now := time.Now().UTC()
	fire := []store.AlertTransition{
		{Alert: domain.Alert{Key: fmt.Sprintf("stalled/job=%d", train.ID), Rule: "stalled", Severity: "critical", State: domain.AlertFiring,
			Summary: "job train stopped reporting progress", JobID: train.ID, JobName: "train", Attempt: 1, Project: "vision", Pool: "gpu", Owner: "bob", FiredAt: now.Add(-time.Hour)}},
		{Alert: domain.Alert{Key: "budget_threshold/project=nlp", Rule: "budget_threshold", Severity: "warning", State: domain.AlertFiring,
			Summary: "project nlp spent 80% of its budget", Project: "nlp", FiredAt: now.Add(-50 * time.Minute)}},
		{Alert: domain.Alert{Key: fmt.Sprintf("queued_too_long/job=%d", prep.ID), Rule: "queued_too_long", Severity: "info", State: domain.AlertFiring,
			Summary: "job prep queued for 2h", JobID: prep.ID, JobName: "prep", Project: "nlp", Pool: "gpu", Owner: "dave", FiredAt: now.Add(-40 * time.Minute)}},
	}
	resolve := []store.AlertTransition{{Alert: domain.Alert{Key: fire[2].Alert.Key, Rule: "queued_too_long", Severity: "info", State: domain.AlertResolved,
		Resolution: "the job started", JobID: prep.ID, Project: "nlp", Owner: "dave", ResolvedAt: now.Add(-30 * time.Minute)}}}
	for _, ts := range [][]store.AlertTransition{fire, resolve} {
		if _, err := e.st.RecordAlerts(context.Background(), ts); err != nil {
			e.t.Fatal(err)
		}
	}
	return train, prep
}

var ackFormRe = regexp.MustCompile(`<form class="ack" method="post" action="/alerts/(\d+)/ack">`)

// ackForms returns the ids of the alerts body offers to acknowledge.
func ackForms(body string) []string {
	var ids []string
	for _, m := range ackFormRe.FindAllStringSubmatch(body, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

// alertRow returns the row of alert id in body.
func alertRow(body string, id int64) string {
	return regexp.MustCompile(fmt.Sprintf(`(?s)<tr id="alert-%d".*?</tr>`, id)).FindString(body)
}

// TestAlertsPage: an admin sees every alert, newest first, with its
// severity, state, job, time and message, and may acknowledge the two
// that fire; the state filter narrows the list.
func TestAlertsPage(t *testing.T) {
	e := newStoreEnv(t)
	train, _ := e.alerts()
	b := e.signIn(e.admin)
	code, body := b.get("/alerts")
	if code != http.StatusOK {
		t.Fatalf("GET /alerts: %d\n%s", code, body)
	}
	if i, j := strings.Index(body, `id="alert-3"`), strings.Index(body, `id="alert-1"`); i < 0 || j < 0 || i > j {
		t.Error("the alerts are not listed newest first")
	}
	one := alertRow(body, 1)
	for _, want := range []string{"sev-critical", ">firing<", "stalled", "job train stopped reporting progress",
		fmt.Sprintf(`<a href="/jobs/%d">%d</a>`, train.ID, train.ID), "<time datetime=", " ago</time>"} {
		if !strings.Contains(one, want) {
			t.Errorf("alert 1's row lacks %q:\n%s", want, one)
		}
	}
	if three := alertRow(body, 3); !strings.Contains(three, ">resolved<") || !strings.Contains(three, "the job started") {
		t.Errorf("alert 3's row: %s, want resolved with its resolution", three)
	}
	if got := fmt.Sprint(ackForms(body)); got != "[2 1]" {
		t.Errorf("acknowledge forms for alerts %s, want [2 1] (the firing ones)", got)
	}
	if !strings.Contains(body, `aria-current="page">Alerts`) || strings.Contains(body, "style=") {
		t.Error("the page does not mark Alerts in the navigation, or has an inline style")
	}

	code, body = b.get("/alerts?state=resolved")
	if code != http.StatusOK || alertRow(body, 3) == "" || alertRow(body, 1) != "" || alertRow(body, 2) != "" {
		t.Errorf("?state=resolved: %d, want alert 3 alone", code)
	}
	code, body = b.get(fmt.Sprintf("/alerts?job=%d", train.ID))
	if code != http.StatusOK || alertRow(body, 1) == "" || alertRow(body, 2) != "" {
		t.Errorf("?job=%d: %d, want alert 1 alone", train.ID, code)
	}
	if code, _ := b.get("/alerts?state=loud"); code != http.StatusBadRequest {
		t.Errorf("?state=loud: %d, want 400", code)
	}
}

// TestAcknowledgeAnAlert: the form acknowledges with its reason and comes
// back to the list it was on; without the form token, or with another
// session's, nothing changes; a second acknowledgement is a conflict.
func TestAcknowledgeAnAlert(t *testing.T) {
	e := newStoreEnv(t)
	e.alerts()
	b := e.signIn(e.admin)
	other := e.signIn(e.admin)
	acked := func() domain.Alert {
		t.Helper()
		a, err := e.st.GetAlert(context.Background(), 1)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	for name, form := range map[string]url.Values{
		"no token":          {"reason": {"x"}},
		"another session's": {"reason": {"x"}, "csrf": {other.csrf("/alerts")}},
	} {
		if code, body, _ := b.post("/alerts/1/ack", form); code != http.StatusForbidden || !strings.Contains(body, "security token") {
			t.Errorf("ack with %s: %d %q, want 403", name, code, body)
		}
	}
	if code, _, _ := e.browser().post("/alerts/1/ack", url.Values{"csrf": {b.csrf("/alerts")}}); code != http.StatusUnauthorized {
		t.Errorf("ack without a session: %d, want 401", code)
	}
	if code, _, _ := b.post("/alerts/1/ack", url.Values{"csrf": {b.csrf("/alerts")}}, "Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden {
		t.Errorf("ack posted from another site: %d, want 403", code)
	}
	if a := acked(); !a.AckedAt.IsZero() {
		t.Fatalf("a refused form acknowledged the alert (by %s)", a.AckedBy)
	}

	form := url.Values{"csrf": {b.csrf("/alerts?state=firing")}, "reason": {"rebuilding the image"}, "back": {"/alerts?state=firing"}}
	code, _, hdr := b.post("/alerts/1/ack", form)
	if code != http.StatusSeeOther || hdr.Get("Location") != "/alerts?acked=1&state=firing" {
		t.Fatalf("ack with the token: %d %q, want 303 to /alerts?acked=1&state=firing", code, hdr.Get("Location"))
	}
	if a := acked(); a.AckedBy != "user:admin" || a.AckReason != "rebuilding the image" {
		t.Errorf("after acknowledging: by %q for %q", a.AckedBy, a.AckReason)
	}
	_, body := b.get(hdr.Get("Location"))
	row := alertRow(body, 1)
	if !strings.Contains(body, "Alert 1 acknowledged") || !strings.Contains(row, ">acknowledged<") || !strings.Contains(row, "rebuilding the image") {
		t.Errorf("the list after acknowledging does not say so:\n%s", row)
	}
	if got := fmt.Sprint(ackForms(body)); got != "[2]" {
		t.Errorf("acknowledge forms after acknowledging alert 1: %s, want [2]", got)
	}
	if code, body, _ := b.post("/alerts/1/ack", url.Values{"csrf": {b.csrf("/alerts")}}); code != http.StatusConflict {
		t.Errorf("a second acknowledgement: %d, want 409\n%s", code, body)
	}
	// A link elsewhere in back is not followed.
	code, _, hdr = b.post("/alerts/2/ack", url.Values{"csrf": {b.csrf("/alerts")}, "back": {"//evil.example/alerts"}})
	if code != http.StatusSeeOther || hdr.Get("Location") != "/alerts?acked=2" {
		t.Errorf("back to another site: %d %q, want /alerts?acked=2", code, hdr.Get("Location"))
	}
}

// TestAlertsForOthers: a member sees the alerts about their projects'
// jobs and may acknowledge the one about their own job; an auditor sees
// every alert and may acknowledge none, and is refused when they post.
func TestAlertsForOthers(t *testing.T) {
	e := newStoreEnv(t)
	e.alerts()
	bob := e.signIn(e.user("bob", "member@vision"))
	code, body := bob.get("/alerts")
	if code != http.StatusOK || alertRow(body, 1) == "" || alertRow(body, 2) != "" || alertRow(body, 3) != "" {
		t.Errorf("a member of vision: %d, want alert 1 alone", code)
	}
	if got := fmt.Sprint(ackForms(body)); got != "[1]" {
		t.Errorf("a member's acknowledge forms: %s, want [1]", got)
	}
	carol := e.signIn(e.user("carol", "auditor"))
	code, body = carol.get("/alerts")
	if code != http.StatusOK || alertRow(body, 1) == "" || alertRow(body, 2) == "" || alertRow(body, 3) == "" {
		t.Errorf("an auditor: %d, want every alert", code)
	}
	if n := strings.Count(body, `method="post"`); n != 1 || len(ackForms(body)) != 0 {
		t.Errorf("an auditor's alerts page has %d post forms, want the sign-out form alone", n)
	}
	if code, _, _ := carol.post("/alerts/1/ack", url.Values{"csrf": {carol.csrf("/alerts")}}); code != http.StatusForbidden {
		t.Errorf("an auditor acknowledging: %d, want 403", code)
	}
}
