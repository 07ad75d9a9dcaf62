// Package service holds the request-driven use cases: submit, inspect, list and
// cancel jobs, read their logs, explain them, and authenticate callers. Each use
// case runs in the order authenticate → validate → one store transaction →
// wake the control loop. It never talks to executors: the control loop does.
package service

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"trainyard/internal/artifacts"
	"trainyard/internal/authz"
	"trainyard/internal/blob"
	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/jobspec"
	"trainyard/internal/logs"
	"trainyard/internal/secrets"
	"trainyard/internal/store"
)

// Config wires a Service.
type Config struct {
	Store         store.Store
	Clock         clock.Clock
	Logger        *slog.Logger
	ArtifactsRoot string      // outputs go to <root>/<project>/<name>/<job-id>/
	Logs          logs.Layout // where attempt logs live
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
	// cached state changed ("auth": tokens or roles; "sched": pools,
	// quotas, grants); they call Invalidate. CacheTTL, when positive, also
	// bounds how long a cached authentication or admission view is
	// trusted, in case a broadcast is lost.
	Broadcast func(topic string)
	CacheTTL  time.Duration
	// Retention are the policies gc applies to finished jobs' files.
	Retention []artifacts.Policy
	// Alerts sends test notifications; nil: alerting is not running.
	Alerts AlertChannels
	// LatestSample returns the latest resource reading of a running
	// attempt, for why; nil: none are taken.
	LatestSample func(jobID int64, attempt int) (domain.ResourceSample, bool)
	// Blobs keeps code packages (code.go); nil: submit --context is refused.
	Blobs blob.Store
	// MaxCodeBytes bounds an uploaded code package (0: codepkg.DefaultMaxSize).
	MaxCodeBytes int64
	// AuditWitness is the file the server keeps the audit log's head in,
	// outside the store (auditwitness.go); "" keeps none.
	AuditWitness string
	// MultiNode says whether the executor of that name (a pool's
	// executor) runs jobs on more than one node: its Capabilities, asked
	// by admission. Nil: none does.
	MultiNode func(executor string) bool
	// LocalEnvs says jobs run on this machine (the local executor), so an
	// environment's path_prefix directories must exist here to be
	// registered; with remote executors they live on the nodes.
	LocalEnvs bool
}

// Service implements the use cases. Safe for concurrent use.
type Service struct {
	cfg     Config
	limiter failLimiter // failed authentications per client address and token prefix
	// auth caches authenticated tokens (hash → authEntry). authGen is bumped
	// after every change to tokens and roles; an entry read under an older
	// generation is not trusted, so a revocation or a grant made through this
	// server takes effect on the next request; other replicas hear of it
	// through Config.Broadcast, and Config.CacheTTL bounds the rest.
	auth    sync.Map
	authGen atomic.Uint64
	// admitView caches pools, quotas and grants for admission; schedGen
	// invalidates it (see schedulingChanged).
	admitView atomic.Pointer[admissionView]
	schedGen  atomic.Uint64
	// envCache holds environments by name for submit (envVersions).
	envCache sync.Map
	envGen   atomic.Uint64
	// witness is the audit witness this server writes (auditwitness.go).
	witness witnessKeeper
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
	if cfg.Wake == nil {
		cfg.Wake = func() {}
	}
	if cfg.Files == nil {
		cfg.Files = noFiles{}
	}
	return &Service{cfg: cfg}
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

// HashToken returns the stored form of a token secret.
func HashToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// NewTokenSecret returns a fresh random token secret.
func NewTokenSecret() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("read random bytes: %v", err)) // the OS RNG does not fail
	}
	return "ty_" + hex.EncodeToString(b)
}

// SubmitInput is a submit request.
type SubmitInput struct {
	Doc            []byte   // spec document, YAML or JSON
	Set            []string // "key=value" overrides
	IdempotencyKey string
	Code           *domain.CodeRef // the code package to run from (code.go); nil: none
	// Template, when set, names a job template ("name" or "name@version")
	// to expand instead of Doc; Project is the template's project ("":
	// wherever the name is) and Vars sets its variables (templates.go).
	Template string
	Project  string
	Vars     map[string]string
	rerunOf  int64 // the job this submit re-runs (rerun.go); 0: none
	// rerunTemplate is the original's trainyard.template label ("": none),
	// which a re-run keeps and may not change.
	rerunTemplate string
}

