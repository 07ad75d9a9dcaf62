package service

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"trainyard/internal/authz"
	"trainyard/internal/cost"
	"trainyard/internal/domain"
	"trainyard/internal/jobspec"
	"trainyard/internal/store"
)

// JobService submits, inspects, lists, cancels, holds, releases, explains
// and re-runs jobs, reads their logs and metrics and keeps their code
// packages.
type JobService struct {
	*core
	st        JobStore
	envs      *EnvService
	secrets   *SecretService
	templates *TemplateService
	pools     *PoolService
	cost      *CostService
}

// JobStore is what the job use cases read and write: jobs, their attempts,
// events and state changes, and, for why, their health, metrics, alerts
// and checkpoints.
type JobStore interface {
	AppendPoints(ctx context.Context, points []domain.MetricPoint) error
	Apply(ctx context.Context, changes []store.Change) ([]error, error)
	AttemptHealth(ctx context.Context, jobID int64, attempt int) (store.AttemptHealth, error)
	AttemptTimes(ctx context.Context, jobIDs []int64) ([]store.AttemptTime, error)
	CreateJob(ctx context.Context, p store.NewJob, audit domain.AuditRecord) (job domain.Job, created bool, err error)
	GetJob(ctx context.Context, id int64) (domain.Job, error)
	JobDetail(ctx context.Context, id int64) (store.JobDetail, error)
	SameSpecJobs(ctx context.Context, submitter, specHash string, since time.Time) (newest []domain.Job, more bool, err error)
	RecentUsage(ctx context.Context, submitter, name string) ([]store.RunUsage, error)
	ListAlerts(ctx context.Context, f store.AlertFilter) ([]domain.Alert, error)
	ListAttempts(ctx context.Context, jobID int64) ([]domain.Attempt, error)
	ListCheckpoints(ctx context.Context, jobID int64, withDeleted bool) ([]domain.CheckpointRecord, error)
	ListJobs(ctx context.Context, f store.JobFilter) ([]domain.Job, error)
	QueryMetrics(ctx context.Context, jobID int64, key string, maxPoints int) (map[string][]domain.MetricPoint, error)
	store.Workflows
}

var _ JobStore = store.Store(nil)

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
	// AllowDuplicate submits the job even when it repeats a live or recent
	// job of the same user and spec on a server that refuses repeats.
	AllowDuplicate bool
	rerunOf        int64 // the job this submit re-runs (rerun.go); 0: none
	sweep          bool  // a sweep's submit (workflow.go): the spec may have sweep:
	// rerunTemplate is the original's trainyard.template label ("": none),
	// which a re-run keeps and may not change.
	rerunTemplate string
}

// prepare resolves and checks what a submit asks for, everything but
// storing it: the spec (from its document or template), the permission, its
// environment, secrets, code and paths, and its admission to the pool.
func (s *JobService) prepare(ctx context.Context, p Principal, in SubmitInput) (domain.Spec, error) {
	if len(in.IdempotencyKey) > 200 {
		return domain.Spec{}, domain.FieldErrors{{Path: "Idempotency-Key", Message: "must be at most 200 characters"}}
	}
	spec, err := s.templates.submitSpec(ctx, p, in) // a spec document or a template: templates.go
	if err != nil {
		return domain.Spec{}, err
	}
	if err := s.authorize(ctx, p, authz.JobSubmit, authz.Resource{Kind: "job", Project: spec.Project}); err != nil {
		return domain.Spec{}, submitHint(err, p, spec.Project)
	}
	if spec.Sweep != nil && !in.sweep {
		return domain.Spec{}, domain.FieldErrors{{Path: "sweep", Message: "makes this a sweep, which this route cannot store; submit it to POST /api/v1/sweeps (trainyard submit does so), or remove sweep: to submit one job"}}
	}
	if err := s.checkWorkflow(ctx, p, &spec, in.rerunOf != 0); err != nil { // after:, from_job: workflow.go
		return domain.Spec{}, err
	}
	if err := s.envs.resolveSpecEnv(ctx, &spec); err != nil { // pins spec.Env to name@N: envs.go
		return domain.Spec{}, err
	}
	// A secret missing now would fail the job late and obscurely: refuse it
	// with the way to create it (secrets.go).
	if err := s.secrets.checkSpecSecrets(ctx, spec); err != nil {
		return domain.Spec{}, err
	}
	// Channels and a mail relay the server lacks (notify.go).
	if err := s.checkSpecNotify(spec); err != nil {
		return domain.Spec{}, err
	}
	if err := s.checkCode(ctx, in.Code); err != nil { // code.go
		return domain.Spec{}, err
	}
	if err := s.checkPaths(spec); err != nil { // outputs.path and inputs: paths.go
		return domain.Spec{}, err
	}
	if err := s.checkResumeFrom(ctx, p, spec); err != nil { // resume: resumefrom.go
		return domain.Spec{}, err
	}
	if err := s.pools.admit(ctx, spec); err != nil {
		return domain.Spec{}, err
	}
	return spec, nil
}

