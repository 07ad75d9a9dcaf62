package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// Each attempt gets TRAINYARD_API and a job token that works for it, may do
// nothing else, never shows in logs, and is revoked when the attempt ends.
func TestJobToken(t *testing.T) {
	s := startServer(t, serverOpts{})
	script := `import json, os, urllib.request, urllib.error
api, tok = os.environ["TRAINYARD_API"], os.environ["TRAINYARD_JOB_TOKEN"]
def get(path):
    req = urllib.request.Request(api + path, headers={"Authorization": "Bearer " + tok})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, None
print("token", tok)
code, me = get("/api/v1/whoami")
print("whoami", code, json.dumps(me, sort_keys=True))
print("jobs", get("/api/v1/jobs")[0])
open(os.path.join(os.environ["TRAINYARD_OUTPUT_DIR"], "token"), "w").write(tok)
`
	job := s.submit(fmt.Sprintf("name: tok\nentrypoint: [python3, -c, %q]\n", script))
	if j := s.waitState(job.ID, time.Minute, "succeeded", "failed"); j.State != "succeeded" {
		t.Fatalf("job %s: %s\n%s", j.State, j.Message, s.mustCLI("logs", fmt.Sprint(job.ID)))
	}
	logs := s.mustCLI("logs", fmt.Sprint(job.ID))
	if !strings.Contains(logs, "token [redacted]") {
		t.Errorf("the job token is not redacted in the log:\n%s", logs)
	}
	if !strings.Contains(logs, "whoami 200") || !strings.Contains(logs, fmt.Sprintf(`"job": %d`, job.ID)) {
		t.Errorf("whoami with the job token did not name the job:\n%s", logs)
	}
	if !strings.Contains(logs, "jobs 403") && !strings.Contains(logs, "jobs 401") {
		t.Errorf("the job token could list jobs:\n%s", logs)
	}
	// After the attempt, the token no longer authenticates.
	tok := strings.TrimSpace(readFile(t, s.job(job.ID).OutputDir+"/token"))
	saved := s.token
	s.token = tok
	code := s.api("GET", "/api/v1/whoami", nil, nil)
	s.token = saved
	if code != 401 {
		t.Errorf("the job token still works after its attempt ended: status %d", code)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestJobTokensOfAPass: the attempts one pass starts get their tokens in
// one write; each token is its own attempt's and no other's.
func TestJobTokensOfAPass(t *testing.T) {
	s := startServer(t, serverOpts{cpus: 3})
	blocker := s.submit("name: blocker\nresources: {cpus: 3}\nentrypoint: [sleep, '300']\n")
	s.waitState(blocker.ID, time.Minute, "running")
	script := `import json, os, sys, urllib.request
req = urllib.request.Request(os.environ["TRAINYARD_API"] + "/api/v1/whoami",
    headers={"Authorization": "Bearer " + os.environ["TRAINYARD_JOB_TOKEN"]})
me = json.load(urllib.request.urlopen(req))
want = (int(os.environ["TRAINYARD_JOB_ID"]), int(os.environ["TRAINYARD_ATTEMPT"]))
print("whoami", me.get("job"), me.get("attempt"), "want", *want)
sys.exit(0 if (me.get("job"), me.get("attempt")) == want else 1)
`
	spec := fmt.Sprintf("name: tok\nresources: {cpus: 1}\nentrypoint: [python3, -c, %q]\n", script)
	var ids []int64
	for range 3 {
		ids = append(ids, s.submit(spec).ID)
	}
	s.mustCLI("cancel", fmt.Sprint(blocker.ID)) // the three start in the pass that follows
	for _, id := range ids {
		if j := s.waitState(id, time.Minute, "succeeded", "failed"); j.State != "succeeded" {
			t.Errorf("job %d %s: %s\n%s", id, j.State, j.Message, s.mustCLI("logs", fmt.Sprint(id)))
		}
	}
}
