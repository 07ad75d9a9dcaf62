// Package service holds the request-driven use cases: submit, inspect, list and
// cancel jobs, read their logs, explain them, and authenticate callers. Each use
// case runs in the order authenticate → validate → one store transaction →
// wake the control loop. It never talks to executors: the control loop does.
//
// The use cases are split by aggregate. New returns a Service, which composes
// one small service per aggregate, each in its own files, and adds only
// Invalidate and Now, which concern them all:
//
//	Jobs      *JobService       submit, get, list, cancel, hold/release, why, logs, rerun,
//	                            metrics, resource history, code packages
//	Identity  *IdentityService  authentication, users, roles, tokens, bootstrap, whoami
//	Pools     *PoolService      pools, quotas, projects, queue, compute requests, admission
//	Artifacts *ArtifactService  outputs, checkpoints, gc, log retention
//	Envs      *EnvService       environments
//	Templates *TemplateService  job templates
//	Secrets   *SecretService    secrets
//	Alerts    *AlertService     alerts
//	Audit     *AuditService     the audit log and its witness
//	Cost      *CostService      spend reports from attempt history
//
// Each aggregate's type and store interface open its first file (jobs.go,
// identity.go, pools.go, artifacts.go, envs.go, templates.go, secrets.go,
// alerts.go, audit.go, cost.go); its other files hold only its methods and helpers.
//
// Callers name the aggregate: svc.Jobs.Cancel(ctx, p, id, reason). Every
// aggregate service embeds a pointer to the one shared core: the Config, the
// clock, the authorizer and auditor (authorize, audited, auditedAs) and the
// caches that Invalidate drops. Each reaches the store only through the
// interface declared beside it (JobStore, IdentityStore, …), which lists what
// its use cases call; New hands each its interface and keeps no reference to
// the whole store.Store (TestServicesReachStoreThroughInterfaces). A use case
// that needs another aggregate (submit resolving environments, secrets,
// templates and admission) calls that aggregate's service, which its service
// holds by name.
package service

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"trainyard/internal/artifacts"
	"trainyard/internal/blob"
	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/logs"
	"trainyard/internal/secrets"
	"trainyard/internal/store"
)

