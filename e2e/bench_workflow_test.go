package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/store/postgres/pgtest"
)

// BenchmarkArraySubmit stores a 10,000-member job array through the API,
// one request, on each store, and reports the request's latency (ms/op is
// what the client waited for the 201). Each round starts a fresh server
// with one CPU: one member runs, the other 9,999 wait in the queue, so
// the control loop schedules beside the submit as it would in use.
func BenchmarkArraySubmit(b *testing.B) {
	for _, st := range []string{"sqlite", "postgres"} {
		b.Run("store="+st, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				extra := ""
				if st == "postgres" {
					extra = fmt.Sprintf("store: %q\n", pgtest.Schema(b))
				}
				s := startServer(b, serverOpts{cpus: 1, extra: extra})
				spec, _ := json.Marshal("name: array\nentrypoint: [sleep, '3600']\nresources: {cpus: 1, memory: 16MiB}\n")
				b.StartTimer()
				code, body := s.rawAPI("POST", "/api/v1/sweeps", apitypes.SweepRequest{Spec: spec, Array: "0-9999"})
				b.StopTimer()
				if code != http.StatusCreated {
					b.Fatalf("submit array: %d %s", code, body)
				}
				var sw apitypes.Sweep
				if err := json.Unmarshal([]byte(body), &sw); err != nil || len(sw.Jobs) != 10000 {
					b.Fatalf("submit array: %v, %d members", err, len(sw.Jobs))
				}
				waitFor(b, time.Minute, "a member to run", func() bool { return s.job(sw.Jobs[0]).State == "running" })
				s.shutdown()
				b.StartTimer()
			}
		})
	}
}
