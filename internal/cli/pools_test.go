package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

func standardPool() apitypes.Pool {
	return apitypes.Pool{Name: "standard", Executor: "local", GPUType: "a100-80g",
		Nodes: []apitypes.Node{
			{Name: "node-a", CPUs: 32, Memory: "256GiB", GPUs: []int{0, 1, 2, 3}},
			{Name: "node-b", CPUs: 16, Memory: "128GiB", GPUs: []int{4, 6}},
		},
		MaxGPUsPerJob: 4, MaxTimeout: "24h", MaxRunning: 8, Priorities: []string{"normal", "high"},
		Borrowing: true, Preemption: true, LogLimit: "4GiB",
		Rates: apitypes.PoolRates{Currency: "EUR", GPUHour: "2.10", CPUHour: "0.04", ObjectGiBMonth: "0.023"}}
}

func TestPoolLs(t *testing.T) {
	h, pf := newPoolHarness(t)
	pf.addPool(standardPool())
	pf.addPool(apitypes.Pool{Name: "cpu", Nodes: []apitypes.Node{{Name: "local", CPUs: 7.5, Memory: "16GiB", GPUs: []int{}}}})
	r := h.mustRun(0, "pool", "ls")
	want := `NAME      NODES  GPUS  CPUS  MEMORY  MAX RUNNING  BORROWING  PREEMPTION  GPU-HOUR
cpu       1      0     7.5   16GiB   -            no         no          -
standard  2      6     48    384GiB  8            yes        yes         2.10 EUR
`
	if r.stdout != want {
		t.Errorf("pool ls =\n%s\nwant\n%s", r.stdout, want)
	}

	r = h.mustRun(0, "pool", "ls", "-o", "json")
	var list apitypes.PoolList
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list.Pools) != 2 || list.Pools[1].Capacity.GPUs != 6 {
		t.Errorf("pool ls -o json = %s (%v)", r.stdout, err)
	}
	r = h.mustRun(0, "pool", "ls", "-o", "yaml")
	if !strings.Contains(r.stdout, "max_gpus_per_job: 4") || !strings.Contains(r.stdout, "pools:") {
		t.Errorf("pool ls -o yaml lacks the API field names:\n%s", r.stdout)
	}
}

func TestPoolLsEmpty(t *testing.T) {
	h, _ := newPoolHarness(t)
	r := h.mustRun(0, "pool", "ls")
	if r.stdout != "" || !strings.Contains(r.stderr, "trainyard pool create") {
		t.Errorf("empty pool ls: stdout %q stderr %q", r.stdout, r.stderr)
	}
	if r := h.mustRun(0, "pool", "ls", "-o", "json"); strings.TrimSpace(r.stdout) != "{\n  \"pools\": []\n}" {
		t.Errorf("empty pool ls -o json = %q", r.stdout)
	}
}

func TestPoolShow(t *testing.T) {
	h, pf := newPoolHarness(t)
	pf.addPool(standardPool())
	pf.quotas["vision/standard"] = apitypes.Quota{Project: "vision", Pool: "standard", GPUs: 2, CPUs: 16, Memory: "128GiB", Jobs: 4,
		Borrow: apitypes.QuotaBorrow{GPUs: 2, Memory: "64GiB"}, MaxPriority: "high"}
	r := h.mustRun(0, "pool", "show", "standard")
	for _, want := range []string{
		"Capacity:           6 GPUs, 48 CPUs, 384GiB memory",
		"Max nodes per job:  -",
		"Max timeout:        24h",
		"Priorities:         normal, high",
		"Borrowing:          yes",
		"Log limit:          4GiB per attempt (default and ceiling of policy.log_limit)",
		"Rates:              2.10 EUR per GPU-hour, 0.04 EUR per CPU-hour, 0.023 EUR per GiB-month in object storage",
		"(2d ago)",
		"  node-a  32    256GiB  0-3",
		"  node-b  16    128GiB  4,6",
		"  vision   2     16    128GiB  4     gpu=2 mem=64GiB  high",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("pool show lacks %q:\n%s", want, r.stdout)
		}
	}
	pf.addPool(apitypes.Pool{Name: "cpu", Nodes: []apitypes.Node{{Name: "local", CPUs: 1, Memory: "1GiB", GPUs: []int{}}}})
	if r := h.mustRun(0, "pool", "show", "cpu"); !strings.Contains(r.stdout, "Log limit:          the server's log_limit") ||
		!strings.Contains(r.stdout, "Rates:              none: using the pool is free") {
		t.Errorf("pool show of a pool without a log limit:\n%s", r.stdout)
	}
	r = h.mustRun(ExitNotFound, "pool", "show", "gpu")
	if !strings.Contains(r.stderr, `pool "gpu" does not exist; list pools with: trainyard pool ls`) {
		t.Errorf("missing pool: %q", r.stderr)
	}
}

