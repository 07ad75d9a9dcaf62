package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

// rssOf is the resident memory of process pid, in bytes.
func rssOf(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS for pid %d", pid)
	return 0
}

// Spec bombs sent to the real server, ten of each, are refused with 400
// without the server's memory growing by 50 MB. The time each refusal
// took is logged (benchmarks measure speed; see jobspec and api).
func TestSpecBombsLeaveTheServerAlone(t *testing.T) {
	s := startServer(t, serverOpts{})
	laughs := "name: laughs\nlabels:\n  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
	for i := 1; i <= 9; i++ {
		laughs += fmt.Sprintf("  l%d: &l%d [%s]\n", i, i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*l%d, ", i-1), 10), ", "))
	}
	laughs += "entrypoint: *l9\n"
	bombs := map[string]string{
		"billion laughs":    laughs,
		"repeated argument": "name: rep\nentrypoint: [&a " + strings.Repeat("x", 30_000) + strings.Repeat(", *a", 12_000) + "]\n",
		"node bomb":         "name: flat\nentrypoint: [" + strings.Repeat("0,", 400_000) + "0]\n",
		"expanded size":     "name: big\nentrypoint: [&a " + strings.Repeat("x", 200<<10) + strings.Repeat(", *a", 5) + "]\n",
	}
	pid := s.cmd.Process.Pid
	// One ordinary submit first, so the figure is not the server's warm-up.
	s.submit("name: warm\nentrypoint: [true]\n")
	before := rssOf(t, pid)
	var took []time.Duration
	for name, spec := range bombs {
		for range 10 {
			start := time.Now()
			code := s.api("POST", "/api/v1/jobs", apitypes.SubmitRequest{Spec: jsonText(spec)}, nil)
			took = append(took, time.Since(start))
			if code != 400 {
				t.Fatalf("%s: status %d, want 400", name, code)
			}
		}
	}
	grew := rssOf(t, pid) - before
	if grew > 50<<20 {
		t.Errorf("the server's resident memory grew by %d MiB over 40 refused bombs, want under 50", grew>>20)
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	t.Logf("40 refusals: median %v, slowest %v (client-timed, with the request); resident memory grew %d KiB",
		took[len(took)/2], took[len(took)-1], grew>>10)
}

// jsonText is s as a JSON string.
func jsonText(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}
