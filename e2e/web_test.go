package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// chromium starts Debian's headless Chromium for the test and returns a
// tab's context. CI installs it (.ci/run); without it the test fails
// there and is skipped elsewhere.
func chromium(t testing.TB) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed; .ci/run installs it with apt-get install chromium")
		}
		t.Skip("chromium is not installed (apt-get install chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900), chromedp.UserDataDir(t.TempDir()))
	alloc, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(cancelTab)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	// Accept the page's confirmations (cancel asks first).
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	return ctx
}

// do runs browser steps with a deadline, failing the test on an error.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// until polls a JavaScript predicate in the page every 50 ms until it is
// true, failing the test after d.
func until(t *testing.T, ctx context.Context, d time.Duration, what, js string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](js, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(d))); err != nil {
		shot(t, ctx, "failed-"+strings.ReplaceAll(what, " ", "-"))
		t.Fatalf("waiting for %s (%s): %v", what, js, err)
	}
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// shot saves a screenshot of the whole page in the test's artifact
// directory (kept with go test -artifacts).
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	buf, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(t.ArtifactDir(), name+".png")
	if err := os.WriteFile(p, buf, 0o644); err != nil {
		t.Errorf("save screenshot: %v", err)
	}
}

// The job the browser watches: it writes a log line and reports a loss
// every 0.2 s for about 6 s, then writes an output file.
const watchedJob = `name: watched
entrypoint:
  - python3
  - -c
  - |
    import json, os, time
    print('<img src=x onerror="document.title=1">', flush=True)
    for i in range(1, 31):
        print("line %d" % i, flush=True)
        print("trainyard: " + json.dumps({"step": i, "loss": 1.0 / i}), flush=True)
        time.sleep(0.2)
    with open(os.path.join(os.environ["TRAINYARD_OUTPUT_DIR"], "result.txt"), "w") as f:
        f.write("final loss %f\n" % (1.0 / 30))
resources: {cpus: 1, memory: 64MiB}
`