func TestPoolCreate(t *testing.T) {
	h, pf := newPoolHarness(t)
	r := h.mustRun(0, "pool", "create", "standard",
		"--node", "name=node-a,cpus=32,memory=256GiB,gpus=0-3",
		"--node", "name=node-b,cpus=8,mem=32Gi,gpus=4,6",
		"--node", "name=node-c,cpus=2,memory=4096MiB",
		"--max-gpus-per-job", "4", "--max-timeout", "2d", "--max-running", "8",
		"--priorities", "low,normal,high", "--borrowing", "--gpu-type", "a100-80g", "--log-limit", "2048Mi",
		"--rate-gpu-hour", "2.1", "--rate-memory-gib-hour", "0.000125", "--rate-local-gib-month", "0")
	if r.stdout != "created pool standard: 3 node(s), 6 GPUs, 42 CPUs, 292GiB memory\n" {
		t.Errorf("stdout = %q", r.stdout)
	}
	puts := pf.seenPuts()
	if len(puts) != 1 {
		t.Fatalf("PUTs = %v", puts)
	}
	var sent apitypes.Pool
	json.Unmarshal([]byte(puts[0]), &sent)
	want := apitypes.Pool{Name: "standard", GPUType: "a100-80g",
		Nodes: []apitypes.Node{
			{Name: "node-a", CPUs: 32, Memory: "256GiB", GPUs: []int{0, 1, 2, 3}},
			{Name: "node-b", CPUs: 8, Memory: "32GiB", GPUs: []int{4, 6}},
			{Name: "node-c", CPUs: 2, Memory: "4GiB", GPUs: []int{}},
		},
		MaxGPUsPerJob: 4, MaxTimeout: "48h", MaxRunning: 8, Priorities: []string{"low", "normal", "high"}, Borrowing: true,
		LogLimit: "2GiB", Rates: apitypes.PoolRates{GPUHour: "2.10", MemoryGiBHour: "0.000125"}}
	if g, w := mustMarshal(t, sent), mustMarshal(t, want); g != w {
		t.Errorf("sent\n%s\nwant\n%s", g, w)
	}

	r = h.mustRun(ExitConflict, "pool", "create", "standard", "--node", "name=x,cpus=1,memory=1GiB")
	if !strings.Contains(r.stderr, `pool "standard" already exists; change it with: trainyard pool update standard`) {
		t.Errorf("create of an existing pool: %q", r.stderr)
	}
	if len(pf.seenPuts()) != 1 {
		t.Errorf("create of an existing pool sent a PUT")
	}
}

