package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"trainyard/internal/alerting"
	"trainyard/internal/alerts"
	"trainyard/internal/api"
	"trainyard/internal/api/apitypes"
	"trainyard/internal/artifacts"
	"trainyard/internal/blob"
	blobfs "trainyard/internal/blob/fs"
	blobs3 "trainyard/internal/blob/s3"
	"trainyard/internal/cli"
	"trainyard/internal/clock"
	"trainyard/internal/codepkg"
	"trainyard/internal/control"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/executor/local"
	"trainyard/internal/executor/local/userdb"
	"trainyard/internal/executor/router"
	"trainyard/internal/logs"
	"trainyard/internal/metrics"
	"trainyard/internal/metrics/sample"
	"trainyard/internal/observe"
	"trainyard/internal/scheduler"
	"trainyard/internal/secrets"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
	"trainyard/internal/web"
)

// serverConfig is the server's configuration file (--config). Every field is
// optional; flags override the file.
type serverConfig struct {
	Listen    string `yaml:"listen"`
	Data      string `yaml:"data"`
	Artifacts string `yaml:"artifacts"` // default <data>/artifacts
	Store     string `yaml:"store"`     // default sqlite at <data>/trainyard.db
	// DetailCache bounds the memory an SQLite store keeps job details in,
	// so that showing a job reads no pages (default 256MiB; 0: off). A
	// PostgreSQL store, shared by replicas, reads every detail afresh.
	DetailCache string `yaml:"detail_cache"`
	// DataRoots are the directories jobs may name as inputs: for every
	// job, per project and per pool (docs/operator.md). None: no inputs.
	DataRoots service.DataRoots `yaml:"data_roots"`
	// Inventory declares this machine's capacity instead of detecting it,
	// e.g. 4 GPUs on a machine without any (exported as CUDA_VISIBLE_DEVICES).
	// Simulated says that declaring more than the machine has, here or in
	// local pools' nodes, is intended (a test setup): no warning at start,
	// and pools are marked simulated (hardware.go). An inventory with
	// only simulated keeps the detected capacity.
	Inventory *struct {
		CPUs      float64 `yaml:"cpus"`
		Memory    string  `yaml:"memory"`
		GPUs      int     `yaml:"gpus"`
		Simulated bool    `yaml:"simulated"`
	} `yaml:"inventory"`
	// Executors declares where pools may run jobs besides this machine:
	// Kubernetes and Slurm clusters (executors.go, docs/operator.md).
	Executors []executorConfig `yaml:"executors"`
	// Pools, quotas and projects, in the API's shape (docs/pools.md).
	schedulingConfig `yaml:",inline"`
	// FairShareHalfLife is the half-life of past usage in fair share
	// (default 24h).
	FairShareHalfLife string `yaml:"fair_share_half_life"`
	RetryBackoff      string `yaml:"retry_backoff"` // first retry delay, doubling (default 10s)
	Grace             string `yaml:"grace"`         // SIGTERM→SIGKILL grace of jobs without policy.grace (default 10s)
	MaxGrace          string `yaml:"max_grace"`     // the most a job's policy.grace gets (default 10m)
	LogLevel          string `yaml:"log_level"`     // debug, info, warn, error
	// TLSCert and TLSKey, both set, serve HTTPS with this PEM certificate
	// (chain) and key.
	TLSCert string `yaml:"tls_cert"`
	TLSKey  string `yaml:"tls_key"`
	// MasterKeyFile holds the key that encrypts secrets (default
	// <data>/master.key, created on first start); TRAINYARD_MASTER_KEY
	// (base64) takes precedence. See docs/secrets.md.
	MasterKeyFile string `yaml:"master_key_file"`
	// MetricsToken is a bearer token for GET /metrics (besides the API
	// tokens of admins and auditors); setting it alone requires a token
	// from every client (docs/observability.md).
	MetricsToken string `yaml:"metrics_token"`
	// Metrics says who may read GET /metrics.
	Metrics struct {
		// Auth is "loopback" (the default without metrics_token: clients
		// on this machine without a token, others with one), "token" (the
		// default with metrics_token: a token from every client) or
		// "none" (everyone, without a token: unsafe).
		Auth string `yaml:"auth"`
	} `yaml:"metrics"`
	// AuditWitness is the file the server keeps the audit log's head in,
	// outside the store (default <data>/audit-witness); for real
	// protection put it on another disk or host (docs/audit.md).
	AuditWitness string `yaml:"audit_witness"`
	// SampleInterval is how often running attempts' CPU, memory and GPUs
	// are sampled for /metrics (default 15s).
	SampleInterval string `yaml:"sample_interval"`
	// LogRetention is how long the logs of finished jobs are kept (default
	// 30d; 0 keeps them forever). See docs/operator.md.
	LogRetention string `yaml:"log_retention"`
	// LogLimit bounds the log of one attempt (default 1GiB; 0: no limit):
	// the default and the ceiling of policy.log_limit. See docs/operator.md.
	LogLimit string `yaml:"log_limit"`
	// Currency is what pool rates and costs are in: a three-letter code
	// such as USD (the default) or EUR. It labels amounts; nothing is
	// converted, so changing it relabels every rate.
	Currency string `yaml:"currency"`
	// DuplicateSubmits is what a submit repeating a live or recent job of
	// the same user and spec does: warn (the default) or refuse.
	DuplicateSubmits string `yaml:"duplicate_submits"`
	// RightSizeMinRun: runs shorter than this are not judged by the
	// right-sizing warning at submit and trainyard report (default 1m).
	RightSizeMinRun string `yaml:"right_size_min_run"`
	// Alerts configures alert rules and channels (docs/observability.md).
	Alerts alerts.Config `yaml:"alerts"`
	// PublicURL is the server's address as its users reach it
	// (https://trainyard.example), for the job links in notifications
	// (docs/observability.md); default: the listen address.
	PublicURL string `yaml:"public_url"`
	// ObjectStore, when set, is an S3-compatible store for code packages
	// and checkpoint copies: http[s]://ACCESS:SECRET@HOST:PORT/BUCKET[/PREFIX]
	// (docs/artifacts.md); empty keeps code packages in <data>/blobs.
	ObjectStore string `yaml:"object_store"`
	// Replica names this server among replicas sharing a PostgreSQL store
	// (default host:port).
	Replica string `yaml:"replica"`
	// LeaderLease is the TTL of the leader's lease among replicas sharing
	// a PostgreSQL store (default 10s): a leader that stops renewing it is
	// replaced within about this long.
	LeaderLease string `yaml:"leader_lease"`
	// GrantWarning is how long before a compute grant ends its users are
	// warned that its end will preempt their jobs running on it (the
	// grant_expiring alert; default 1h, 0: no warning; docs/pools.md).
	GrantWarning string `yaml:"grant_warning"`
	// EnvCheckTTL is how long a passing environment check is trusted on
	// a node before it runs again (docs/envs.md); 0 runs it before every
	// attempt. Default 1h.
	EnvCheckTTL string `yaml:"env_check_ttl"`
	// Envs says whether environments' container images are pinned by
	// digest when they are registered (images.go, docs/envs.md).
	Envs envsConfig `yaml:"envs"`
	// Retention are the policies trainyard gc applies (docs/artifacts.md).
	Retention []artifacts.Policy `yaml:"retention"`
	// CheckpointLifecycle are the policies that move checkpoints to the
	// object store and delete them from every tier (docs/artifacts.md).
	CheckpointLifecycle []artifacts.LifecyclePolicy `yaml:"checkpoint_lifecycle"`
	// Isolation says whether jobs run as their projects' own unprivileged
	// users (docs/security.md): auto (default; when the server runs as
	// root), required (refuse to start otherwise) or off.
	Isolation string `yaml:"isolation"`
	// Supervisor is how attempts are supervised: shared (default; one
	// supervisor process for all) or per-attempt (docs/operator.md).
	Supervisor string `yaml:"supervisor"`
	// RendezvousPorts is the range each attempt's MASTER_PORT comes from
	// (default 29500-29999; docs/operator.md).
	RendezvousPorts string `yaml:"rendezvous_ports"`
	// JobUIDs is the range project users' ids are allocated from
	// (default 900000-999999).
	JobUIDs string `yaml:"job_uids"`
	// JobUsers names existing users to run jobs as instead of allocated
	// ids: per project, or per pool (a project's entry wins).
	JobUsers struct {
		Projects map[string]string `yaml:"projects"`
		Pools    map[string]string `yaml:"pools"`
	} `yaml:"job_users"`
	// Code bounds each unpack of a code package (code.go, docs/code.md).
	Code codeConfig `yaml:"code"`
	// PreemptionGuard holds a job preempted too often from further
	// preemption (preemption.go, docs/scheduling.md).
	PreemptionGuard preemptionGuardConfig `yaml:"preemption_guard"`
	// RetryStorm pauses the retries of similar jobs failing together
	// (preemption.go, docs/operator.md).
	RetryStorm retryStormConfig `yaml:"retry_storm"`

	src *configSource // the file and its lines; nil without --config
}