// TestWebPagesInABrowser drives the pages in headless Chromium: sign in;
// a job submitted through the CLI appears in the open list and changes
// state there; its page shows new log lines as they are written and a
// loss chart with points; its output downloads with the checksum the
// page shows; another job is canceled from its page. Every page is saved
// as a screenshot.
func TestWebPagesInABrowser(t *testing.T) {
	ctx := chromium(t)
	s := startServer(t, serverOpts{cpus: 4})

	// Sign in with the admin's token.
	do(t, ctx, "open the sign-in page", chromedp.Navigate(s.url+"/jobs"), chromedp.WaitVisible(chromedp.ID("token")))
	shot(t, ctx, "signin")
	do(t, ctx, "sign in", chromedp.SendKeys(chromedp.ID("token"), s.token), chromedp.Submit(chromedp.ID("token")),
		chromedp.WaitVisible(chromedp.ID("jobs-rows")))
	if loc := eval[string](t, ctx, "location.pathname"); loc != "/jobs" {
		t.Fatalf("after sign-in the browser is at %s, want /jobs", loc)
	}

	// Submit through the CLI; the open list shows it without a reload.
	file := filepath.Join(s.dir, "watched.yaml")
	if err := os.WriteFile(file, []byte(watchedJob), 0o644); err != nil {
		t.Fatal(err)
	}
	eval[bool](t, ctx, "window.notReloaded = true")
	id, err := strconv.ParseInt(strings.TrimSpace(s.mustCLI("submit", file)), 10, 64)
	if err != nil {
		t.Fatalf("submit printed no job id: %v", err)
	}
	row := fmt.Sprintf("document.getElementById('job-%d')", id)
	until(t, ctx, 30*time.Second, "the job to appear in the list", row+" !== null")
	until(t, ctx, 30*time.Second, "the job to run in the list", row+".dataset.state === 'running'")
	if !eval[bool](t, ctx, "window.notReloaded === true") {
		t.Fatal("the list reloaded the page instead of updating in place")
	}
	shot(t, ctx, "jobs")

	// Its page: log lines arrive while it runs, the loss chart has points.
	do(t, ctx, "open the job's page", chromedp.Navigate(fmt.Sprintf("%s/jobs/%d", s.url, id)), chromedp.WaitVisible(chromedp.ID("log")))
	until(t, ctx, 30*time.Second, "a first log line", "document.getElementById('log').textContent.includes('line ')")
	lines := func() int {
		return eval[int](t, ctx, "document.getElementById('log').textContent.split('\\n').filter(l => l.startsWith('line ')).length")
	}
	first := lines()
	until(t, ctx, 30*time.Second, "new log lines", fmt.Sprintf("document.getElementById('log').textContent.split('\\n').filter(l => l.startsWith('line ')).length > %d", first))
	until(t, ctx, 30*time.Second, "the loss chart", "(() => { const s = document.querySelector('#charts svg[aria-label=loss]'); return s !== null && Number(s.dataset.points) >= 2 && s.querySelector('polyline').getAttribute('points').split(' ').length >= 2 })()")
	until(t, ctx, 60*time.Second, "the job to succeed on its page", "document.getElementById('job-state').textContent === 'succeeded'")
	until(t, ctx, 30*time.Second, "the log's end", "document.getElementById('log').dataset.done === 'true'")
	if n := lines(); n != 30 {
		t.Errorf("the page shows %d log lines, want 30", n)
	}
	// A job's log is text: its markup shows as written and never runs.
	if !eval[bool](t, ctx, "document.getElementById('log').textContent.includes('<img src=x') && document.querySelector('#log img') === null") {
		t.Error("a log line's markup became part of the page")
	}
	shot(t, ctx, "job-succeeded")

	// The output downloads through the page's link, with the page's checksum.
	do(t, ctx, "reload the job's page", chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("log")))
	until(t, ctx, 10*time.Second, "the outputs table", "document.querySelector('table.files a') !== null")
	want := eval[string](t, ctx, "document.querySelector('table.files td.hash').textContent")
	dl := t.TempDir()
	if _, err := chromedp.CallBrowser(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dl}); err != nil {
		t.Fatal(err)
	}
	do(t, ctx, "download the output", chromedp.Click("table.files a"))
	var got []byte
	waitFor(t, 30*time.Second, "the download", func() bool {
		got, err = os.ReadFile(filepath.Join(dl, "result.txt"))
		return err == nil && len(got) > 0
	})
	sum := sha256.Sum256(got)
	if hex.EncodeToString(sum[:]) != want || !strings.HasPrefix(string(got), "final loss") {
		t.Errorf("downloaded %q (sha256 %x), the page says %s", got, sum, want)
	}

	// Cancel a running job from its page.
	long := s.submit("name: long\nentrypoint: [sleep, '300']\nresources: {cpus: 1, memory: 16MiB}\n")
	s.waitState(long.ID, 30*time.Second, "running")
	do(t, ctx, "open the long job's page", chromedp.Navigate(fmt.Sprintf("%s/jobs/%d", s.url, long.ID)),
		chromedp.WaitVisible("button[data-action=cancel]"))
	shot(t, ctx, "job-running")
	do(t, ctx, "press cancel", chromedp.Click("button[data-action=cancel]"), chromedp.WaitVisible("p.flash"))
	until(t, ctx, 30*time.Second, "the job to end canceled on its page", "document.getElementById('job-state') !== null && document.getElementById('job-state').textContent === 'canceled'")
	if j := s.job(long.ID); j.State != "canceled" {
		t.Errorf("the API says job %d is %s after cancel from the page", long.ID, j.State)
	}
	shot(t, ctx, "job-canceled")

	// On a phone's screen.
	do(t, ctx, "a phone's screen", chromedp.EmulateViewport(390, 844), chromedp.Navigate(s.url+"/jobs"), chromedp.WaitVisible(chromedp.ID("jobs-rows")))
	if w := eval[int](t, ctx, "document.documentElement.scrollWidth"); w > 390 {
		t.Errorf("the job list is %d px wide on a 390 px screen", w)
	}
	shot(t, ctx, "jobs-phone")
	do(t, ctx, "back to 1280 px", chromedp.EmulateViewport(1280, 900))

	// Every other page renders; the screenshots keep them.
	for _, p := range []string{"queue", "pools", "cost", "alerts", "audit"} {
		do(t, ctx, "open "+p, chromedp.Navigate(s.url+"/"+p), chromedp.WaitVisible("main"))
		shot(t, ctx, p)
	}
}