// Config wires a Service.
type Config struct {
	Store    store.Store
	Clock    clock.Clock
	Logger   *slog.Logger
	Currency string // the server's currency, named in budget messages
	// DuplicateSubmits is what a submit that repeats a live or recent job
	// of the same user and spec does: DuplicatesWarn ("" too) or
	// DuplicatesRefuse.
	DuplicateSubmits string
	// RightSizeMinRun: runs shorter than this are not judged by the
	// right-sizing warning at submit and the review report (default
	// DefaultRightSizeMinRun).
	RightSizeMinRun time.Duration
	ArtifactsRoot   string      // outputs go to <root>/<project>/<name>/<job-id>/
	Logs            logs.Layout // where attempt logs live
	// Files reads the attempts' logs and the jobs' outputs: the executor's
	// read side. Nothing else here opens a job's files.
	Files executor.Files
	// InputRoots are the directories jobs may name as inputs, from the
	// server config's data_roots (paths.go); the zero value allows none.
	InputRoots InputRoots
	// Wake nudges the control loop after a change it must act on.
	Wake func()
	// Queue returns the scheduler's current queue (see Service.Queue); nil
	// means no control loop runs and every queue is empty.
	Queue QueueFunc
	// Keyring holds the master key that seals secrets (secrets.go); nil
	// means secrets can be neither set nor used.
	Keyring *secrets.Keyring
	// Broadcast, when set, tells the other replicas sharing the store that
	// cached state changed ("auth": tokens or roles; "jobauth": attempts'
	// tokens ended; "sched": pools, quotas, grants); they call
	// Invalidate. CacheTTL, when positive, also bounds how long a cached
	// authentication or admission view is trusted, in case a broadcast is
	// lost.
	Broadcast func(topic string)
	CacheTTL  time.Duration
	// Retention are the policies gc applies to finished jobs' files.
	Retention []artifacts.Policy
	// Lifecycle are the checkpoint lifecycle policies gc and the periodic
	// pass apply to every job's checkpoints (lifecycle.go).
	Lifecycle []artifacts.LifecyclePolicy
	// Alerts sends test notifications; nil: alerting is not running.
	Alerts AlertChannels
	// Notify says where job-end notifications can go (notify.go); nil:
	// nowhere, so specs and defaults may name no channel or address.
	Notify NotifyTargets
	// LatestSample returns the latest resource reading of a running
	// attempt, for why; nil: none are taken.
	LatestSample func(jobID int64, attempt int) (domain.ResourceSample, bool)
	// SampleHistory returns the resource readings kept of an attempt,
	// oldest first, for ResourceHistory; nil: none are kept.
	SampleHistory func(jobID int64, attempt int) []domain.ResourceSample
	// Blobs keeps code packages (code.go); nil: submit --context is refused.
	Blobs blob.Store
	// MaxCodeBytes bounds an uploaded code package (0: codepkg.DefaultMaxSize).
	MaxCodeBytes int64
	// MaxUploadBytes bounds one output file a job's agent uploads
	// (upload.go; 0: DefaultMaxUploadBytes).
	MaxUploadBytes int64
	// AuditWitness is the file the server keeps the audit log's head in,
	// outside the store (auditwitness.go); "" keeps none.
	AuditWitness string
	// Capabilities returns what the executor of that name (a pool's
	// executor) can do, asked by admission: whether it runs jobs on more
	// than one node, and sends policy.warn's signal. Nil: the local
	// executor's (one node, warnings sent).
	Capabilities func(executor string) executor.Capabilities
	// Executors are the executors pools may name besides ExecutorLocal:
	// those the server's config declares. Each keeps its own nodes (a
	// cluster's), which ExecutorNodes reports; a pool on one of them takes
	// its nodes from it, not from its definition.
	Executors []string
	// ExecutorNodes returns the nodes an executor of Executors offers now;
	// nil with Executors empty.
	ExecutorNodes func(ctx context.Context, executor string) ([]domain.Node, error)
	// Waiting says why a starting attempt is not running yet, when its
	// executor can tell (a pod Kubernetes cannot place), for why; nil or
	// "": nothing to say.
	Waiting func(jobID int64, attempt int) string
	// LocalEnvs says jobs run on this machine (the local executor), so an
	// environment's path_prefix directories must exist here to be
	// registered; with remote executors they live on the nodes.
	LocalEnvs bool
	// Images pins environments' container images by digest when they are
	// registered (envs.go); nil: images are stored as given (the server
	// config's envs.pin_images: off).
	Images ImagePinner
	// RequirePinnedImages refuses an image by tag that Images could not
	// pin because its registry could not be asked (envs.pin_images:
	// required); otherwise it is stored by its tag, with a warning.
	RequirePinnedImages bool
}

// Service is the set of use cases, one service per aggregate. Each holds
// the shared core and reaches the store only through its own store
// interface. Safe for concurrent use.
type Service struct {
	Jobs      *JobService
	Identity  *IdentityService
	Pools     *PoolService
	Artifacts *ArtifactService
	Envs      *EnvService
	Templates *TemplateService
	Secrets   *SecretService
	Alerts    *AlertService
	Audit     *AuditService
	Cost      *CostService
	Notify    *NotifyService // users' default job-end notifications: notify.go

	core *core
}

// core is what every aggregate service shares: the configuration, the
// clock, the authorizer and auditor (authorize.go), and the caches that
// Invalidate drops.
type core struct {
	cfg     Config
	st      auditAppender // appends denials outside any change (authorize.go)
	limiter failLimiter   // failed authentications per client address and token prefix
	// auth caches authenticated tokens (hash → authEntry). authGen is bumped
	// after every change to tokens and roles; an entry read under an older
	// generation is not trusted, so a revocation or a grant made through this
	// server takes effect on the next request; other replicas hear of it
	// through Config.Broadcast, and Config.CacheTTL bounds the rest.
	auth    sync.Map
	authGen atomic.Uint64
	// jobAuth indexes the cached job tokens by attempt (jobAuthIndex), so
	// that an attempt's end forgets its own and no one else's.
	jobAuth jobAuthIndex
	// admitView caches pools, quotas and grants for admission; schedGen
	// invalidates it (see schedulingChanged).
	admitView atomic.Pointer[admissionView]
	schedGen  atomic.Uint64
	// envCache holds environments by name for submit (envVersions).
	envCache sync.Map
	envGen   atomic.Uint64
}