func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestPoolCreateUsageErrors(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string
	}{
		"no node":       {[]string{"pool", "create", "p"}, "at least one node"},
		"not key=value": {[]string{"pool", "create", "p", "--node", "node-a"}, `"node-a" is not key=value`},
		"unknown key":   {[]string{"pool", "create", "p", "--node", "name=a,cpus=1,memory=1GiB,disk=9"}, `unknown key "disk"`},
		"missing cpus":  {[]string{"pool", "create", "p", "--node", "name=a,memory=1GiB"}, "cpus is missing"},
		"bad cpus":      {[]string{"pool", "create", "p", "--node", "name=a,cpus=many,memory=1GiB"}, `cpus "many" is not a number`},
		"bad memory":    {[]string{"pool", "create", "p", "--node", "name=a,cpus=1,memory=lots"}, `"lots" is not a size`},
		"bad range":     {[]string{"pool", "create", "p", "--node", "name=a,cpus=1,memory=1GiB,gpus=3-1"}, `GPU range "3-1"`},
		"huge range":    {[]string{"pool", "create", "p", "--node", "name=a,cpus=1,memory=1GiB,gpus=0-99999999"}, `GPU range "0-99999999"`},
		"negative gpu":  {[]string{"pool", "create", "p", "--node", "name=a,cpus=1,memory=1GiB,gpus=x"}, `GPU "x" is not an index`},
		"key twice":     {[]string{"pool", "create", "p", "--node", "name=a,name=b,cpus=1,memory=1GiB"}, "name is given twice"},
		"bad timeout":   {[]string{"pool", "create", "p", "--node", "name=a,cpus=1,memory=1GiB", "--max-timeout", "soon"}, "invalid --max-timeout"},
		"bad log limit": {[]string{"pool", "create", "p", "--node", "name=a,cpus=1,memory=1GiB", "--log-limit", "big"}, "invalid --log-limit"},
		"small log limit": {[]string{"pool", "create", "p", "--node", "name=a,cpus=1,memory=1GiB", "--log-limit", "100KiB"},
			`invalid --log-limit "100KiB": give at least 1MiB`},
		"bad rate": {[]string{"pool", "create", "p", "--node", "name=a,cpus=1,memory=1GiB", "--rate-gpu-hour", "$2"},
			`invalid --rate-gpu-hour: "$2" is not an amount; write a decimal such as 2.10; give an amount such as --rate-gpu-hour 2.10, or 0 for free`},
		"negative rate": {[]string{"pool", "create", "p", "--node", "name=a,cpus=1,memory=1GiB", "--rate-object-gib-month", "-0.1"},
			`invalid --rate-object-gib-month: a rate cannot be negative; give an amount such as --rate-object-gib-month 2.10`},
		"too precise rate": {[]string{"pool", "create", "p", "--node", "name=a,cpus=1,memory=1GiB", "--rate-cpu-hour", "0.0000001"},
			`invalid --rate-cpu-hour: "0.0000001" has more than 6 decimal places`},
		"no name":    {[]string{"pool", "create"}, "takes 1 argument(s)"},
		"bad output": {[]string{"pool", "ls", "-o", "xml"}, `invalid --output "xml": want one of table, wide, json, yaml`},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			h, pf := newPoolHarness(t)
			r := h.mustRun(2, tc.args...)
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr = %q, want it to contain %q", r.stderr, tc.want)
			}
			if len(pf.seenPuts()) != 0 {
				t.Errorf("a usage error still sent %v", pf.seenPuts())
			}
		})
	}
}

func TestPoolCreateServerValidationExits2(t *testing.T) {
	h, _ := newPoolHarness(t)
	r := h.mustRun(2, "pool", "create", "p", "--node", "name=a,cpus=0,memory=1GiB")
	if !strings.Contains(r.stderr, "nodes[0].cpus: must be more than 0") {
		t.Errorf("stderr = %q", r.stderr)
	}
}

