package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

// Raising a waiting job's priority makes it start before a job submitted
// earlier; the change goes through the CLI and the API, is refused above
// the project's ceiling and for a started job, and is audited and shown.
func TestPriorityChangeReordersTheQueue(t *testing.T) {
	s := startServer(t, serverOpts{cpus: 1})
	s.mustCLI("quota", "set", "default", "default", "--max-priority", "high")
	blocker := s.submit("name: blocker\nresources: {cpus: 1}\nentrypoint: [sleep, '300']\n")
	s.waitState(blocker.ID, 30*time.Second, "running")
	first := s.submit("name: first\nresources: {cpus: 1}\nentrypoint: [sleep, '300']\n")
	second := s.submit("name: second\nresources: {cpus: 1}\nentrypoint: [sleep, '300']\n")
	id := strconv.FormatInt(second.ID, 10)

	if out := s.mustCLI("priority", id, "high"); !strings.Contains(out, "now has priority high") {
		t.Errorf("priority printed %q", out)
	}
	if j := s.job(second.ID); j.Priority != "high" || j.State != "queued" {
		t.Errorf("after the change: %s, %s; want high, queued", j.Priority, j.State)
	}

	// Above the quota's max priority (high): refused, through the API.
	var apiErr struct {
		Error struct {
			Fields []struct{ Path, Message string }
		}
	}
	code := s.api("POST", fmt.Sprintf("/api/v1/jobs/%d/priority", first.ID), apitypes.PriorityRequest{Priority: "urgent"}, &apiErr)
	if f := apiErr.Error.Fields; code != 400 || len(f) != 1 || f[0].Path != "priority" || !strings.Contains(f[0].Message, "at most high") {
		t.Errorf("urgent above the ceiling: status %d, %+v; want 400 with a field error on priority naming the ceiling", code, apiErr)
	}
	// No class at all: a field error, not a server error.
	if code, body := s.rawAPI("POST", fmt.Sprintf("/api/v1/jobs/%d/priority", first.ID), map[string]string{}); code != 400 || !strings.Contains(body, `"priority"`) {
		t.Errorf("priority without a class: status %d, %s; want 400 naming the field", code, body)
	}
	var j apitypes.Job
	if code := s.api("POST", fmt.Sprintf("/api/v1/jobs/%d/priority", first.ID), apitypes.PriorityRequest{Priority: "low"}, &j); code != 200 || j.Priority != "low" {
		t.Errorf("API priority low: status %d, priority %s", code, j.Priority)
	}

	// The room frees: the raised job starts though it was submitted later.
	s.mustCLI("cancel", strconv.FormatInt(blocker.ID, 10))
	s.waitState(second.ID, 30*time.Second, "running")
	if j := s.job(first.ID); j.State != "queued" {
		t.Errorf("the earlier, lower job is %s; want it still queued", j.State)
	}
	_, errOut, exit := s.cli("priority", id, "normal")
	if exit == 0 || !strings.Contains(errOut, "only affects the scheduling of waiting") {
		t.Errorf("priority of a running job: exit %d, %q", exit, errOut)
	}

	show := s.mustCLI("show", id)
	for _, want := range []string{"PriorityChanged", "priority normal → high by admin"} {
		if !strings.Contains(show, want) {
			t.Errorf("show %s lacks %q:\n%s", id, want, show)
		}
	}
	if !regexp.MustCompile(`(?m)^Priority:\s+high$`).MatchString(show) {
		t.Errorf("show %s does not show the current priority high:\n%s", id, show)
	}
	audit := s.mustCLI("audit", "ls", "--action", "job.priority")
	if !strings.Contains(audit, "job/"+id) || !strings.Contains(audit, "job/"+strconv.FormatInt(first.ID, 10)) {
		t.Errorf("audit of job.priority misses a change:\n%s", audit)
	}
	s.mustCLI("cancel", id)
	s.mustCLI("cancel", strconv.FormatInt(first.ID, 10))
}