// Submit validates the spec and stores the job in state queued. created is
// false when IdempotencyKey matched an earlier submit by the same principal;
// that job is returned unchanged.
func (s *Service) Submit(ctx context.Context, p Principal, in SubmitInput) (job domain.Job, created bool, err error) {
	if len(in.IdempotencyKey) > 200 {
		return domain.Job{}, false, domain.FieldErrors{{Path: "Idempotency-Key", Message: "must be at most 200 characters"}}
	}
	spec, err := s.submitSpec(ctx, p, in) // a spec document or a template: templates.go
	if err != nil {
		return domain.Job{}, false, err
	}
	if err := s.authorize(ctx, p, authz.JobSubmit, authz.Resource{Kind: "job", Project: spec.Project}); err != nil {
		return domain.Job{}, false, submitHint(err, p, spec.Project)
	}
	if err := s.resolveSpecEnv(ctx, &spec); err != nil { // pins spec.Env to name@N: envs.go
		return domain.Job{}, false, err
	}
	// A secret missing now would fail the job late and obscurely: refuse it
	// with the way to create it (secrets.go).
	if err := s.checkSpecSecrets(ctx, spec); err != nil {
		return domain.Job{}, false, err
	}
	if err := s.checkCode(ctx, in.Code); err != nil { // code.go
		return domain.Job{}, false, err
	}
	if err := s.checkPaths(spec); err != nil { // outputs.path and inputs: paths.go
		return domain.Job{}, false, err
	}
	if err := s.admit(ctx, spec); err != nil {
		return domain.Job{}, false, err
	}
	specJSON, hash := jobspec.Canonical(spec)
	// The store fills "{id}" with the new job's id. The record names the
	// spec by its hash: the spec itself may carry values that are no
	// business of the audit log.
	rec := s.audited(ctx, p, authz.JobSubmit, "job/"+store.AuditIDPlaceholder, nil,
		map[string]string{"name": spec.Name, "project": spec.Project, "pool": spec.Pool, "spec_hash": hash})
	nj := store.NewJob{
		Spec: spec, SpecJSON: specJSON, SpecHash: hash,
		Submitter: p.Subject, SubmittedAt: s.cfg.Clock.Now(),
		IdempotencyKey: in.IdempotencyKey,
		OutputDir:      func(id int64) string { return s.outputDir(spec, id) },
		Actor:          p.Actor(),
		Code:           in.Code,
		RerunOf:        in.rerunOf,
	}
	job, created, err = s.cfg.Store.CreateJob(ctx, nj, rec)
	if errors.Is(err, domain.ErrConflict) && in.IdempotencyKey != "" {
		// Another replica stored the same key at the same moment: a second
		// try finds its job and returns it.
		job, created, err = s.cfg.Store.CreateJob(ctx, nj, rec)
	}
	if errors.Is(err, domain.ErrConflict) {
		return domain.Job{}, false, domain.Errorf(domain.ErrConflict, "%v; outputs.path must contain {job_id} so every job writes to its own directory", err)
	}
	if err != nil {
		return domain.Job{}, false, fmt.Errorf("store job: %w", err)
	}
	if created {
		s.cfg.Wake()
	}
	return job, created, nil
}

// outputDir is the job's versioned output directory: the user's path with
// {job_id} filled in (checked by checkOutputPath), or
// <artifacts>/<project>/<name>/<job-id>.
func (s *Service) outputDir(spec domain.Spec, id int64) string {
	ids := strconv.FormatInt(id, 10)
	if spec.Outputs.Path != "" {
		return filepath.Clean(strings.ReplaceAll(spec.Outputs.Path, "{job_id}", ids))
	}
	return filepath.Join(s.cfg.ArtifactsRoot, spec.Project, spec.Name, ids)
}

// JobDetail is a job with its attempts and transitions.
type JobDetail struct {
	Job      domain.Job
	Attempts []domain.Attempt
	Events   []domain.Event
}

// Get returns one job in full.
func (s *Service) Get(ctx context.Context, p Principal, id int64) (JobDetail, error) {
	job, err := s.cfg.Store.GetJob(ctx, id)
	if err != nil {
		return JobDetail{}, jobErr(id, err)
	}
	if err := s.authorize(ctx, p, authz.JobRead, jobResource(job)); err != nil {
		return JobDetail{}, err
	}
	atts, err := s.cfg.Store.ListAttempts(ctx, id)
	if err != nil {
		return JobDetail{}, err
	}
	evs, err := s.cfg.Store.ListEvents(ctx, id)
	if err != nil {
		return JobDetail{}, err
	}
	return JobDetail{Job: job, Attempts: atts, Events: evs}, nil
}

// ListOptions selects a page of jobs, newest first.
type ListOptions struct {
	States   []domain.JobState
	Project  string
	BeforeID int64 // cursor: only jobs with a smaller id
	Limit    int   // 1..1000; 0 means 50
}

