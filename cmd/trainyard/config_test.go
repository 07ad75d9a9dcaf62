package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trainyard/internal/cli"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/service"
	"trainyard/internal/store/sqlite/sqlitetest"
)

func newService(t *testing.T) *service.Service {
	t.Helper()
	st := sqlitetest.Open(t, t.TempDir())
	return service.New(service.Config{Store: st})
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// The shipped sample config loads and sets up its three pools.
func TestSampleServerConfig(t *testing.T) {
	cfg, err := loadServerConfig(filepath.Join("..", "..", "examples", "config", "server.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	svc := newService(t)
	if err := applyScheduling(context.Background(), svc, cfg.schedulingConfig, executor.Inventory{}, quiet); err != nil {
		t.Fatal(err)
	}
	pools, _ := svc.Pools.ListPools(context.Background(), system)
	var names []string
	for _, p := range pools {
		names = append(names, p.Name)
	}
	if strings.Join(names, ",") != "priority,scratch,standard" {
		t.Fatalf("pools = %v", names)
	}
	if r := pools[2].Rates; r.GPUHour != 2_100_000 || r.ObjectGiBMonth != 23_000 || cfg.Currency != "USD" {
		t.Fatalf("standard's rates = %+v in %q", r, cfg.Currency)
	}
	quotas, _ := svc.Pools.ListQuotas(context.Background(), system, "vision", "standard")
	if len(quotas) != 1 || quotas[0].Guaranteed.GPUs != 2 || quotas[0].Borrow.GPUs != 2 || quotas[0].MaxPriority != domain.PriorityHigh {
		t.Fatalf("vision's standard quota = %+v", quotas)
	}
	if cfg.DataRoots.Projects["vision"][0] != "/data/vision" || cfg.DataRoots.Pools["scratch"][0] != "/scratch" {
		t.Fatalf("data_roots = %+v", cfg.DataRoots)
	}
	if _, err := cfg.DataRoots.Resolve(t.TempDir()); err != nil {
		t.Fatalf("data_roots: %v", err)
	}
	if g, err := cfg.PreemptionGuard.guard(); err != nil || g.Max != 3 || g.Window != 30*time.Minute || g.Hold != time.Hour {
		t.Fatalf("preemption_guard = %+v, %v", g, err)
	}
	cfg.Alerts.Defaults()
	if err := cfg.Alerts.Validate(); err != nil {
		t.Fatalf("alerts: %v", err)
	}
	if cfg.Alerts.Rules.QueuedTooLong.After.D() != 2*time.Hour || len(cfg.Alerts.Channels) != 1 {
		t.Fatalf("alerts = %+v", cfg.Alerts)
	}
}

// Without pools, a fresh store gets pool "default" from the inventory and
// no quotas (an open pool); a second start changes nothing.
func TestDefaultPoolFromInventory(t *testing.T) {
	svc := newService(t)
	inv := executor.Inventory{Nodes: []executor.Node{{Name: "Host.Example", CPUs: 4, Memory: 8 << 30, GPUs: []int{0, 1}}}}
	for range 2 {
		if err := applyScheduling(context.Background(), svc, schedulingConfig{}, inv, quiet); err != nil {
			t.Fatal(err)
		}
	}
	pools, _ := svc.Pools.ListPools(context.Background(), system)
	if len(pools) != 1 || pools[0].Name != "default" || pools[0].Nodes[0].Name != "host-example" || len(pools[0].Nodes[0].GPUs) != 2 {
		t.Fatalf("pools = %+v", pools)
	}
	if q, _ := svc.Pools.ListQuotas(context.Background(), system, "", ""); len(q) != 0 {
		t.Fatalf("quotas = %+v, want none (an open pool)", q)
	}
}

// Config mistakes name the entry, its line and the field.
func TestBadSchedulingConfig(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field": "pools:\n  - {name: a, nodes: [{name: n, cpus: 1, memory: 1GiB}], bogus: 1}\n",
		"bad pool":      "pools:\n  - {name: Bad Name, nodes: []}\n",
		"unknown pool":  "quotas:\n  - {project: p, pool: nope, gpus: 1}\n",
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "server.yaml")
			os.WriteFile(path, []byte(doc), 0o644)
			cfg, err := loadServerConfig(path)
			if err == nil {
				err = applyScheduling(context.Background(), newService(t), cfg.schedulingConfig, executor.Inventory{}, quiet)
			}
			if err == nil || !strings.Contains(err.Error(), "line 2") && !strings.Contains(err.Error(), "server.yaml:2: pools[0]") {
				t.Fatalf("err = %v, want an error naming line 2", err)
			}
		})
	}
}