func TestPoolUpdateChangesOnlyGivenFlags(t *testing.T) {
	h, pf := newPoolHarness(t)
	pf.addPool(standardPool())
	r := h.mustRun(0, "pool", "update", "standard", "--max-running", "16", "--borrowing=false", "--priorities", "", "--max-timeout", "0",
		"--log-limit", "0", "--rate-gpu-hour", "3", "--rate-cpu-hour", "0", "--rate-local-gib-month", "0.1")
	if !strings.HasPrefix(r.stdout, "updated pool standard: 2 node(s), 6 GPUs") {
		t.Errorf("stdout = %q", r.stdout)
	}
	var sent apitypes.Pool
	json.Unmarshal([]byte(pf.seenPuts()[0]), &sent)
	want := standardPool()
	want.MaxRunning, want.Borrowing, want.Priorities, want.MaxTimeout = 16, false, nil, ""
	want.LogLimit = "" // --log-limit 0: the server's
	// Only the rates given change; --rate-cpu-hour 0 makes it free.
	want.Rates.GPUHour, want.Rates.CPUHour, want.Rates.LocalGiBMonth = "3.00", "", "0.10"
	sent.Capacity, sent.CreatedAt, sent.UpdatedAt = apitypes.PoolCapacity{}, time.Time{}, time.Time{}
	if g, w := mustMarshal(t, sent), mustMarshal(t, want); g != w {
		t.Errorf("sent\n%s\nwant\n%s", g, w)
	}

	h.mustRun(0, "pool", "update", "standard", "--node", "name=big,cpus=64,memory=1TiB,gpus=0-7")
	json.Unmarshal([]byte(pf.seenPuts()[1]), &sent)
	if len(sent.Nodes) != 1 || sent.Nodes[0].Name != "big" || len(sent.Nodes[0].GPUs) != 8 || sent.MaxRunning != 16 {
		t.Errorf("--node must replace every node and keep the rest: %+v", sent)
	}

	r = h.mustRun(2, "pool", "update", "standard")
	if !strings.Contains(r.stderr, "nothing to change") {
		t.Errorf("update without flags: %q", r.stderr)
	}
	r = h.mustRun(ExitNotFound, "pool", "update", "gpu", "--max-running", "1")
	if !strings.Contains(r.stderr, `pool "gpu" does not exist`) {
		t.Errorf("update of a missing pool: %q", r.stderr)
	}
}

// The idle stop is set by its two flags together, retuned by one, shown by
// pool show, and turned off by --idle-stop-below 0; a half-given one is a
// usage error naming the missing flag.
func TestPoolUpdateIdleStop(t *testing.T) {
	h, pf := newPoolHarness(t)
	pf.addPool(standardPool())
	h.mustRun(0, "pool", "update", "standard", "--idle-stop-below", "0.05", "--idle-stop-for", "30m")
	var sent apitypes.Pool
	json.Unmarshal([]byte(pf.seenPuts()[0]), &sent)
	if s := sent.IdleStop; s == nil || s.Below != 0.05 || s.For != "30m" {
		t.Fatalf("sent idle_stop = %+v, want below 0.05 for 30m", s)
	}
	if r := h.mustRun(0, "pool", "show", "standard"); !strings.Contains(r.stdout,
		"Idle stop:          stop jobs whose GPUs all stay under 5% utilisation for 30m (reason Idle, not retried)") {
		t.Errorf("pool show:\n%s", r.stdout)
	}
	h.mustRun(0, "pool", "update", "standard", "--idle-stop-for", "1h")
	json.Unmarshal([]byte(pf.seenPuts()[1]), &sent)
	if s := sent.IdleStop; s == nil || s.Below != 0.05 || s.For != "1h" {
		t.Fatalf("retuned idle_stop = %+v, want below 0.05 kept, for 1h", s)
	}
	h.mustRun(0, "pool", "update", "standard", "--idle-stop-below", "0")
	sent = apitypes.Pool{}
	json.Unmarshal([]byte(pf.seenPuts()[2]), &sent)
	if sent.IdleStop != nil {
		t.Fatalf("--idle-stop-below 0 sent idle_stop %+v, want none", sent.IdleStop)
	}
	if r := h.mustRun(0, "pool", "show", "standard"); !strings.Contains(r.stdout, "Idle stop:          off") {
		t.Errorf("pool show after turning it off:\n%s", r.stdout)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--idle-stop-below", "0.05"}, "--idle-stop-below needs --idle-stop-for"},
		{[]string{"--idle-stop-for", "30m"}, "--idle-stop-for needs --idle-stop-below"},
		{[]string{"--idle-stop-below", "5", "--idle-stop-for", "30m"}, "such as 0.05 for 5%"},
		{[]string{"--idle-stop-below", "0.05", "--idle-stop-for", "soon"}, `invalid --idle-stop-for "soon"`},
	} {
		if r := h.mustRun(2, append([]string{"pool", "update", "standard"}, c.args...)...); !strings.Contains(r.stderr, c.want) {
			t.Errorf("pool update %v: stderr %q, want %q", c.args, r.stderr, c.want)
		}
	}
}