// TestWebDownloadsMatchTheAPI: a signed-in page downloads the smoke job's
// output and a checkpoint byte for byte as the API serves them, as
// attachments, and a page without a session downloads nothing.
func TestWebDownloadsMatchTheAPI(t *testing.T) {
	s := startServer(t, serverOpts{cpus: 2})
	out := s.mustCLI("submit", filepath.Join(repoRoot(), "examples", "smoke.yaml"))
	id, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64)
	if err != nil {
		t.Fatalf("submit printed %q", out)
	}
	if j := s.waitState(id, 2*time.Minute, "succeeded", "failed"); j.State != "succeeded" {
		t.Fatalf("smoke job %s: %s", j.State, j.Message)
	}
	var ck struct{ Checkpoints []struct{ Name string } }
	if code := s.api("GET", fmt.Sprintf("/api/v1/jobs/%d/checkpoints", id), nil, &ck); code != 200 || len(ck.Checkpoints) == 0 {
		t.Fatalf("checkpoints: %d %+v", code, ck)
	}
	jar, _ := cookiejar.New(nil)
	page := &http.Client{Jar: jar}
	if resp, err := page.PostForm(s.url+"/signin", url.Values{"token": {s.token}}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("sign in: %v %v", resp, err)
	}
	get := func(c *http.Client, path string, bearer bool) (*http.Response, []byte) {
		req, _ := http.NewRequest("GET", s.url+path, nil)
		if bearer {
			req.Header.Set("Authorization", "Bearer "+s.token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	name := ck.Checkpoints[len(ck.Checkpoints)-1].Name
	for _, c := range []struct{ page, api string }{
		{fmt.Sprintf("/jobs/%d/files/model.json", id), fmt.Sprintf("/api/v1/jobs/%d/artifacts/model.json", id)},
		{fmt.Sprintf("/jobs/%d/checkpoints/%s/archive", id, name), fmt.Sprintf("/api/v1/jobs/%d/checkpoints/%s/archive", id, name)},
	} {
		resp, got := get(page, c.page, false)
		_, want := get(http.DefaultClient, c.api, true)
		if resp.StatusCode != 200 || len(want) == 0 || !bytes.Equal(got, want) {
			t.Errorf("%s: %d, %d bytes; the API's %s has %d", c.page, resp.StatusCode, len(got), c.api, len(want))
		}
		if cd := resp.Header.Get("Content-Disposition"); !strings.HasPrefix(cd, "attachment") {
			t.Errorf("%s: Content-Disposition %q, want an attachment", c.page, cd)
		}
		noSession := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		if resp, _ := get(noSession, c.page, true); resp.StatusCode != http.StatusSeeOther {
			t.Errorf("%s with an API token and no session: %d, want 303 to sign in", c.page, resp.StatusCode)
		}
	}
}

// TestWebSessionOverTLSIsSecure: on a server that serves TLS the session
// cookie is marked Secure, so a browser never sends it in clear text.
func TestWebSessionOverTLSIsSecure(t *testing.T) {
	s := startServer(t, serverOpts{tls: true})
	c := *s.http
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.PostForm(s.url+"/signin", url.Values{"token": {s.token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookie := resp.Header.Get("Set-Cookie")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(cookie, "trainyard_session=") {
		t.Fatalf("sign in over TLS: %d, cookie %q", resp.StatusCode, cookie)
	}
	for _, want := range []string{"; Secure", "; HttpOnly", "; SameSite=Strict"} {
		if !strings.Contains(cookie, want) {
			t.Errorf("session cookie %q lacks %q", cookie, want)
		}
	}
}