// An artifact root from which a project's directory could be the server's
// own (the data directory, one holding it, its attempt directories) is
// refused at start, as written or through a link.
func TestArtifactsRootKeepsOutOfTheDataDirectory(t *testing.T) {
	base := t.TempDir()
	data := filepath.Join(base, "data")
	if err := os.MkdirAll(filepath.Join(data, "runs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(data, "runs"), filepath.Join(base, "art")); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{data, base, "/", filepath.Join(data, "runs"), filepath.Join(data, "runs", "x"), filepath.Join(data, "blobs"), filepath.Join(base, "art")} {
		if err := checkArtifactsRoot(bad, data); err == nil || !strings.Contains(err.Error(), "server config artifacts") {
			t.Errorf("artifacts %s: %v, want a refusal", bad, err)
		}
	}
	for _, ok := range []string{filepath.Join(data, "artifacts"), filepath.Join(base, "artifacts"), filepath.Join(data, "runs-archive")} {
		if err := checkArtifactsRoot(ok, data); err != nil {
			t.Errorf("artifacts %s: %v", ok, err)
		}
	}
}

// Server config mistakes read FILE:LINE: PATH: MESSAGE, with a suggestion
// for a misspelt key, and exit 2.
func TestServerConfigErrors(t *testing.T) {
	for name, tc := range map[string]struct{ doc, want string }{
		"unknown field": {"listen: 127.0.0.1:7070\nlog_levl: debug\n",
			"server.yaml:2: log_levl: unknown field; did you mean log_level?"},
		"nested unknown field": {"metrics:\n  auht: none\n",
			"server.yaml:2: metrics.auht: unknown field; did you mean auth?"},
		"unknown field in a pool": {"pools:\n  - name: a\n    nodes:\n      - {name: n, cpus: 1, memory: 1GiB, gpu: [0]}\n",
			"server.yaml:4: pools[0].nodes[0].gpu: unknown field; did you mean gpus?"},
		"wrong type": {"pools:\n  - {name: a, nodes: [{name: n, cpus: 1, memory: 1GiB, gpus: [0]}]}\n  - name: b\n    nodes:\n      - {name: n, cpus: 1, memory: 1GiB, gpus: [zero]}\n",
			`server.yaml:5: pools[1].nodes[0].gpus[0]: must be a whole number, got "zero"`},
		"pool log limit too small": {"pools:\n  - name: a\n    nodes: [{name: n, cpus: 1, memory: 1GiB}]\n    log_limit: 64KiB\n",
			"server.yaml:4: pools[0].log_limit: must be 0 (the server's log_limit) or at least 1MiB, got 64KiB"},
		"bad pool rate": {"pools:\n  - name: a\n    nodes: [{name: n, cpus: 1, memory: 1GiB}]\n    rates:\n      gpu_hour: 2.10\n      cpu_hour: lots\n",
			`server.yaml:6: pools[0].rates.cpu_hour: "lots" is not an amount; write a decimal such as 2.10`},
		"negative pool rate": {"pools:\n  - name: a\n    nodes: [{name: n, cpus: 1, memory: 1GiB}]\n    rates: {local_gib_month: -0.1}\n",
			"server.yaml:4: pools[0].rates.local_gib_month: is -0.10; a rate cannot be negative"},
		"unknown rate": {"pools:\n  - name: a\n    nodes: [{name: n, cpus: 1, memory: 1GiB}]\n    rates: {gpu_hours: 1}\n",
			"server.yaml:4: pools[0].rates.gpu_hours: unknown field; did you mean gpu_hour?"},
		"pool rates in another currency": {"currency: EUR\npools:\n  - name: a\n    nodes: [{name: n, cpus: 1, memory: 1GiB}]\n    rates: {currency: USD, gpu_hour: 1}\n",
			`server.yaml:5: pools[0].rates.currency: rates are in the server's currency, EUR, not "USD"`},
		"bad currency": {"currency: usd\n",
			`server.yaml:1: currency: "usd" is not a currency code; use three uppercase letters such as USD (the default) or EUR`},
		"bad detail cache": {"detail_cache: lots\n",
			`server.yaml:1: detail_cache: "lots" is not a size; use one such as 256MiB (the default), or 0 to turn the cache off`},
		"bad duplicate policy": {"duplicate_submits: block\n",
			`server.yaml:1: duplicate_submits: "block" is not a policy; use warn (the default) or refuse`},
		"bad retry storm": {"retry_storm: {failures: -1}\n",
			`server.yaml:1: retry_storm.failures: -1 is negative; use a count such as 10, or 0 to turn the guard off`},
		"wrong type at the top": {"code: {max_files: lots}\n",
			`server.yaml:1: code.max_files: must be a whole number, got "lots"`},
		"bad value": {"fair_share_half_life: 24h\nretry_backoff: soon\n",
			`server.yaml:2: retry_backoff: "soon" is not a positive duration`},
		"leader lease too short": {"replica: a\nleader_lease: 500ms\n",
			"server.yaml:2: leader_lease: 500ms is outside 1s..5m"},
		"executor without a kind": {"executors:\n  - name: gpu-cluster\n    namespace: ml\n    image: python:3\n",
			"server.yaml:2: executors[0].kind: missing; say which engine it is: kubernetes or slurm"},
		"executor named local": {"executors:\n  - {name: local, kind: kubernetes, namespace: ml, image: python:3}\n",
			`server.yaml:2: executors[0].name: "local" is the built-in local executor; choose another name`},
		"bad toleration": {"executors:\n  - name: k\n    kind: kubernetes\n    namespace: ml\n    image: python:3\n    tolerations: [{key: a, effect: Never}]\n",
			`server.yaml:6: executors[0].tolerations[0].effect: "Never" is not an effect`},
		"pool on an undeclared executor": {"executors:\n  - {name: k, kind: kubernetes, namespace: ml, image: python:3}\npools:\n  - {name: a, executor: slurm}\n",
			`server.yaml:4: pools[0].executor: executor "slurm" is not configured on this server; use one of local, k,`},
		"agent without an image": {"executors:\n  - name: k\n    kind: kubernetes\n    namespace: ml\n    image: python:3\n    agent: {api_url: http://ty:7070}\n",
			"server.yaml:6: executors[0].agent.image: missing; name the image holding the trainyard binary"},
		"agent api_url not a URL": {"executors:\n  - name: k\n    kind: kubernetes\n    namespace: ml\n    image: python:3\n    agent: {image: ty:1, api_url: ty.svc}\n",
			`server.yaml:6: executors[0].agent.api_url: "ty.svc" is not an http(s) URL`},
		"slurm executor with a namespace": {"executors:\n  - name: hpc\n    kind: slurm\n    namespace: ml\n",
			"server.yaml:4: executors[0].namespace: is for kind kubernetes; a slurm executor does not use it, so leave it out"},
		"kubernetes executor with a partition": {"executors:\n  - {name: k, kind: kubernetes, namespace: ml, image: python:3, partition: gpu}\n",
			"server.yaml:2: executors[0].partition: is for kind slurm; a kubernetes executor does not use it, so leave it out"},
		"slurm shim not absolute": {"executors:\n  - name: hpc\n    kind: slurm\n    shim: [trainyard-shim]\n",
			`server.yaml:4: executors[0].shim[0]: "trainyard-shim" is not an absolute path`},
		"slurm env not NAME=value": {"executors:\n  - name: hpc\n    kind: slurm\n    env: [SLURM_CONF]\n",
			`server.yaml:4: executors[0].env[0]: "SLURM_CONF" is not NAME=value`},
		"slurm poll interval too short": {"executors:\n  - name: hpc\n    kind: slurm\n    poll_interval: 10ms\n",
			"server.yaml:4: executors[0].poll_interval: 10ms is too short"},
		"unknown executor kind": {"executors:\n  - {name: hpc, kind: pbs}\n",
			`server.yaml:2: executors[0].kind: "pbs" is not a kind of executor; use kubernetes or slurm`},
		"public_url not a URL": {"public_url: trainyard.example\n",
			`server.yaml:1: public_url: "trainyard.example" must start with http:// or https://`},
		"smtp insecure to another host": {"alerts:\n  smtp:\n    host: smtp.example.com\n    from: ty@example.com\n    insecure: true\n",
			`server.yaml:5: alerts.smtp.insecure: is allowed only for a relay on this machine`},
		"smtp password in the file": {"alerts:\n  smtp: {host: smtp.example.com, from: ty@example.com, password: hunter2}\n",
			`server.yaml:2: alerts.smtp.password: unknown field; the fields in alerts.smtp are: host, port, from, username, password_file`},
		"negative env check ttl": {"env_check_ttl: -1h\n",
			`server.yaml:1: env_check_ttl: "-1h" is not a duration; use e.g. 1h, or 0 to run environment checks before every attempt`},
		"bad pin mode": {"envs:\n  pin_images: false\n",
			`server.yaml:2: envs.pin_images: "false" is not a mode; use auto (pin when the registry answers, else keep the tag with a warning), required or off`},
		"insecure registry with a scheme": {"envs:\n  insecure_registries:\n    - localhost:5000\n    - http://10.0.0.5:5000\n",
			`server.yaml:4: envs.insecure_registries[1]: "http://10.0.0.5:5000" has a scheme; name the registry alone, e.g. 10.0.0.5:5000`},
		"registry timeout too long": {"envs: {registry_timeout: 1h}\n",
			`server.yaml:1: envs.registry_timeout: "1h" is not a duration from 1ms to 1m; use e.g. 5s (the default)`},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "server.yaml")
			if err := os.WriteFile(path, []byte(tc.doc), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg, err := loadServerConfig(path)
			if err == nil {
				err = validateServerConfig(cfg)
			}
			if err == nil || !strings.Contains(err.Error(), filepath.Dir(path)+"/"+tc.want) {
				t.Fatalf("err = %v\nwant %q", err, tc.want)
			}
			if code := cli.ExitCode(err); code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
		})
	}
}