// Submit validates the spec and stores the job in state queued. created is
// false when IdempotencyKey matched an earlier submit by the same principal;
// that job is returned unchanged.
func (s *JobService) Submit(ctx context.Context, p Principal, in SubmitInput) (job domain.Job, created bool, err error) {
	spec, err := s.prepare(ctx, p, in)
	if err != nil {
		return domain.Job{}, false, err
	}
	return s.storeJob(ctx, p, in, spec)
}

// SubmitResult is a stored submit: the job, whether this call created it,
// and what its submitter should know about it.
type SubmitResult struct {
	Job      domain.Job
	Created  bool
	Warnings []string
}

// DuplicateWindow is how long after a submit the same user's submit of the
// same spec is flagged as a likely repeat; a live job of that spec is
// flagged however old.
const DuplicateWindow = 10 * time.Minute

// Submission is Submit for a person at a client: a new job that repeats a
// live or recent job of the same user and spec (the same snapshot hash)
// is stored, with a warning naming the earlier jobs and how to cancel it.
func (s *JobService) Submission(ctx context.Context, p Principal, in SubmitInput) (SubmitResult, error) {
	spec, err := s.prepare(ctx, p, in)
	if err != nil {
		return SubmitResult{}, err
	}
	specJSON, hash := jobspec.Canonical(spec)
	now := s.cfg.Clock.Now()
	since := now.Add(-DuplicateWindow)
	var (
		job          domain.Job
		created      bool
		same         []domain.Job
		more, looked bool
	)
	if s.cfg.DuplicateSubmits == DuplicatesRefuse && !in.AllowDuplicate {
		// The repeats decide whether the job is stored: look first.
		if same, more, err = s.st.SameSpecJobs(ctx, p.Subject, hash, since); err != nil {
			return SubmitResult{}, fmt.Errorf("look for repeated submits: %w", err)
		}
		if len(same) > 0 && !retried(same, in.IdempotencyKey) {
			return SubmitResult{}, duplicateRefusal(same, now)
		}
		job, created, err = s.storeCanonical(ctx, p, in, spec, specJSON, hash)
		looked = true
	} else if st, ok := s.st.(store.RepeatLooker); ok {
		// The repeats only warn: the store reads them in the
		// transaction that stores the job.
		var rep store.Repeats
		job, created, err = s.storeLooking(ctx, p, in, spec, specJSON, hash, func(nj store.NewJob, rec domain.AuditRecord) (domain.Job, bool, error) {
			j, c, r, err := st.CreateJobLooking(ctx, nj, rec, since)
			rep = r
			return j, c, err
		})
		if rep.Err != nil {
			s.cfg.Logger.Warn("look for repeated submits", "err", rep.Err)
		}
		same, more, looked = rep.Jobs, rep.More, rep.Err == nil
	} else {
		// The repeats only warn: look while the job is stored, so the
		// submit waits for the slower of the two rather than for both.
		type found struct {
			same []domain.Job
			more bool
			err  error
		}
		look := make(chan found, 1)
		go func() {
			var f found
			f.same, f.more, f.err = s.st.SameSpecJobs(ctx, p.Subject, hash, since)
			look <- f
		}()
		job, created, err = s.storeCanonical(ctx, p, in, spec, specJSON, hash)
		f := <-look
		if f.err != nil {
			s.cfg.Logger.Warn("look for repeated submits", "err", f.err)
		}
		// The look may have seen the new job: it is no repeat of itself.
		same = slices.DeleteFunc(f.same, func(j domain.Job) bool { return j.ID == job.ID })
		more, looked = f.more, f.err == nil
	}
	if err != nil || !created {
		return SubmitResult{Job: job, Created: created}, err
	}
	r := SubmitResult{Job: job, Created: true}
	if looked && len(same) > 0 {
		r.Warnings = append(r.Warnings, duplicateWarning(job, same, more, now))
	}
	if w := s.rightSizing(ctx, p, spec); w != "" {
		r.Warnings = append(r.Warnings, w)
	}
	return r, nil
}