func serverCommand() *cobra.Command {
	var cfgPath, checkPath string
	var flags serverConfig
	cmd := &cobra.Command{
		Use:   "server",
		Short: "Run the control plane (API, scheduler, local executor)",
		Long: `Run the Trainyard control plane on this machine.

With no flags it keeps its data in ~/.local/share/trainyard (SQLite;
/var/lib/trainyard when run as root), runs jobs as local processes on this
machine's CPUs, memory and GPUs in one pool, default, open to every project
until an admin sets quotas, and listens on 127.0.0.1:7070. On the first
start it creates an admin token, prints it once, saves it (mode 0600) in the
data directory and writes the CLI's config file if there is none.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if checkPath != "" {
				if cfgPath != "" && cfgPath != checkPath {
					return domain.Errorf(domain.ErrInvalid, "--check-config %s names the file to check; leave out --config %s", checkPath, cfgPath)
				}
				cfgPath = checkPath
			}
			cfg := serverConfig{}
			if cfgPath != "" {
				var err error
				if cfg, err = loadServerConfig(cfgPath); err != nil {
					return err
				}
			}
			mergeServerFlags(cmd, &cfg, flags)
			if checkPath != "" {
				// What the server would refuse at start, without starting.
				if err := validateServerConfig(cfg); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: ok\n", checkPath)
				return nil
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runServer(ctx, cfg)
		},
	}
	cmd.Flags().StringVar(&cfgPath, "config", "", "server config file (YAML)")
	cmd.Flags().StringVar(&checkPath, "check-config", "", "check this server config file as a start would, print FILE: ok or its problems, and exit (0 ok, 2 problems)")
	cmd.Flags().StringVar(&flags.Data, "data", "", "data directory (default $XDG_DATA_HOME/trainyard or ~/.local/share/trainyard; /var/lib/trainyard for root)")
	cmd.Flags().StringVar(&flags.Listen, "listen", "127.0.0.1:7070", "address to listen on (port 0 picks a free port)")
	cmd.Flags().StringVar(&flags.Store, "store", "", "metadata store: a SQLite file path (default <data>/trainyard.db)")
	cmd.Flags().StringVar(&flags.TLSCert, "tls-cert", "", "serve HTTPS with this PEM certificate (with --tls-key)")
	cmd.Flags().StringVar(&flags.TLSKey, "tls-key", "", "PEM private key of --tls-cert")
	cmd.Flags().StringVar(&flags.MasterKeyFile, "master-key-file", "", "file (mode 0600) with the key that encrypts secrets; created when absent (default <data>/master.key; env TRAINYARD_MASTER_KEY overrides)")
	return cmd
}

// mergeServerFlags lets the flags given on the command line override the
// config file.
func mergeServerFlags(cmd *cobra.Command, cfg *serverConfig, flags serverConfig) {
	if cmd.Flags().Changed("data") {
		cfg.Data = flags.Data
	}
	if cmd.Flags().Changed("listen") || cfg.Listen == "" {
		cfg.Listen = flags.Listen
	}
	if cmd.Flags().Changed("store") {
		cfg.Store = flags.Store
	}
	if cmd.Flags().Changed("tls-cert") {
		cfg.TLSCert = flags.TLSCert
	}
	if cmd.Flags().Changed("tls-key") {
		cfg.TLSKey = flags.TLSKey
	}
	if cmd.Flags().Changed("master-key-file") {
		cfg.MasterKeyFile = flags.MasterKeyFile
	}
}

// defaultDataDir is $XDG_DATA_HOME/trainyard or ~/.local/share/trainyard,
// and /var/lib/trainyard for root: jobs then run as other users, who must
// pass through every directory above their attempt and output directories,
// and root's home is closed to them.
func defaultDataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "trainyard")
	}
	if os.Geteuid() == 0 {
		return "/var/lib/trainyard"
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ".trainyard"
	}
	return filepath.Join(home, ".local", "share", "trainyard")
}

func parseLevel(s string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return slog.LevelInfo
	}
	return l
}

// lifecycleEvery is how often the checkpoint lifecycle pass runs.
const lifecycleEvery = 10 * time.Minute

func runServer(ctx context.Context, cfg serverConfig) error {
	if err := validateServerConfig(cfg); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: parseLevel(cfg.LogLevel)}))
	if cfg.Data == "" {
		cfg.Data = defaultDataDir()
	}
	// Directories above the data directory are no secret, and jobs that
	// run as other users must pass through them (checkJobsReach).
	if err := os.MkdirAll(filepath.Dir(cfg.Data), 0o755); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	if err := os.Mkdir(cfg.Data, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create data directory: %w", err)
	}
	// The lock comes before anything else touches the data directory: a
	// second server on it must leave the running one's files alone.
	lock, err := lockDataDir(cfg.Data, isPostgres(cfg.Store))
	if err != nil {
		return err
	}
	defer lock.Close()
	os.Remove(filepath.Join(cfg.Data, "server.json")) // left behind by a server that was killed
	if cfg.Artifacts == "" {
		cfg.Artifacts = filepath.Join(cfg.Data, "artifacts")
	}
	// Outputs paths are checked against these: absolute, so a job's
	// outputs.path can be compared with them.
	if cfg.Data, err = filepath.Abs(cfg.Data); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if cfg.Artifacts, err = filepath.Abs(cfg.Artifacts); err != nil {
		return fmt.Errorf("server config artifacts: %w", err)
	}
	if err := checkArtifactsRoot(cfg.Artifacts, cfg.Data); err != nil {
		return err
	}
	inputRoots, err := cfg.DataRoots.Resolve(cfg.Data)
	if err != nil {
		return fmt.Errorf("server config %w", err)
	}
	if cfg.Store == "" {
		cfg.Store = filepath.Join(cfg.Data, "trainyard.db")
	}
	if cfg.AuditWitness == "" {
		cfg.AuditWitness = filepath.Join(cfg.Data, "audit-witness")
	}
	metricsAuth, err := parseMetricsAuth(cfg)
	if err != nil {
		return err
	}
	durations, err := parseDurations(cfg)
	if err != nil {
		return err
	}
	retry, grace, halfLife, sampleEvery, logRetention := durations.retry, durations.grace, durations.halfLife, durations.sampleEvery, durations.logRetention
	logLimit, err := parseLogLimit(cfg.LogLimit)
	if err != nil {
		return err
	}
	currency, err := parseCurrency(cfg.Currency)
	if err != nil {
		return err
	}
	if err := checkDuplicates(cfg.DuplicateSubmits); err != nil {
		return err
	}

	if err := artifacts.ValidatePolicies(cfg.Retention); err != nil {
		return fmt.Errorf("server config %w", err)
	}
	if err := artifacts.ValidateLifecycle(cfg.CheckpointLifecycle, cfg.ObjectStore != ""); err != nil {
		return fmt.Errorf("server config %w", err)
	}
	codeLimits, err := cfg.Code.limits()
	if err != nil {
		return err
	}
	retryStorm, err := cfg.RetryStorm.storm()
	if err != nil {
		return err
	}
	preemptionGuard, err := cfg.PreemptionGuard.guard()
	if err != nil {
		return err
	}

	detailCache, err := parseDetailCache(cfg.DetailCache)
	if err != nil {
		return err
	}
	st, err := openStoreWith(ctx, cfg.Store, sqlite.Options{DetailCacheBytes: detailCache})
	if err != nil {
		return fmt.Errorf("open the store: %w", err)
	}
	defer st.Close()

	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find own executable for the attempt supervisor: %w", err)
	}
	iso, isolation, err := jobIsolation(cfg, log)
	if err != nil {
		return err
	}
	if iso != nil {
		// The data directory itself is made passable below (protectDataDir).
		reach := []string{cfg.Data}
		if rel, err := filepath.Rel(cfg.Data, cfg.Artifacts); err != nil || !filepath.IsLocal(rel) {
			reach = append(reach, cfg.Artifacts)
		}
		if err := checkJobsReach(reach...); err != nil {
			return err
		}
	}
	if err := slurmIsolation(iso != nil, cfg.Executors); err != nil {
		return err
	}
	shimCmd, why := local.FindShim(self)
	if why != "" {
		log.Info("attempt supervisor: " + why)
	}
	execCfg := local.Config{ShimCommand: shimCmd, Logger: log, Isolation: iso, Users: userdb.System{},
		Unpack: func(r io.Reader, dest string) error { return codepkg.Unpack(r, dest, codeLimits) }, Runs: filepath.Join(cfg.Data, "runs"),
		EnvCheckTTL: durations.envCheckTTL, EnvCheckCache: filepath.Join(cfg.Data, "env-checks.json"), Supervisor: cfg.Supervisor}
	if cfg.RendezvousPorts != "" {
		if execCfg.Ports, err = local.ParsePortRange(cfg.RendezvousPorts); err != nil {
			return fmt.Errorf("server config rendezvous_ports: %w", err)
		}
	}
	hw := hardware{simulated: cfg.Inventory != nil && cfg.Inventory.Simulated}
	var declared *executor.Node // the inventory block, when it declares capacity
	if inv := cfg.Inventory; inv != nil && (inv.CPUs != 0 || inv.Memory != "" || inv.GPUs != 0) {
		host, _ := os.Hostname()
		n := executor.Node{Name: host, CPUs: inv.CPUs}
		if inv.Memory != "" {
			if n.Memory, err = domain.ParseByteSize(inv.Memory); err != nil {
				return fmt.Errorf("server config inventory.memory: %w", err)
			}
		}
		for i := range inv.GPUs {
			n.GPUs = append(n.GPUs, i)
		}
		execCfg.Inventory = &executor.Inventory{Nodes: []executor.Node{n}}
		declared = &n
	}
	ex, err := local.New(execCfg)
	if err != nil {
		return fmt.Errorf("start local executor: %w", err)
	}
	defer ex.Close()
	// Executors beside the local one (Kubernetes and Slurm clusters):
	// pools name them, and the router hands each attempt to its pool's.
	clusters, err := startExecutors(ctx, cfg.Executors, ex, self, log, 30*time.Second)
	if err != nil {
		return err
	}
	execs := map[string]executor.Executor{service.ExecutorLocal: ex}
	for _, c := range clusters {
		defer c.ex.Close()
		execs[c.name] = c.ex
	}
	rt, err := router.New(service.ExecutorLocal, execs, ex)
	if err != nil {
		return err
	}

	layout := logs.Layout{Root: filepath.Join(cfg.Data, "runs")}
	// Code packages (submit --context, docs/code.md) live in a blob store:
	// <data>/blobs, or the S3-compatible object_store, which also receives a
	// copy of every checkpoint (docs/artifacts.md).
	var codeBlobs blob.Store
	copyCheckpoints := cfg.ObjectStore != ""
	if cfg.ObjectStore != "" {
		s3cfg, err := blobs3.ParseURL(cfg.ObjectStore)
		if err != nil {
			return fmt.Errorf("server config object_store: %w", err)
		}
		if codeBlobs, err = blobs3.New(ctx, s3cfg); err != nil {
			return fmt.Errorf("server config object_store: %w", err)
		}
	} else {
		fsBlobs, err := blobfs.New(filepath.Join(cfg.Data, "blobs"))
		if err != nil {
			return fmt.Errorf("open the blob store for code packages: %w", err)
		}
		defer fsBlobs.Close()
		codeBlobs = fsBlobs
	}
	keyring, err := loadKeyring(cfg, log)
	if err != nil {
		return err
	}
	if iso != nil {
		// Everything the server keeps is its own; jobs pass through to
		// their attempt and output directories only.
		if err := protectDataDir(cfg.Data, layout.Root, cfg.Artifacts); err != nil {
			return err
		}
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return errors.New("TLS needs both a certificate and a key: give --tls-cert and --tls-key together")
	}
	var tlsCfg *tls.Config
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return fmt.Errorf("load TLS certificate %s and key %s: %w", cfg.TLSCert, cfg.TLSKey, err)
		}
		tlsCfg = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (another program holds the address; stop it or choose another address with --listen)", cfg.Listen, err)
	}
	url := "http://" + ln.Addr().String()
	if tlsCfg != nil {
		url = "https://" + ln.Addr().String()
		ln = tls.NewListener(ln, tlsCfg)
	} else {
		warnPlaintext(log, ln.Addr())
	}

	// Prometheus series (docs/observability.md): fed by the control loop and
	// the API, plus a sampler of running attempts' resources.
	var svc *service.Service // the control loop resolves secrets through it, metrics read budgets
	metricsReg := metrics.New(metrics.Config{CountJobs: st.CountJobs, AttemptDir: layout.AttemptDir,
		GPU: sample.FindNvidiaSMI(), SampleInterval: sampleEvery, Logger: log,
		Budgets: func(ctx context.Context) ([]metrics.Budget, error) { return budgetSeries(ctx, svc) }})

	// Alerts (docs/observability.md): rules evaluated on what the control
	// loop sees and the sampler's readings, delivered to the channels. The
	// leader runs them; every replica can send a channel test.
	newAlerter := func() (*alerting.Alerter, error) {
		return alerting.New(alerting.Config{Store: st, Alerts: cfg.Alerts, Logger: log, Clock: clock.Real{}, Currency: currency,
			Interval: cfg.Alerts.Interval.D(), Samples: func() []alerting.Sample { return alertSamples(metricsReg.Sampler().Latest()) },
			LogDropped: func(job int64, attempt int) (int64, bool) {
				_, dropped, ok := layout.LogLimited(job, attempt)
				return dropped, ok
			},
			Review: func(ctx context.Context, since, until time.Time, by string) (string, error) {
				rep, err := svc.Cost.Review(ctx, service.Principal{Subject: "system:report", Role: "admin"},
					service.ReviewQuery{Since: since, Until: until, By: by})
				return rep.Summary(currency), err
			}})
	}
	testAlerter, err := newAlerter()
	if err != nil {
		return fmt.Errorf("server config: %w", err)
	}
	// Job-end notifications (notify.go): the leader sends them; every
	// replica checks a spec's notify targets against the same config.
	notifier, err := newNotifier(cfg, st, log, url, func(ctx context.Context, j domain.Job) string { return jobCost(ctx, svc, j, currency) })
	if err != nil {
		return err
	}

	// The control loop, the alert rules and log retention run on the
	// leader: this server alone on SQLite; one of the replicas sharing a
	// PostgreSQL store (docs/operator.md).
	replica := cfg.Replica
	if replica == "" {
		host, _ := os.Hostname()
		replica = host + ":" + portOf(ln.Addr().String())
	}
	loops := &leaderLoops{st: st, replica: replica, log: log, leaseTTL: durations.leaderLease}
	var gpuSamples control.GPUSampler // the pools' idle stop reads the sampler's GPU readings
	if s := metricsReg.Sampler(); s != nil {
		gpuSamples = s
	}
	controlConfig := func(alerter *alerting.Alerter, fence func(context.Context) error) control.Config {
		return control.Config{Store: st, GPUSamples: gpuSamples, Executor: rt, Clock: clock.Real{}, Logger: log, Logs: layout, Currency: currency,
			BaseEnv: baseEnv(), Grace: grace, MaxGrace: durations.maxGrace, RetryBackoff: retry, LogLimit: logLimit,
			Scheduler: scheduler.Config{FairShareHalfLife: halfLife},
			Secrets: func(ctx context.Context, project string, names []string) ([]string, []string, error) {
				return svc.Secrets.ResolveSecrets(ctx, project, names)
			},
			JobTokens: jobTokens{&svc}, APIURL: url, Observer: observe.Observers{M: metricsReg, A: alerter}, Blobs: codeBlobs,
			CopyCheckpoints: copyCheckpoints, Fence: fence, PreemptionGuard: preemptionGuard, RetryStorm: retryStorm,
			GrantWarning: durations.grantWarning}
	}
	loops.preview = func() *control.Controller { return control.New(controlConfig(testAlerter, nil)) }
	loops.term = func(ctx context.Context, fence func(context.Context) error) (*control.Controller, func()) {
		alerter, err := newAlerter()
		if err != nil {
			alerter = testAlerter // validated above; cannot fail
		}
		ctl := control.New(controlConfig(alerter, fence))
		var wg sync.WaitGroup
		wg.Add(6)
		go func() { defer wg.Done(); _ = notifier.Run(ctx) }()
		go func() {
			defer wg.Done()
			if err := ctl.Run(ctx); err != nil {
				log.Error("control loop stopped", "err", err)
			}
		}()
		go func() { defer wg.Done(); _ = alerter.Run(ctx) }()
		// Log retention: once now, then daily.
		go func() {
			defer wg.Done()
			t := time.NewTicker(24 * time.Hour)
			defer t.Stop()
			svc.Artifacts.RunLogRetention(ctx, logRetention, t.C, nil)
		}()
		// Checkpoint lifecycle: once now, then every few minutes, each
		// pass looking at what changed since the one before.
		go func() {
			defer wg.Done()
			t := time.NewTicker(lifecycleEvery)
			defer t.Stop()
			svc.Artifacts.RunLifecycle(ctx, t.C, nil)
		}()
		// Storage accrual: once now, then hourly; each UTC day is
		// written once, after it ends.
		go func() {
			defer wg.Done()
			t := time.NewTicker(time.Hour)
			defer t.Stop()
			svc.Artifacts.RunStorageAccrual(ctx, t.C, nil)
		}()
		// Pools on a cluster follow its nodes (autoscaling, drains).
		// ... and lose the Jobs no active attempt owns.
		for _, c := range clusters {
			wg.Add(2)
			go func() { defer wg.Done(); followNodes(ctx, svc, c, log) }()
			go func() {
				defer wg.Done()
				t := time.NewTicker(strayAge)
				defer t.Stop()
				reapStrays(ctx, st, c.name, c.ex, log, t.C)
			}()
		}
		return ctl, wg.Wait
	}
	images, requirePins, err := cfg.Envs.pinner()
	if err != nil {
		return err
	}
	svc = service.New(service.Config{Store: st, Clock: clock.Real{}, Logger: log, LocalEnvs: len(clusters) == 0, Currency: currency, DuplicateSubmits: cfg.DuplicateSubmits,
		Images: images, RequirePinnedImages: requirePins,
		RightSizeMinRun: durations.rightSizeMinRun,
		ArtifactsRoot:   cfg.Artifacts, InputRoots: inputRoots, Logs: layout, Files: ex, Wake: loops.Wake, Queue: loops.Queue, Keyring: keyring,
		Alerts: testAlerter, Notify: notifier, LatestSample: latestSample(metricsReg.Sampler()), SampleHistory: sampleHistory(metricsReg.Sampler()), Retention: cfg.Retention, Lifecycle: cfg.CheckpointLifecycle, Blobs: codeBlobs,
		Broadcast: loops.Broadcast, CacheTTL: cacheTTL(st), AuditWitness: cfg.AuditWitness,
		Capabilities: func(name string) executor.Capabilities {
			if e, ok := rt.Executor(name); ok {
				return e.Capabilities()
			}
			return executor.Capabilities{}
		},
		Executors: executorNames(cfg.Executors),
		Waiting: func(id int64, attempt int) string {
			return rt.Waiting(executor.Ref{JobID: id, Attempt: attempt})
		},
		ExecutorNodes: func(ctx context.Context, name string) ([]domain.Node, error) {
			e, ok := rt.Executor(name)
			if !ok {
				return nil, fmt.Errorf("executor %q is not configured", name)
			}
			return nodesOf(ctx, e)
		}})
	if err := svc.Audit.LoadAuditWitness(); err != nil {
		return fmt.Errorf("server config audit_witness: %w", err)
	}
	if err := svc.Secrets.CheckSecretKeys(ctx); err != nil {
		log.Error("stored secrets cannot be opened; jobs that name them will fail to launch", "err", err)
	}
	inv, err := ex.Inventory(ctx)
	if err != nil {
		return fmt.Errorf("read this machine's inventory: %w", err)
	}
	if err := applyScheduling(ctx, svc, cfg.schedulingConfig, inv, log); err != nil {
		return err
	}
	// Declared beyond detected hardware (GPUs that do not exist): warn
	// now, and say so in pool ls and status (hardware.go).
	hwKnown := true
	if declared == nil && len(inv.Nodes) == 1 {
		hw.detected = inv.Nodes[0]
	} else if hw.detected, err = local.Detect(ctx, log); err != nil {
		log.Warn("cannot compare the declared inventory with this machine's hardware", "err", err)
		hwKnown = false
	}
	var poolHardware func(domain.Pool) (string, bool)
	if hwKnown {
		hw.warn(log, declared, poolsNow(ctx, svc))
		poolHardware = hw.pool
	}

	if err := bootstrap(ctx, svc, cfg.Data, url, cfg.TLSCert); err != nil {
		return err
	}
	if err := svc.Envs.EnsureHostEnv(ctx); err != nil { // the built-in environment host@1
		return err
	}

	// Requests derive from baseCtx, so long-lived log streams end when the
	// server shuts down instead of holding the shutdown open.
	baseCtx, cancelRequests := context.WithCancel(context.Background())
	defer cancelRequests()
	srv := &http.Server{
		BaseContext: func(net.Listener) context.Context { return baseCtx },
		Handler: api.Handler(api.Config{Service: svc, Logger: log,
			Version: apitypes.Version{Version: version, Commit: commit, Store: st.Kind()}, Ready: st.Ping,
			Status: func(ctx context.Context) apitypes.Status {
				st := loops.Status(ctx)
				st.Isolation = isolation
				if hwKnown {
					st.Hardware = hw.summary(poolsNow(ctx, svc))
				}
				return st
			},
			Metrics: metricsReg, MetricsToken: cfg.MetricsToken, MetricsAuth: metricsAuth, PoolHardware: poolHardware,
			Currency: currency,
			Pages:    web.Handler(web.Config{Service: svc, Logger: log, Secure: cfg.TLSCert != "", Currency: currency})}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	loopCtx, stopLoop := context.WithCancel(context.Background())
	loopsDone := make(chan struct{})
	go func() { defer close(loopsDone); loops.Run(loopCtx) }()
	go loops.Listen(loopCtx, svc.Invalidate)
	go func() { _ = metricsReg.RunSampler(loopCtx) }()
	// The audit witness follows the log every second, and once more after
	// the loops' last writes (docs/audit.md).
	witnessCtx, stopWitness := context.WithCancel(context.Background())
	witnessDone := make(chan struct{})
	go func() {
		defer close(witnessDone)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		svc.Audit.RunAuditWitness(witnessCtx, t.C)
	}()
	srvErr := make(chan error, 1)
	go func() { srvErr <- srv.Serve(ln) }()

	if err := lock.record(lockInfo{PID: os.Getpid(), URL: url}); err != nil {
		log.Warn("record this server's address in the lock file", "err", err)
	}
	if err := writeServerInfo(cfg.Data, url); err != nil {
		log.Warn("write server.json", "err", err)
	} else {
		// Only the server.json this process wrote is removed on the way out.
		defer os.Remove(filepath.Join(cfg.Data, "server.json"))
	}
	log.Info("trainyard server listening", "url", url, "data", cfg.Data, "store", st.Kind(), "isolation", isolation)

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down; running jobs keep running and are picked up on the next start")
	case err := <-srvErr:
		runErr = fmt.Errorf("serve HTTP: %w", err)
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cancelRequests()
	_ = srv.Shutdown(shutCtx)
	stopLoop()
	<-loopsDone // the loops' last writes land before the store closes
	stopWitness()
	<-witnessDone
	return runErr
}

// checkArtifactsRoot refuses an artifact root from which a job's
// outputs.path (<artifacts>/<project>/...) could reach the server's own
// files: the data directory itself, a directory holding it, or its
// attempt directories and blob store; as written and with links resolved.
func checkArtifactsRoot(artifacts, data string) error {
	for _, real := range []bool{false, true} {
		a, d := artifacts, data
		if real {
			if r, err := filepath.EvalSymlinks(a); err == nil {
				a = r
			}
			if r, err := filepath.EvalSymlinks(d); err == nil {
				d = r
			}
		}
		if under(a, d) {
			return fmt.Errorf("server config artifacts: %s is the data directory %s or holds it, so a project's outputs could reach the server's own files; use a directory of its own, e.g. %s", artifacts, data, filepath.Join(data, "artifacts"))
		}
		for _, own := range []string{"runs", "blobs"} {
			if under(filepath.Join(d, own), a) {
				return fmt.Errorf("server config artifacts: %s is inside %s, which the server keeps for itself; use e.g. %s", artifacts, filepath.Join(data, own), filepath.Join(data, "artifacts"))
			}
		}
	}
	return nil
}

// under reports whether p is root or lies below it.
func under(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// bootstrap creates the admin token on a fresh store, prints it once, saves it
// and writes the CLI config when there is none. With TLS, the config names
// the server's certificate as the CLI's ca_file, so the CLI on this machine
// trusts a self-signed or privately issued certificate.
func bootstrap(ctx context.Context, svc *service.Service, data, url, tlsCert string) error {
	secret, err := svc.Identity.Bootstrap(ctx)
	if err != nil || secret == "" {
		return err
	}
	tokenPath := filepath.Join(data, "admin-token")
	if err := os.WriteFile(tokenPath, []byte(secret+"\n"), 0o600); err != nil {
		return fmt.Errorf("save admin token: %w", err)
	}
	fmt.Fprintf(os.Stderr, "\nCreated the admin token (shown once; saved to %s):\n\n    %s\n\n", tokenPath, secret)
	cfgPath := cli.ConfigPath()
	if _, err := os.Stat(cfgPath); errors.Is(err, os.ErrNotExist) {
		caFile := ""
		if tlsCert != "" {
			if caFile, err = filepath.Abs(tlsCert); err != nil {
				return fmt.Errorf("write CLI config: locate the TLS certificate %s: %w", tlsCert, err)
			}
		}
		if err := cli.WriteConfig(cfgPath, url, secret, caFile); err != nil {
			return fmt.Errorf("write CLI config: %w", err)
		}
		fmt.Fprintf(os.Stderr, "Wrote %s: the trainyard CLI on this machine is logged in as admin.\n\n", cfgPath)
	} else {
		// A fresh store, so the existing config's token is another
		// server's (another data directory, or an earlier store).
		fmt.Fprintf(os.Stderr, "Note: %s (server %s) is left as it is, and its token is not this server's; to use this one:\n\n    export TRAINYARD_SERVER=%s TRAINYARD_TOKEN=$(cat %s)\n\n",
			cfgPath, cmp.Or(cli.ConfiguredServer(cfgPath), "default"), url, tokenPath)
	}
	return nil
}

// writeServerInfo records the listening URL and pid, for scripts and tests
// that start the server on port 0.
func writeServerInfo(data, url string) error {
	b, _ := json.Marshal(map[string]any{"url": url, "pid": os.Getpid()})
	tmp := filepath.Join(data, "server.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(data, "server.json"))
}

// baseEnv is the environment every job starts from: a fixed PATH, and the
// server's language and time zone. Nothing else of the server's own
// environment reaches a job (docs/spec.md).
func baseEnv() []string {
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}
	if v, ok := os.LookupEnv("LANG"); ok && v != "" {
		env[1] = "LANG=" + v
	}
	if v, ok := os.LookupEnv("TZ"); ok && v != "" {
		env = append(env, "TZ="+v)
	}
	return env
}

// loadKeyring loads the master key that encrypts secrets: from
// TRAINYARD_MASTER_KEY, else from the key file (created 0600 with random
// bytes on first start).
func loadKeyring(cfg serverConfig, log *slog.Logger) (*secrets.Keyring, error) {
	path := cfg.MasterKeyFile
	if path == "" {
		path = filepath.Join(cfg.Data, "master.key")
	}
	ring, source, created, err := secrets.LoadKeyring(path, os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("load the master key for secrets: %w", err)
	}
	if created {
		log.Warn("created a new master key for secrets; back it up: without it stored secrets cannot be read", "file", path, "key_id", ring.Current().ID())
	} else {
		log.Info("master key for secrets loaded", "from", source, "key_id", ring.Current().ID())
	}
	return ring, nil
}

// jobTokens lets the control loop make attempt tokens through the service
// (control may not import it).
type jobTokens struct{ svc **service.Service }

func (j jobTokens) Grant(ctx context.Context, refs []executor.Ref) ([]string, []store.TokenGrant, error) {
	return (*j.svc).Identity.GrantJobTokens(ctx, attemptRefs(refs))
}

func (j jobTokens) Issue(ctx context.Context, refs []executor.Ref) ([]string, error) {
	return (*j.svc).Identity.IssueJobTokens(ctx, attemptRefs(refs))
}

func (j jobTokens) End(ctx context.Context, ref executor.Ref) domain.AuditRecord {
	return (*j.svc).Identity.JobTokenEnd(ctx, service.AttemptRef{JobID: ref.JobID, Attempt: ref.Attempt})
}

func (j jobTokens) Ended(refs []executor.Ref) { (*j.svc).Identity.JobTokensEnded(attemptRefs(refs)) }

func attemptRefs(refs []executor.Ref) []service.AttemptRef {
	out := make([]service.AttemptRef, len(refs))
	for i, r := range refs {
		out[i] = service.AttemptRef{JobID: r.JobID, Attempt: r.Attempt}
	}
	return out
}

// parseMetricsAuth reads who may read GET /metrics from metrics.auth and
// metrics_token (docs/observability.md).
func parseMetricsAuth(cfg serverConfig) (api.MetricsAuth, error) {
	switch a := api.MetricsAuth(cfg.Metrics.Auth); a {
	case "":
		if cfg.MetricsToken != "" {
			return api.MetricsAuthToken, nil // as before metrics.auth existed
		}
		return api.MetricsAuthLoopback, nil
	case api.MetricsAuthLoopback, api.MetricsAuthToken:
		return a, nil
	case api.MetricsAuthNone:
		if cfg.MetricsToken != "" {
			return "", errors.New("server config metrics.auth: none opens /metrics to everyone, yet metrics_token is set; remove one of them")
		}
		return a, nil
	default:
		return "", fmt.Errorf("server config metrics.auth: %q is not one of loopback (the default), token or none", cfg.Metrics.Auth)
	}
}

// warnPlaintext warns when the server serves plain HTTP on an address other
// machines can reach: API tokens and job data would cross the network in
// clear text.
func warnPlaintext(log *slog.Logger, addr net.Addr) {
	if tcp, ok := addr.(*net.TCPAddr); ok && tcp.IP.IsLoopback() {
		return
	}
	log.Warn("listening on a non-loopback address without TLS: API tokens and job data travel in clear text; set tls_cert and tls_key (or --tls-cert and --tls-key), or listen on 127.0.0.1 behind a TLS proxy (docs/operator.md)",
		"listen", addr.String())
}

// isPostgres reports whether store names a PostgreSQL store.
func isPostgres(store string) bool {
	return strings.HasPrefix(store, "postgres://") || strings.HasPrefix(store, "postgresql://")
}

// budgetSeries are the budgets in force with their spend, for /metrics.
func budgetSeries(ctx context.Context, svc *service.Service) ([]metrics.Budget, error) {
	if svc == nil {
		return nil, nil // the server is still starting
	}
	sts, err := svc.Cost.Budgets(ctx, service.Principal{Subject: "system:metrics", Role: "admin"}, "")
	if err != nil {
		return nil, err
	}
	var out []metrics.Budget
	for _, st := range sts {
		if st.InForce {
			out = append(out, metrics.Budget{Project: st.Budget.Project, Period: st.Use.Period,
				Amount: st.Budget.Amount, Spent: st.Use.Spent, Committed: st.Use.Committed})
		}
	}
	return out, nil
}
