package e2e

import (
	"strings"
	"testing"

	"trainyard/internal/api/apitypes"
)

// A pool's idle stop end to end: the config file sets it, pool show says
// it, pool update retunes and then removes it, the audit log has each
// change, and an out-of-range threshold is refused naming its field.
func TestPoolIdleStop(t *testing.T) {
	s := startServer(t, serverOpts{extra: `
pools:
  - name: gpu
    nodes: [{name: g1, cpus: 2, memory: 4GiB}]
    idle_stop: {below: 0.05, for: 30m}
`})
	if show := s.mustCLI("pool", "show", "gpu"); !strings.Contains(show, "Idle stop:") ||
		!strings.Contains(show, "stop jobs whose GPUs all stay under 5% utilisation for 30m (reason Idle, not retried)") {
		t.Fatalf("pool show after start:\n%s", show)
	}
	s.mustCLI("pool", "update", "gpu", "--idle-stop-for", "1h")
	var p apitypes.Pool
	if code := s.api("GET", "/api/v1/pools/gpu", nil, &p); code != 200 || p.IdleStop == nil || *p.IdleStop != (apitypes.PoolIdleStop{Below: 0.05, For: "1h"}) {
		t.Fatalf("pool after update: %d %+v", code, p.IdleStop)
	}
	s.mustCLI("pool", "update", "gpu", "--idle-stop-below", "0")
	if show := s.mustCLI("pool", "show", "gpu"); !strings.Contains(show, "off") {
		t.Fatalf("pool show after turning it off:\n%s", show)
	}
	audit := s.mustCLI("audit", "ls", "--action", "pool.write", "--target", "pool/gpu", "-o", "json")
	if !strings.Contains(audit, `\"idle_stop\":{\"below\":0.05,\"for\":\"30m\"}`) || !strings.Contains(audit, `\"idle_stop\":{\"below\":0.05,\"for\":\"1h\"}`) {
		t.Errorf("the audit log lacks the idle stop before and after:\n%s", audit)
	}
	bad := p
	bad.IdleStop = &apitypes.PoolIdleStop{Below: 5, For: "30m"}
	var eb struct{ Error apitypes.ErrorBody }
	if code := s.api("PUT", "/api/v1/pools/gpu", bad, &eb); code != 400 || len(eb.Error.Fields) != 1 ||
		eb.Error.Fields[0].Path != "idle_stop.below" || !strings.Contains(eb.Error.Fields[0].Message, "write 5% as 0.05") {
		t.Errorf("an out-of-range threshold: %d %+v", code, eb)
	}
}