// Duplicate-submit policies (Config.DuplicateSubmits).
const (
	DuplicatesWarn   = "warn"   // store the job, with a warning (the default)
	DuplicatesRefuse = "refuse" // refuse it unless the submit allows it
)

// retried reports whether one of same is the job an earlier try of this
// keyed submit stored: that repeat answers with it, never a refusal.
func retried(same []domain.Job, key string) bool {
	if key == "" {
		return false
	}
	for _, j := range same {
		if j.IdempotencyKey == key {
			return true
		}
	}
	return false
}

// duplicateRefusal says why a repeated submit was refused and how to
// submit it anyway.
func duplicateRefusal(same []domain.Job, now time.Time) error {
	j := same[0]
	return domain.Errorf(domain.ErrConflict, "not submitted: it has the same spec as your job %d (%s, submitted %s ago), and this server refuses repeated submits; cancel that one first (trainyard cancel %d), or submit again with --allow-duplicate if another run is meant",
		j.ID, j.State, domain.FormatDuration(now.Sub(j.SubmittedAt).Round(time.Second)), j.ID)
}

// duplicateWarning tells the submitter of job that it repeats same (newest
// first, never empty), and more when there are more.
func duplicateWarning(job domain.Job, same []domain.Job, more bool, now time.Time) string {
	// Built by hand: nearly every submit of a script or sweep says it.
	id := strconv.FormatInt(job.ID, 10)
	var b strings.Builder
	b.Grow(112 + 48*len(same))
	b.WriteString("job " + id + " has the same spec as your ")
	for i, j := range same {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("job ")
		b.WriteString(strconv.FormatInt(j.ID, 10))
		b.WriteString(" (")
		b.WriteString(string(j.State))
		b.WriteString(", submitted ")
		b.WriteString(domain.FormatDuration(now.Sub(j.SubmittedAt).Round(time.Second)))
		b.WriteString(" ago)")
	}
	if more {
		b.WriteString(", and more")
	}
	b.WriteString("; if it is a repeat, cancel it with: trainyard cancel " + id)
	return b.String()
}

// storeJob stores the job of a prepared submit.
func (s *JobService) storeJob(ctx context.Context, p Principal, in SubmitInput, spec domain.Spec) (job domain.Job, created bool, err error) {
	specJSON, hash := jobspec.Canonical(spec)
	return s.storeCanonical(ctx, p, in, spec, specJSON, hash)
}

// storeCanonical is storeJob given the spec's canonical form and hash
// (jobspec.Canonical).
func (s *JobService) storeCanonical(ctx context.Context, p Principal, in SubmitInput, spec domain.Spec, specJSON []byte, hash string) (job domain.Job, created bool, err error) {
	return s.storeLooking(ctx, p, in, spec, specJSON, hash, func(nj store.NewJob, rec domain.AuditRecord) (domain.Job, bool, error) {
		return s.st.CreateJob(ctx, nj, rec)
	})
}

