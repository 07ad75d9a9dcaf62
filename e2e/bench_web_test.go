package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// webSamples is how many times each page is timed.
const webSamples = 60

// BenchmarkJobListPage measures the job list page with 10,000 jobs
// (TRAINYARD_BENCH_QUEUED overrides) queued in a pool that cannot run
// them, seeded through the store before the server starts: the server
// time of GET /jobs (first page of 50, client-timed on loopback, one
// request at a time, webSamples each) unfiltered and with each filter,
// and, when Chromium is installed, the first contentful paint of the page
// in headless Chromium over 20 loads.
func BenchmarkJobListPage(b *testing.B) {
	n := 10_000
	if benchQueued(b) != 100_000 {
		n = benchQueued(b)
	}
	s := startServer(b, serverOpts{cpus: 4, extra: benchPools})
	seedBlocked(b, s, n)
	defer stopQuietly(s)
	settle(b, s)

	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
	resp, err := c.PostForm(s.url+"/signin", url.Values{"token": {s.token}})
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("sign in: %v %v", resp, err)
	}
	resp.Body.Close()
	get := func(path string) time.Duration {
		start := time.Now()
		resp, err := c.Get(s.url + path)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `id="jobs-rows"`) {
			b.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		return took
	}
	for _, q := range []struct{ name, path string }{
		{"all", "/jobs"}, {"queued", "/jobs?state=queued"}, {"user", "/jobs?user=admin"},
		{"pool", "/jobs?pool=blocked"}, {"name", "/jobs?q=lock"}, {"name-none", "/jobs?q=nothing-matches"}, {"page-2", fmt.Sprintf("/jobs?before=%d", n-40)},
	} {
		b.Run("server/"+q.name, func(b *testing.B) {
			for range 5 {
				get(q.path) // warm
			}
			var ms []float64
			for b.Loop() {
				for range webSamples {
					ms = append(ms, float64(get(q.path).Microseconds())/1000)
				}
			}
			b.ReportMetric(median(ms), "p50-ms")
			b.ReportMetric(percentile(ms, 0.99), "p99-ms")
			b.Logf("%d jobs; %d samples; load %s", n, len(ms), loadAvg())
		})
	}
	b.Run("browser/fcp", func(b *testing.B) {
		ctx := chromium(b)
		if err := chromedp.Do(ctx, chromedp.Navigate(s.url+"/signin"), chromedp.WaitVisible(chromedp.ID("token")),
			chromedp.SendKeys(chromedp.ID("token"), s.token), chromedp.Submit(chromedp.ID("token")),
			chromedp.WaitVisible(chromedp.ID("jobs-rows"))); err != nil {
			b.Fatal(err)
		}
		var fcp []float64
		for b.Loop() {
			for range 20 {
				if err := chromedp.Do(ctx, chromedp.Navigate(s.url+"/jobs"), chromedp.WaitVisible(chromedp.ID("jobs-rows"))); err != nil {
					b.Fatal(err)
				}
				v, err := chromedp.Run(ctx, chromedp.Poll[float64](
					"(performance.getEntriesByName('first-contentful-paint')[0] || {startTime: 0}).startTime",
					chromedp.WithPollingInterval(10*time.Millisecond), chromedp.WithPollingTimeout(10*time.Second)))
				if err != nil {
					b.Fatal(err)
				}
				fcp = append(fcp, v)
			}
		}
		b.ReportMetric(median(fcp), "fcp-p50-ms")
		b.ReportMetric(percentile(fcp, 0.99), "fcp-max-ms")
		b.Logf("%d jobs; %d loads; load %s", n, len(fcp), loadAvg())
	})
}