func TestQuotaLsSetRm(t *testing.T) {
	h, pf := newPoolHarness(t)
	pf.addPool(standardPool())
	r := h.mustRun(0, "quota", "set", "vision", "standard", "--gpus", "2", "--cpus", "16", "--memory", "128GiB", "--jobs", "4",
		"--borrow-gpus", "2", "--borrow-memory", "64Gi", "--max-priority", "high")
	if r.stdout != "set quota of project vision in pool standard: gpu=2 cpu=16 mem=128GiB jobs=4, borrow gpu=2 mem=64GiB, max priority high\n" {
		t.Errorf("quota set stdout = %q", r.stdout)
	}
	// Only the given flags change on an existing quota.
	h.mustRun(0, "quota", "set", "vision", "standard", "--gpus", "3")
	puts := pf.seenPuts()
	var second apitypes.Quota
	json.Unmarshal([]byte(puts[1]), &second)
	if second.GPUs != 3 || second.CPUs != 16 || second.Memory != "128GiB" || second.Jobs != 4 ||
		second.Borrow != (apitypes.QuotaBorrow{GPUs: 2, Memory: "64GiB"}) || second.MaxPriority != "high" {
		t.Errorf("second quota set sent %s", puts[1])
	}
	h.mustRun(0, "quota", "set", "nlp", "standard", "--jobs", "1")

	r = h.mustRun(0, "quota", "ls")
	want := `PROJECT  POOL      GPUS  CPUS  MEMORY  JOBS  BORROW           MAX PRIORITY
nlp      standard  0     -     -       1     -                normal
vision   standard  3     16    128GiB  4     gpu=2 mem=64GiB  high
`
	if r.stdout != want {
		t.Errorf("quota ls =\n%s\nwant\n%s", r.stdout, want)
	}
	h.mustRun(0, "quota", "ls", "--project", "vision", "--pool", "standard", "-o", "json")
	reqs := pf.seenRequests()
	if last := reqs[len(reqs)-1]; last != "GET /api/v1/quotas?pool=standard&project=vision" {
		t.Errorf("quota ls filter request = %q", last)
	}

	r = h.mustRun(0, "quota", "rm", "vision", "standard")
	if r.stdout != "removed the quota of project vision in pool standard\n" {
		t.Errorf("quota rm = %q", r.stdout)
	}
	r = h.mustRun(ExitNotFound, "quota", "rm", "vision", "standard")
	if !strings.Contains(r.stderr, `project "vision" has no quota in pool "standard"`) {
		t.Errorf("second quota rm: %q", r.stderr)
	}
	r = h.mustRun(ExitNotFound, "quota", "set", "vision", "gpu", "--gpus", "1")
	if !strings.Contains(r.stderr, `pool "gpu" does not exist`) {
		t.Errorf("quota set in a missing pool: %q", r.stderr)
	}
	r = h.mustRun(2, "quota", "set", "vision", "standard", "--memory", "much")
	if !strings.Contains(r.stderr, "invalid --memory") {
		t.Errorf("bad --memory: %q", r.stderr)
	}
}

func TestProjects(t *testing.T) {
	h, _ := newPoolHarness(t)
	r := h.mustRun(0, "project", "ls")
	if r.stdout != "" || !strings.Contains(r.stderr, "every project has shares 1") {
		t.Errorf("empty project ls: %q %q", r.stdout, r.stderr)
	}
	if r := h.mustRun(0, "project", "set", "vision", "--shares", "2.5"); r.stdout != "project vision has shares 2.5\n" {
		t.Errorf("project set = %q", r.stdout)
	}
	h.mustRun(0, "project", "set", "audio", "--shares", "1")
	r = h.mustRun(0, "project", "ls")
	want := "NAME    SHARES  AGE\naudio   1       1h\nvision  2.5     1h\n"
	if r.stdout != want {
		t.Errorf("project ls =\n%s\nwant\n%s", r.stdout, want)
	}
	if r := h.mustRun(2, "project", "set", "vision"); !strings.Contains(r.stderr, "--shares is required") {
		t.Errorf("project set without --shares: %q", r.stderr)
	}
	if r := h.mustRun(2, "project", "set", "vision", "--shares", "0"); !strings.Contains(r.stderr, "shares: must be more than 0") {
		t.Errorf("project set --shares 0: %q", r.stderr)
	}
}