// storeLooking is storeCanonical storing with create (the store's
// CreateJob, or one that also looks for repeats).
func (s *JobService) storeLooking(ctx context.Context, p Principal, in SubmitInput, spec domain.Spec, specJSON []byte, hash string,
	create func(store.NewJob, domain.AuditRecord) (domain.Job, bool, error)) (job domain.Job, created bool, err error) {
	// The store fills "{id}" with the new job's id. The record names the
	// spec by its hash: the spec itself may carry values that are no
	// business of the audit log.
	rec := s.audited(ctx, p, authz.JobSubmit, "job/"+store.AuditIDPlaceholder, nil,
		submitSummary{Name: spec.Name, Pool: spec.Pool, Project: spec.Project, SpecHash: hash})
	// The directory needs three of the spec's fields, not a copy of it.
	outputs, project, name := spec.Outputs.Path, spec.Project, spec.Name
	nj := store.NewJob{
		Spec: spec, SpecJSON: specJSON, SpecHash: hash,
		Submitter: p.Subject, SubmittedAt: s.cfg.Clock.Now(),
		IdempotencyKey: in.IdempotencyKey,
		OutputDir:      func(id int64) string { return s.jobDir(outputs, project, name, id) },
		Actor:          p.Actor(),
		Code:           in.Code,
		RerunOf:        in.rerunOf,
		Held:           waitHold(spec.After), // workflow.go
		Waits:          spec.After,
	}
	job, created, err = create(nj, rec)
	if errors.Is(err, domain.ErrConflict) && in.IdempotencyKey != "" {
		// Another replica stored the same key at the same moment: a second
		// try finds its job and returns it.
		job, created, err = create(nj, rec)
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

// submitSummary is the After of a submit's audit record: the JSON of
// map[string]string with these keys, which it replaces (a struct encodes
// without sorting keys or building a map), so its fields stay in the
// keys' order.
type submitSummary struct {
	Name     string `json:"name"`
	Pool     string `json:"pool"`
	Project  string `json:"project"`
	SpecHash string `json:"spec_hash"`
}

// jobDir is the versioned output directory of job id of a spec with
// outputs.path outputs, project and name: the user's path with {job_id}
// filled in (checked by checkOutputPath), or
// <artifacts>/<project>/<name>/<job-id>.
func (s *JobService) jobDir(outputs, project, name string, id int64) string {
	ids := strconv.FormatInt(id, 10)
	if outputs != "" {
		return filepath.Clean(strings.ReplaceAll(outputs, "{job_id}", ids))
	}
	return filepath.Join(s.cfg.ArtifactsRoot, project, name, ids)
}

// JobDetail is a job with its attempts and transitions.
type JobDetail struct {
	Job      domain.Job
	Attempts []domain.Attempt
	Events   []domain.Event
	// Cost is what its attempts cost so far at its pool's rates, and
	// CostPerHour what its running attempt costs per hour (0 when none
	// runs); Priced is false when the pool has no rates.
	Cost, CostPerHour domain.Money
	Priced            bool
	// Sizing is its request against what its ended attempts used (nil
	// until one ran Config.RightSizeMinRun).
	Sizing *Sizing
}

// Get returns one job in full.
func (s *JobService) Get(ctx context.Context, p Principal, id int64) (JobDetail, error) {
	d, err := s.Show(ctx, p, id)
	if err != nil {
		return JobDetail{}, err
	}
	if err := json.Unmarshal(d.Job.SpecJSON, &d.Job.Spec); err != nil {
		return JobDetail{}, fmt.Errorf("decode config snapshot %s of job %d: %w", d.Job.SpecHash, id, err)
	}
	return d, nil
}

// Show is Get without decoding the job's spec (Job.Spec is zero;
// Job.SpecJSON holds it): what GET /api/v1/jobs/{id} answers, read from
// the store in one statement.
func (s *JobService) Show(ctx context.Context, p Principal, id int64) (JobDetail, error) {
	sd, err := s.st.JobDetail(ctx, id)
	if err != nil {
		return JobDetail{}, jobErr(id, err)
	}
	job, atts := sd.Job, sd.Attempts
	if err := s.authorize(ctx, p, authz.JobRead, jobResource(job)); err != nil {
		return JobDetail{}, err
	}
	d := JobDetail{Job: job, Attempts: atts, Events: sd.Events}
	// Each attempt at the rates in force while it ran.
	var ledger cost.Ledger
	for _, c := range sd.Rates {
		ledger.Add(c.Pool, c.From, c.Rates)
	}
	if ledger.Priced(job.Pool) {
		spans := make([]cost.Span, len(atts))
		for i, a := range atts {
			spans[i] = cost.Span{JobID: id, Attempt: a.Number, Pool: job.Pool, Resources: job.Resources,
				Start: a.StartedAt, End: a.FinishedAt, State: a.State}
		}
		rep := cost.Report(spans, ledger, s.cfg.Clock.Now(), time.Time{}, "job")
		d.Priced, d.Cost, d.CostPerHour = true, rep.Total.Cost, rep.Total.RunningPerHour
	}
	d.Sizing = sizing(job, atts, ledger.At(job.Pool, s.cfg.Clock.Now()), s.cfg.RightSizeMinRun)
	return d, nil
}

// JobCost is what a job has cost so far; Priced is false for a job of a
// pool that never had rates (it shows no cost).
type JobCost struct {
	Cost   domain.Money
	Priced bool
}

// Costs prices jobs as Get does (their attempts at the rates in force
// while they ran, until now) in two reads for them all: their pools' rate
// history, then the attempts of those priced that started. The answer is
// in the order of jobs. jobs are what List or Get gave the caller, who may
// therefore see their cost.
func (s *JobService) Costs(ctx context.Context, jobs []domain.Job) ([]JobCost, error) {
	var pools []string
	for i := range jobs {
		if p := jobs[i].Pool; !slices.Contains(pools, p) {
			pools = append(pools, p)
		}
	}
	if len(pools) == 0 {
		return nil, nil
	}
	ledger, err := store.Ledger(ctx, s.cost.st, pools...)
	if err != nil {
		return nil, err
	}
	out := make([]JobCost, len(jobs))
	// started holds the jobs to price by id, to meet the attempts in the
	// order the store gives them (by job id).
	type at struct {
		id  int64
		job int
	}
	started := make([]at, 0, len(jobs))
	for i := range jobs {
		j := &jobs[i]
		if ledger.Priced(j.Pool) {
			out[i].Priced = true
			if j.Attempts > 0 {
				started = append(started, at{j.ID, i})
			}
		}
	}
	slices.SortFunc(started, func(a, b at) int { return cmp.Compare(a.id, b.id) })
	ids := make([]int64, len(started))
	for i, a := range started {
		ids[i] = a.id
	}
	times, err := s.st.AttemptTimes(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("read the attempts of %d jobs: %w", len(ids), err)
	}
	now := s.cfg.Clock.Now()
	var spans []cost.Span
	k := 0 // started[k] is the job of times[i], or the first past it
	for i, a := range times {
		for k < len(started) && started[k].id < a.JobID {
			k++
		}
		if k == len(started) || started[k].id != a.JobID {
			continue // not asked for
		}
		j := &jobs[started[k].job]
		spans = append(spans, cost.Span{JobID: a.JobID, Attempt: a.Attempt, Pool: j.Pool, Resources: j.Resources,
			Start: a.StartedAt, End: a.FinishedAt})
		if i+1 == len(times) || times[i+1].JobID != a.JobID {
			spent := cost.Spent(spans, ledger, now)
			for ; k < len(started) && started[k].id == a.JobID; k++ { // the same job twice on a page
				out[started[k].job].Cost = spent
			}
			spans = spans[:0]
		}
	}
	return out, nil
}

// ListOptions selects a page of jobs, newest first. Empty fields select
// every job.
type ListOptions struct {
	States   []domain.JobState
	Project  string
	User     string // only jobs this user submitted
	Pool     string // only jobs of this pool
	Name     string // only jobs whose name holds this, in either case (ASCII letters)
	BeforeID int64  // cursor: only jobs with a smaller id
	Limit    int    // 1..1000; 0 means DefaultListLimit
	Sweep    int64  // only the members of this sweep; 0: all jobs
	// Into is lent to the store as store.JobFilter.Into: the jobs
	// returned may be decoded into it.
	Into []domain.Job
}

// DefaultListLimit is the page size of a list that names none.
const DefaultListLimit = 50

// maxListName bounds ListOptions.Name, in characters: longer than any job
// name, so a longer one could match nothing.
const maxListName = 200

// maxListUser bounds ListOptions.User, in characters.
const maxListUser = 200

// List returns one page of jobs, newest first, and whether more remain.
func (s *JobService) List(ctx context.Context, p Principal, o ListOptions) (jobs []domain.Job, more bool, err error) {
	var errs domain.FieldErrors
	for _, st := range o.States {
		if !st.Valid() {
			errs.Add("state", "unknown state %q; use one of queued, held, starting, running, succeeded, failed, canceled", st)
		}
	}
	if o.Limit < 0 || o.Limit > 1000 {
		errs.Add("limit", "must be between 1 and 1000")
	}
	checkListText(&errs, "user", o.User, maxListUser, "a user name, such as alice")
	if o.Pool != "" && !nameRule.MatchString(o.Pool) {
		errs.Add("pool", "%q is not a valid pool name; %s (list pools with: trainyard pool ls)", o.Pool, nameRuleText)
	}
	checkListText(&errs, "name", o.Name, maxListName, "a part of a job name, such as resnet")
	if err := errs.Err(); err != nil {
		return nil, false, err
	}
	if o.Limit == 0 {
		o.Limit = DefaultListLimit
	}
	if err := s.authorize(ctx, p, authz.JobRead, authz.Resource{Kind: "job", Project: o.Project}); err != nil {
		return nil, false, err
	}
	if o.Sweep < 0 {
		errs.Add("sweep", "must be a sweep id (a positive number), got %d", o.Sweep)
		return nil, false, errs.Err()
	}
	f := store.JobFilter{States: o.States, Project: o.Project, Owner: o.User, Pool: o.Pool, NameContains: o.Name,
		BeforeID: o.BeforeID, Limit: o.Limit + 1, Sweep: o.Sweep, Into: o.Into}
	if v := authz.VisibleJobs(p); !v.All {
		f.Restrict, f.Projects, f.Submitter = true, v.Projects, v.Submitter
	}
	jobs, err = s.st.ListJobs(ctx, f)
	if err != nil {
		return nil, false, err
	}
	if len(jobs) > o.Limit {
		return jobs[:o.Limit], true, nil
	}
	return jobs, false, nil
}

// checkListText checks a list filter's text: one line of plain text of
// at most max characters; example says what to give instead.
func checkListText(errs *domain.FieldErrors, path, v string, max int, example string) {
	if msg := domain.TextProblem(v, false); msg != "" {
		errs.Add(path, "%s", msg)
	} else if n := utf8.RuneCountInString(v); n > max {
		errs.Add(path, "is %d characters long; use at most %d, %s", n, max, example)
	}
}

// Cancel cancels a job. A queued or held job is canceled at once; a starting
// or running job is marked, and the control loop stops its process (SIGTERM,
// then SIGKILL after the grace period) before marking it canceled.
func (s *JobService) Cancel(ctx context.Context, p Principal, id int64, reason string) (domain.Job, error) {
	if msg := domain.TextProblem(reason, false); msg != "" {
		return domain.Job{}, domain.FieldErrors{{Path: "reason", Message: msg}}
	}
	msg := "canceled by " + p.Subject
	if reason != "" {
		msg += ": " + reason
	}
	now := s.cfg.Clock.Now()
	return s.changeJob(ctx, p, id, authz.JobCancel, "cancel", func(job domain.Job) (*store.Change, any, error) {
		switch {
		case job.State == domain.JobCanceled:
			return nil, nil, nil
		case job.State.Terminal():
			return nil, nil, domain.Errorf(domain.ErrConflict, "job %d already %s; there is nothing to cancel", id, job.State)
		case job.State == domain.JobQueued || job.State == domain.JobHeld:
			return &store.Change{JobID: id, Move: domain.MoveCancel().Only(job.State),
				Reason: domain.ReasonCanceledByUser, Message: msg, Actor: p.Actor(), At: now}, map[string]any{"state": domain.JobCanceled}, nil
		case job.CancelRequested:
			return nil, nil, nil
		}
		return &store.Change{JobID: id, In: []domain.JobState{job.State}, RequestCancel: true, SetReason: true,
				Reason: domain.ReasonCanceledByUser, Message: "cancel requested; " + msg, Actor: p.Actor(), At: now},
			map[string]any{"state": job.State, "cancel_requested": true}, nil
	})
}

// changeJob makes one guarded change to job id: decide, given the job as
// read, returns the change and the audit record's "after" (or no change,
// when the job is already where the caller wants it: changeJob returns it
// as is). The caller must be allowed action on the job. A job that moved
// between the read and the guarded write is read again, up to three times.
func (s *JobService) changeJob(ctx context.Context, p Principal, id int64, action authz.Action, verb string,
	decide func(job domain.Job) (*store.Change, any, error)) (domain.Job, error) {
	for i := range 3 {
		job, err := s.st.GetJob(ctx, id)
		if err != nil {
			return domain.Job{}, jobErr(id, err)
		}
		if i == 0 { // a job's project and submitter never change
			if err := s.authorize(ctx, p, action, jobResource(job)); err != nil {
				return domain.Job{}, err
			}
		}
		ch, after, err := decide(job)
		if err != nil || ch == nil {
			return job, err
		}
		ch.Audit = new(s.audited(ctx, p, action, "job/"+strconv.FormatInt(id, 10), map[string]any{"state": job.State}, after))
		errs, err := s.st.Apply(ctx, []store.Change{*ch})
		if err != nil {
			return domain.Job{}, fmt.Errorf("%s job %d: %w", verb, id, err)
		}
		if errors.Is(errs[0], domain.ErrConflict) {
			continue
		}
		if errs[0] != nil {
			return domain.Job{}, jobErr(id, errs[0])
		}
		s.cfg.Wake()
		return s.st.GetJob(ctx, id)
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
