package e2e

import (
	"strings"
	"testing"

	"trainyard/internal/api/apitypes"
)

// Pool rates end to end: the config file sets them in the server's
// currency, pool update changes one, pool show and ls show them, the audit
// log has them before and after, and a bad rate is refused, changing
// nothing.
func TestPoolRates(t *testing.T) {
	s := startServer(t, serverOpts{extra: `
currency: EUR
pools:
  - name: standard
    nodes: [{name: s1, cpus: 2, memory: 4GiB}]
    rates: {gpu_hour: 2.10, object_gib_month: "0.023"}
`})
	show := s.mustCLI("pool", "show", "standard")
	if !strings.Contains(show, "2.10 EUR per GPU-hour, 0.023 EUR per GiB-month in object storage") {
		t.Fatalf("pool show after start:\n%s", show)
	}

	s.mustCLI("pool", "update", "standard", "--rate-gpu-hour", "3.5", "--rate-cpu-hour", "0.04")
	var p apitypes.Pool
	if code := s.api("GET", "/api/v1/pools/standard", nil, &p); code != 200 {
		t.Fatalf("get pool: %d", code)
	}
	want := apitypes.PoolRates{Currency: "EUR", GPUHour: "3.50", CPUHour: "0.04", ObjectGiBMonth: "0.023"}
	if p.Rates != want {
		t.Fatalf("rates after update = %+v, want %+v", p.Rates, want)
	}
	if ls := s.mustCLI("pool", "ls"); !strings.Contains(ls, "GPU-HOUR") || !strings.Contains(ls, "3.50 EUR") {
		t.Errorf("pool ls:\n%s", ls)
	}
	audit := s.mustCLI("audit", "ls", "--action", "pool.write", "--target", "pool/standard", "-o", "json")
	if !strings.Contains(audit, `\"rates\":{\"gpu_hour\":\"2.10\",\"object_gib_month\":\"0.023\"}`) ||
		!strings.Contains(audit, `\"rates\":{\"gpu_hour\":\"3.50\",\"cpu_hour\":\"0.04\",\"object_gib_month\":\"0.023\"}`) {
		t.Errorf("the audit log lacks the rates before and after:\n%s", audit)
	}

	_, errOut, code := s.cli("pool", "update", "standard", "--rate-gpu-hour", "2,10")
	if code != 2 || !strings.Contains(errOut, `invalid --rate-gpu-hour: "2,10" is not an amount`) {
		t.Errorf("a bad --rate-gpu-hour: exit %d, %s", code, errOut)
	}
	bad := p
	bad.Rates.MemoryGiBHour = "-0.01"
	var eb struct{ Error apitypes.ErrorBody }
	if code := s.api("PUT", "/api/v1/pools/standard", bad, &eb); code != 400 || len(eb.Error.Fields) != 1 ||
		eb.Error.Fields[0].Path != "rates.memory_gib_hour" || !strings.Contains(eb.Error.Fields[0].Message, "cannot be negative") {
		t.Errorf("a negative rate: %d %+v", code, eb)
	}
	var after apitypes.Pool
	s.api("GET", "/api/v1/pools/standard", nil, &after)
	if after.Rates != want || !after.UpdatedAt.Equal(p.UpdatedAt) {
		t.Errorf("refused changes altered the pool: %+v", after.Rates)
	}
}