// authEntry is one cached authentication.
type authEntry struct {
	p       Principal
	expires time.Time // the token's expiry; zero: none
	gen     uint64
	at      time.Time // when it was cached (Config.CacheTTL)
}

// New returns a Service.
func New(cfg Config) *Service {
	if cfg.Clock == nil {
		cfg.Clock = clock.Real{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.RightSizeMinRun <= 0 {
		cfg.RightSizeMinRun = DefaultRightSizeMinRun
	}
	if cfg.Currency == "" {
		cfg.Currency = domain.DefaultCurrency
	}
	if cfg.Wake == nil {
		cfg.Wake = func() {}
	}
	if cfg.Files == nil {
		cfg.Files = noFiles{}
	}
	// Each service gets the store only as its own interface; the core
	// keeps no way to the whole of it (see TestServicesReachStoreThroughInterfaces).
	st := cfg.Store
	cfg.Store = nil
	c := &core{cfg: cfg, st: st}
	s := &Service{core: c,
		Identity:  &IdentityService{core: c, st: st},
		Pools:     &PoolService{core: c, st: st},
		Artifacts: &ArtifactService{core: c, st: st},
		Envs:      &EnvService{core: c, st: st},
		Secrets:   &SecretService{core: c, st: st},
		Alerts:    &AlertService{core: c, st: st},
		Audit:     &AuditService{core: c, st: st},
		Cost:      &CostService{core: c, st: st},
		Notify:    &NotifyService{core: c, st: st},
	}
	s.Templates = &TemplateService{core: c, st: st, envs: s.Envs}
	s.Jobs = &JobService{core: c, st: st, envs: s.Envs, secrets: s.Secrets,
		templates: s.Templates, pools: s.Pools, cost: s.Cost}
	return s
}

// noFiles is the Files of a service configured without any: it has no
// log and no output.
type noFiles struct{}

var errNoFiles = fmt.Errorf("this server reads no job files (no executor configured): %w", fs.ErrNotExist)

func (noFiles) Logs(context.Context, executor.Ref, executor.LogQuery, io.Writer) error {
	return errNoFiles
}

func (noFiles) Outputs(context.Context, string) (executor.Outputs, error) { return nil, errNoFiles }

func (noFiles) LogState(context.Context, executor.Ref) (executor.LogState, error) {
	return executor.LogState{}, nil
}

func (noFiles) ExpireLogs(context.Context, int64, executor.LogExpiry) (bool, error) {
	return false, nil
}

func (noFiles) LogsExpired(context.Context, int64) (executor.LogExpiry, bool) {
	return executor.LogExpiry{}, false
}

// Invalidate forgets cached state another replica changed: "auth" (tokens,
// users, roles), "jobauth" (job tokens of ended attempts), "sched" (pools,
// quotas, grants) or "envs" (environments).
func (s *Service) Invalidate(topic string) { s.core.invalidate(topic) }

// Now is the service's current time (for views that depend on it, such as
// whether a grant has expired).
func (s *Service) Now() time.Time { return s.core.cfg.Clock.Now() }

// invalidate drops the caches of topic (see Service.Invalidate).
func (s *core) invalidate(topic string) {
	switch topic {
	case "auth":
		// The index first: an authentication that reads the new
		// generation then sees the index's end counter moved too, and
		// one that caches under the old generation is not trusted.
		s.jobAuth.forgetAll(&s.auth)
		s.authGen.Add(1)
		s.auth.Clear()
	case "jobauth":
		s.jobAuth.forgetAll(&s.auth)
	case "sched":
		s.schedGen.Add(1)
	case "envs":
		s.envGen.Add(1)
		s.envCache.Clear()
	}
}
