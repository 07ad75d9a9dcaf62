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
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/jobspec"
	"trainyard/internal/logs"
	"trainyard/internal/store"
)

// Principal is an authenticated caller.
type Principal struct {
	Subject string // user name
	Role    string
	TokenID int64
}

// Actor is how the principal appears in transitions and audit records.
func (p Principal) Actor() string { return "user:" + p.Subject }

// Config wires a Service.
type Config struct {
	Store         store.Store
	Clock         clock.Clock
	Logger        *slog.Logger
	ArtifactsRoot string      // outputs go to <root>/<project>/<name>/<job-id>/
	Logs          logs.Layout // where attempt logs live
	// Wake nudges the control loop after a change it must act on.
	Wake func()
	// Queue returns the scheduler's current queue (see Service.Queue); nil
	// means no control loop runs and every queue is empty.
	Queue QueueFunc
}

// Service implements the use cases. Safe for concurrent use.
type Service struct {
	cfg    Config
	tokens sync.Map // hash → cachedToken
}

type cachedToken struct {
	tok     store.Token
	expires time.Time
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
	return &Service{cfg: cfg}
}

// tokenCacheTTL bounds how long a looked-up token is trusted without asking
// the store again.
const tokenCacheTTL = 10 * time.Second

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

// Authenticate resolves a bearer token to a principal.
func (s *Service) Authenticate(ctx context.Context, secret string) (Principal, error) {
	if secret == "" {
		return Principal{}, domain.Errorf(domain.ErrUnauthorized, "no token given; send an Authorization: Bearer <token> header")
	}
	now := s.cfg.Clock.Now()
	hash := HashToken(secret)
	var tok store.Token
	if c, ok := s.tokens.Load(hash); ok && now.Before(c.(cachedToken).expires) {
		tok = c.(cachedToken).tok
	} else {
		t, err := s.cfg.Store.TokenByHash(ctx, hash)
		if errors.Is(err, domain.ErrNotFound) {
			return Principal{}, domain.Errorf(domain.ErrUnauthorized, "the token is not known; check TRAINYARD_TOKEN or your config file")
		}
		if err != nil {
			return Principal{}, err
		}
		tok = t
		s.tokens.Store(hash, cachedToken{tok: t, expires: now.Add(tokenCacheTTL)})
	}
	if !tok.RevokedAt.IsZero() {
		return Principal{}, domain.Errorf(domain.ErrUnauthorized, "the token was revoked; ask an admin for a new one")
	}
	if !tok.ExpiresAt.IsZero() && !now.Before(tok.ExpiresAt) {
		return Principal{}, domain.Errorf(domain.ErrUnauthorized, "the token expired at %s; ask an admin for a new one", tok.ExpiresAt.Format(time.RFC3339))
	}
	return Principal{Subject: tok.Subject, Role: tok.Role, TokenID: tok.ID}, nil
}

// Bootstrap creates the first admin token when the store has none and returns
// its secret; it returns "" when tokens already exist.
func (s *Service) Bootstrap(ctx context.Context) (string, error) {
	n, err := s.cfg.Store.CountTokens(ctx)
	if err != nil || n > 0 {
		return "", err
	}
	secret := NewTokenSecret()
	_, err = s.cfg.Store.CreateToken(ctx, store.Token{Name: "bootstrap", Subject: "admin", Role: "admin",
		Hash: HashToken(secret), CreatedAt: s.cfg.Clock.Now()})
	if err != nil {
		return "", fmt.Errorf("create bootstrap token: %w", err)
	}
	return secret, nil
}

// SubmitInput is a submit request.
type SubmitInput struct {
	Doc            []byte   // spec document, YAML or JSON
	Set            []string // "key=value" overrides
	IdempotencyKey string
}

// Submit validates the spec and stores the job in state queued. created is
// false when IdempotencyKey matched an earlier submit by the same principal;
// that job is returned unchanged.
func (s *Service) Submit(ctx context.Context, p Principal, in SubmitInput) (job domain.Job, created bool, err error) {
	if len(in.IdempotencyKey) > 200 {
		return domain.Job{}, false, domain.FieldErrors{{Path: "Idempotency-Key", Message: "must be at most 200 characters"}}
	}
	spec, err := jobspec.Load(in.Doc, in.Set)
	if err != nil {
		return domain.Job{}, false, err
	}
	if len(spec.Secrets) > 0 {
		// Running the job without the values it names would fail late and
		// obscurely; refuse it now with the same error an unknown secret gets.
		var errs domain.FieldErrors
		for i, name := range spec.Secrets {
			errs.Add(fmt.Sprintf("secrets[%d]", i), "no secret named %s is stored on this server; remove it from the spec (this server has no secret store yet)", name)
		}
		return domain.Job{}, false, errs
	}
	if err := s.admit(ctx, spec); err != nil {
		return domain.Job{}, false, err
	}
	specJSON, hash := jobspec.Canonical(spec)
	job, created, err = s.cfg.Store.CreateJob(ctx, store.NewJob{
		Spec: spec, SpecJSON: specJSON, SpecHash: hash,
		Submitter: p.Subject, SubmittedAt: s.cfg.Clock.Now(),
		IdempotencyKey: in.IdempotencyKey,
		OutputDir:      func(id int64) string { return s.outputDir(spec, id) },
		Actor:          p.Actor(),
	})
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
// {job_id} filled in, or <artifacts>/<project>/<name>/<job-id>.
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
	jobs, err = s.cfg.Store.ListJobs(ctx, store.JobFilter{States: o.States, Project: o.Project, BeforeID: o.BeforeID, Limit: o.Limit + 1})
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
	msg := "canceled by " + p.Subject
	if reason != "" {
		msg += ": " + reason
	}
	now := s.cfg.Clock.Now()
	for range 3 { // the job may move between our read and our guarded write
		job, err := s.cfg.Store.GetJob(ctx, id)
		if err != nil {
			return domain.Job{}, jobErr(id, err)
		}
		var ch store.Change
		switch {
		case job.State == domain.JobCanceled:
			return job, nil
		case job.State.Terminal():
			return domain.Job{}, domain.Errorf(domain.ErrConflict, "job %d already %s; there is nothing to cancel", id, job.State)
		case job.State == domain.JobQueued || job.State == domain.JobHeld:
			ch = store.Change{JobID: id, From: []domain.JobState{job.State}, To: domain.JobCanceled,
				Reason: domain.ReasonCanceledByUser, Message: msg, Actor: p.Actor(), At: now}
		default:
			if job.CancelRequested {
				return job, nil
			}
			ch = store.Change{JobID: id, From: []domain.JobState{job.State}, RequestCancel: true, SetReason: true,
				Reason: domain.ReasonCanceledByUser, Message: "cancel requested; " + msg, Actor: p.Actor(), At: now}
		}
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