// List returns one page of jobs, newest first, and whether more remain.
func (s *Service) List(ctx context.Context, p Principal, o ListOptions) (jobs []domain.Job, more bool, err error) {
	var errs domain.FieldErrors
	for _, st := range o.States {
		if !st.Valid() {
			errs.Add("state", "unknown state %q; use one of queued, held, starting, running, succeeded, failed, canceled", st)
		}
	}
	if o.Limit < 0 || o.Limit > 1000 {
		errs.Add("limit", "must be between 1 and 1000")
	}
	if err := errs.Err(); err != nil {
		return nil, false, err
	}
	if o.Limit == 0 {
		o.Limit = 50
	}
	if err := s.authorize(ctx, p, authz.JobRead, authz.Resource{Kind: "job", Project: o.Project}); err != nil {
		return nil, false, err
	}
	f := store.JobFilter{States: o.States, Project: o.Project, BeforeID: o.BeforeID, Limit: o.Limit + 1}
	if v := authz.VisibleJobs(p); !v.All {
		f.Restrict, f.Projects, f.Submitter = true, v.Projects, v.Submitter
	}
	jobs, err = s.cfg.Store.ListJobs(ctx, f)
	if err != nil {
		return nil, false, err
	}
	if len(jobs) > o.Limit {
		return jobs[:o.Limit], true, nil
	}
	return jobs, false, nil
}

// Cancel cancels a job. A queued or held job is canceled at once; a starting
// or running job is marked, and the control loop stops its process (SIGTERM,
// then SIGKILL after the grace period) before marking it canceled.
func (s *Service) Cancel(ctx context.Context, p Principal, id int64, reason string) (domain.Job, error) {
	if msg := domain.TextProblem(reason, false); msg != "" {
		return domain.Job{}, domain.FieldErrors{{Path: "reason", Message: msg}}
	}
	msg := "canceled by " + p.Subject
	if reason != "" {
		msg += ": " + reason
	}
	now := s.cfg.Clock.Now()
	for i := range 3 { // the job may move between our read and our guarded write
		job, err := s.cfg.Store.GetJob(ctx, id)
		if err != nil {
			return domain.Job{}, jobErr(id, err)
		}
		if i == 0 { // a job's project and submitter never change
			if err := s.authorize(ctx, p, authz.JobCancel, jobResource(job)); err != nil {
				return domain.Job{}, err
			}
		}
		var ch store.Change
		switch {
		case job.State == domain.JobCanceled:
			return job, nil
		case job.State.Terminal():
			return domain.Job{}, domain.Errorf(domain.ErrConflict, "job %d already %s; there is nothing to cancel", id, job.State)
		case job.State == domain.JobQueued || job.State == domain.JobHeld:
			ch = store.Change{JobID: id, Move: domain.MoveCancel().Only(job.State),
				Reason: domain.ReasonCanceledByUser, Message: msg, Actor: p.Actor(), At: now}
		default:
			if job.CancelRequested {
				return job, nil
			}
			ch = store.Change{JobID: id, In: []domain.JobState{job.State}, RequestCancel: true, SetReason: true,
				Reason: domain.ReasonCanceledByUser, Message: "cancel requested; " + msg, Actor: p.Actor(), At: now}
		}
		after := map[string]any{"state": ch.To()}
		if ch.RequestCancel {
			after = map[string]any{"state": job.State, "cancel_requested": true}
		}
		ch.Audit = new(s.audited(ctx, p, authz.JobCancel, "job/"+strconv.FormatInt(id, 10), map[string]any{"state": job.State}, after))
		errs, err := s.cfg.Store.Apply(ctx, []store.Change{ch})
		if err != nil {
			return domain.Job{}, fmt.Errorf("cancel job %d: %w", id, err)
		}
		if errors.Is(errs[0], domain.ErrConflict) {
			continue
		}
		if errs[0] != nil {
			return domain.Job{}, jobErr(id, errs[0])
		}
		s.cfg.Wake()
		return s.cfg.Store.GetJob(ctx, id)
	}
	return domain.Job{}, domain.Errorf(domain.ErrConflict, "job %d kept changing state; try again", id)
}

func jobErr(id int64, err error) error {
	if errors.Is(err, domain.ErrNotFound) {
		return domain.Errorf(domain.ErrNotFound, "job %d does not exist; list jobs with: trainyard ls", id)
	}
	return err
}

// submitHint adds to a refused submit the projects the caller may submit
// to: a spec without project: runs in project default, which a member of
// one team is usually not in.
func submitHint(err error, p Principal, project string) error {
	var names []string
	for _, pr := range p.Projects {
		if pr.Project != project && authz.Decide(p, authz.JobSubmit, authz.Resource{Kind: "job", Project: pr.Project}).Allow &&
			!slices.Contains(names, pr.Project) {
			names = append(names, pr.Project)
		}
	}
	if len(names) == 0 {
		return err
	}
	return domain.Errorf(domain.ErrForbidden, "%v; you may submit to project %s: set project: %s in the spec (or --set project=%s)",
		err, strings.Join(names, ", "), names[0], names[0])
}