func TestQueue(t *testing.T) {
	h, pf := newPoolHarness(t)
	soon := testNow.Add(5 * time.Minute)
	past := testNow.Add(-time.Minute)
	pf.queue = []apitypes.QueueEntry{
		{ID: 12, Name: "resnet", Project: "vision", Pool: "standard", Priority: "high", Position: 1,
			Reason: "WaitingForResources", Message: "needs 4 GPUs, 2 free", SubmittedAt: testNow.Add(-time.Hour), EstimatedStart: &soon},
		{ID: 15, Name: "bert", Project: "nlp", Pool: "standard", Priority: "normal", Position: 2, Reason: "QuotaExceeded",
			SubmittedAt: testNow.Add(-time.Minute), EstimatedStart: &past},
		{ID: 16, Name: "smoke", Project: "nlp", Pool: "cpu", Priority: "low", Position: 1, SubmittedAt: testNow},
	}
	r := h.mustRun(0, "queue", "--pool", "standard")
	want := `POS  ID  NAME    PROJECT  PRIORITY  REASON               EST. START  MESSAGE
1    12  resnet  vision   high      WaitingForResources  in 5m       needs 4 GPUs, 2 free
2    15  bert    nlp      normal    QuotaExceeded        now         -
`
	if r.stdout != want {
		t.Errorf("queue --pool =\n%s\nwant\n%s", r.stdout, want)
	}

	r = h.mustRun(0, "queue")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "POOL") || !strings.Contains(lines[3], "cpu") || !strings.Contains(lines[3], " - ") {
		t.Errorf("queue of every pool =\n%s", r.stdout)
	}

	r = h.mustRun(0, "queue", "-o", "json")
	var q apitypes.Queue
	if err := json.Unmarshal([]byte(r.stdout), &q); err != nil || len(q.Entries) != 3 || q.Entries[0].EstimatedStart == nil {
		t.Errorf("queue -o json = %s (%v)", r.stdout, err)
	}

	r = h.mustRun(0, "queue", "--pool", "empty")
	if r.stdout != "" || !strings.Contains(r.stderr, "no jobs are waiting") {
		t.Errorf("empty queue: %q %q", r.stdout, r.stderr)
	}
}

func TestGPUList(t *testing.T) {
	tests := map[string]struct {
		in   []int
		want string
	}{
		"none":     {nil, "-"},
		"one":      {[]int{3}, "3"},
		"pair":     {[]int{0, 1}, "0,1"},
		"run":      {[]int{0, 1, 2, 3}, "0-3"},
		"mixed":    {[]int{0, 1, 2, 5, 7, 8, 9}, "0-2,5,7-9"},
		"unsorted": {[]int{3, 1, 2}, "3,1,2"},
	}
	for name, tc := range tests {
		if got := gpuList(tc.in); got != tc.want {
			t.Errorf("%s: gpuList(%v) = %q, want %q", name, tc.in, got, tc.want)
		}
	}
}

// A machine's memory is seldom a round number of GiB: pool show writes it
// as people read it, not in the exact KiB the API gives.
func TestPoolShowRoundsMachineMemory(t *testing.T) {
	h, pf := newPoolHarness(t)
	pf.addPool(apitypes.Pool{Name: "default", Executor: "local", Borrowing: true,
		Nodes: []apitypes.Node{{Name: "vm", CPUs: 16, Memory: "131961976KiB", GPUs: []int{0}}}})
	r := h.mustRun(0, "pool", "show", "default")
	for _, want := range []string{"Capacity:           1 GPUs, 16 CPUs, 125.8GiB memory", "  vm    16    125.8GiB  0"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("pool show lacks %q:\n%s", want, r.stdout)
		}
	}
}