// trainyard server --check-config passes the sample config and reports a
// broken one with exit 2, without starting anything.
func TestCheckConfigCommand(t *testing.T) {
	run := func(file string) (int, string, string) {
		root := rootCommand()
		var stdout, stderr bytes.Buffer
		root.SetOut(&stdout)
		root.SetErr(&stderr)
		root.SetArgs([]string{"server", "--check-config", file})
		return cli.ExecuteContext(context.Background(), root), stdout.String(), stderr.String()
	}
	sample := filepath.Join("..", "..", "examples", "config", "server.yaml")
	if code, out, errOut := run(sample); code != 0 || out != sample+": ok\n" {
		t.Fatalf("check the sample config: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	bad := filepath.Join(t.TempDir(), "server.yaml")
	if err := os.WriteFile(bad, []byte("log_levl: debug\nisolation: maybe\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(bad)
	if code != 2 || out != "" || !strings.Contains(errOut, bad+":1: log_levl: unknown field; did you mean log_level?") {
		t.Fatalf("check a broken config: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// Decoding stops at the unknown field; once it is fixed, what a start
	// would refuse is reported the same way.
	if err := os.WriteFile(bad, []byte("log_level: debug\nisolation: maybe\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := run(bad); code != 2 || !strings.Contains(errOut, bad+`:2: isolation: "maybe" is not a mode`) {
		t.Fatalf("check a config with a bad value: exit %d, stderr %q", code, errOut)
	}
}

// env_check_ttl: 1h unless set; 0 checks before every attempt.
func TestEnvCheckTTLConfig(t *testing.T) {
	for doc, want := range map[string]time.Duration{"": time.Hour, "env_check_ttl: 0\n": 0, "env_check_ttl: 10m\n": 10 * time.Minute} {
		var cfg serverConfig
		if doc != "" {
			cfg.EnvCheckTTL = strings.TrimSpace(strings.TrimPrefix(doc, "env_check_ttl:"))
		}
		d, err := parseDurations(cfg)
		if err != nil || d.envCheckTTL != want {
			t.Errorf("%q: env check TTL %v (%v), want %v", doc, d.envCheckTTL, err, want)
		}
	}
}

// envs.pin_images: auto unless set; off hands the service no pinner, so
// images are stored as given.
func TestPinImagesConfig(t *testing.T) {
	for mode, want := range map[string]struct{ pinner, required bool }{
		"": {true, false}, "auto": {true, false}, "required": {true, true}, "off": {false, false},
	} {
		p, required, err := envsConfig{PinImages: mode, InsecureRegistries: []string{"localhost:5000"}}.pinner()
		if err != nil || (p != nil) != want.pinner || required != want.required {
			t.Errorf("pin_images %q: pinner %v, required %v, %v; want pinner %v, required %v", mode, p != nil, required, err, want.pinner, want.required)
		}
	}
}

// A pool on a declared executor needs no nodes: it takes the cluster's.
func TestServerConfigClusterPool(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.yaml")
	doc := "executors:\n  - name: gpu-cluster\n    kind: kubernetes\n    namespace: ml\n    image: python:3\n" +
		"    node_selector: {pool: a100}\n    tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]\n" +
		"    agent: {image: registry.example.com/trainyard:1, api_url: http://trainyard.trainyard.svc:7070}\n" +
		"pools:\n  - {name: a100, executor: gpu-cluster, max_gpus_per_job: 8}\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadServerConfig(path)
	if err == nil {
		err = validateServerConfig(cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := executorNames(cfg.Executors); len(got) != 1 || got[0] != "gpu-cluster" {
		t.Errorf("executors %v", got)
	}
}

// A slurm executor's block passes, and its pools need no nodes.
func TestServerConfigSlurmPool(t *testing.T) {
	path := filepath.Join(t.TempDir(), "server.yaml")
	doc := "executors:\n  - name: hpc\n    kind: slurm\n    partition: gpu\n    account: ml\n    qos: normal\n" +
		"    shim: [/usr/local/bin/trainyard-shim]\n    env: [SLURM_CONF=/etc/slurm/slurm.conf]\n    name_prefix: ty-prod\n" +
		"    poll_interval: 2s\n    memory_limits: true\n" +
		"pools:\n  - {name: a100, executor: hpc, max_gpus_per_job: 8}\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := loadServerConfig(path)
	if err == nil {
		err = validateServerConfig(cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	if c := cfg.Executors[0]; c.PollInterval.D() != 2*time.Second || !c.MemoryLimits || c.Shim[0] != "/usr/local/bin/trainyard-shim" {
		t.Errorf("executor %+v", c)
	}
	if err := slurmIsolation(true, cfg.Executors); err == nil || !strings.Contains(err.Error(), "isolation: off") {
		t.Errorf("slurm executor with isolation: %v; want it refused, saying what to do", err)
	}
	if err := slurmIsolation(false, cfg.Executors); err != nil {
		t.Errorf("slurm executor without isolation: %v", err)
	}
}
