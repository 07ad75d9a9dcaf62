package web_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestJobPagesShowWhatTheAPIShows: each user sees in the list, on a job's
// page and in its streams exactly the jobs the API lets them read, and
// only the buttons the service would honour.
func TestJobPagesShowWhatTheAPIShows(t *testing.T) {
	e := newEnv(t)
	alice := e.user("alice", "member@vision")
	bob := e.user("bob", "member@vision")
	carol := e.user("carol", "lead@vision")
	dan := e.user("dan", "member@nlp")
	aud := e.user("audrey", "auditor")
	ja := e.submit(alice, fmt.Sprintf(spec, "alice-train", "vision"))
	jb := e.submit(bob, fmt.Sprintf(spec, "bob-train", "vision"))

	sees := map[string][2]bool{ // user: sees alice's job, bob's job
		alice: {true, false}, carol: {true, true}, dan: {false, false}, aud: {true, true}, e.admin: {true, true},
	}
	for tok, want := range sees {
		b := e.signIn(tok)
		_, list := b.get("/jobs")
		for i, j := range []int64{ja.ID, jb.ID} {
			row := fmt.Sprintf(`id="job-%d"`, j)
			if got := strings.Contains(list, row); got != want[i] {
				t.Errorf("%s: job %d in the list: %v, want %v", tok[:8], j, got, want[i])
			}
			code, _ := b.get(fmt.Sprintf("/jobs/%d", j))
			if (code == http.StatusOK) != want[i] {
				t.Errorf("%s: job %d's page: %d, want visible=%v", tok[:8], j, code, want[i])
			}
			if !want[i] && code != http.StatusNotFound && code != http.StatusForbidden {
				t.Errorf("%s: job %d's page refused with %d, want 403 or 404", tok[:8], j, code)
			}
			streams := []string{"/live", "/charts"}
			if !want[i] {
				streams = append(streams, "/log") // a visible queued job's log stream waits for its start
			}
			for _, p := range streams {
				first := firstEvent(t, b, fmt.Sprintf("/jobs/%d%s", j, p))
				if refused := strings.HasPrefix(first, "event: problem"); refused == want[i] {
					t.Errorf("%s: stream %s of job %d: %q, want visible=%v", tok[:8], p, j, first, want[i])
				}
			}
		}
	}

	// Buttons: alice may cancel and hold her own queued job; dan sees no
	// job; the auditor reads it but gets no button; carol leads.
	buttons := func(tok string, id int64) string {
		_, body := e.signIn(tok).get(fmt.Sprintf("/jobs/%d", id))
		var got []string
		for _, a := range []string{"cancel", "hold", "release", "rerun"} {
			if strings.Contains(body, fmt.Sprintf(`data-action="%s"`, a)) {
				got = append(got, a)
			}
		}
		return strings.Join(got, ",")
	}
	for _, c := range []struct {
		tok  string
		job  int64
		want string
	}{{alice, ja.ID, "cancel,hold"}, {aud, ja.ID, ""}, {carol, jb.ID, "cancel,hold"}, {bob, jb.ID, "cancel,hold"}} {
		if got := buttons(c.tok, c.job); got != c.want {
			t.Errorf("%s on job %d: buttons %q, want %q", c.tok[:8], c.job, got, c.want)
		}
	}
	// The auditor's page posts nothing but sign-out; it shows the spec.
	_, body := e.signIn(aud).get(fmt.Sprintf("/jobs/%d", ja.ID))
	if !strings.Contains(body, `<pre class="spec">{`) || !strings.Contains(body, `&#34;entrypoint&#34;: [`) {
		t.Error("the job's page lacks its config snapshot")
	}
	if n := strings.Count(body, `method="post"`); n != 1 {
		t.Errorf("the auditor's job page has %d post forms, want 1 (sign out)", n)
	}
	// A form the page would not offer is refused by the service all the same.
	b := e.signIn(dan)
	if code, _, _ := b.post(fmt.Sprintf("/jobs/%d/cancel", ja.ID), formWith(b.csrf("/jobs"))); code != http.StatusNotFound && code != http.StatusForbidden {
		t.Errorf("dan cancels alice's job: %d, want refused", code)
	}
}

// TestJobListFilters: the list's form narrows it by state, user, pool
// and part of the name, and a bad value is a 400 page naming it.
func TestJobListFilters(t *testing.T) {
	e := newEnv(t)
	alice := e.user("alice", "member@vision")
	ja := e.submit(alice, fmt.Sprintf(spec, "resnet-lr-01", "vision"))
	jb := e.submit(e.admin, fmt.Sprintf(spec, "bert-base", "default"))
	b := e.signIn(e.admin)
	for q, want := range map[string][]int64{
		"":                           {ja.ID, jb.ID},
		"?user=alice":                {ja.ID},
		"?q=RESNET":                  {ja.ID},
		"?q=bert&project=default":    {jb.ID},
		"?state=running":             {},
		"?pool=default&state=queued": {ja.ID, jb.ID},
	} {
		code, body := b.get("/jobs" + q)
		if code != http.StatusOK {
			t.Errorf("%s: %d", q, code)
			continue
		}
		for _, id := range []int64{ja.ID, jb.ID} {
			in := strings.Contains(body, fmt.Sprintf(`id="job-%d"`, id))
			if in != contains(want, id) {
				t.Errorf("/jobs%s: job %d listed %v", q, id, in)
			}
		}
	}
	if code, body := b.get("/jobs?state=sleeping"); code != http.StatusBadRequest || !strings.Contains(body, "unknown state") {
		t.Errorf("bad state: %d", code)
	}
}

func contains(ids []int64, id int64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

func formWith(csrf string) map[string][]string { return map[string][]string{"csrf": {csrf}} }
