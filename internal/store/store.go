// Package store defines the metadata store's interfaces, owned by the core and
// implemented by one package per backend (sqlite, postgres). Every backend runs
// the same conformance suite, storetest.Exercise.
//
// Interfaces are small and split by aggregate. State changes are guarded: a
// change names the states it expects, and loses cleanly (ErrConflict) instead of
// overwriting a newer state. A mutation that must be audited takes its
// audit record as a parameter (a job state change as Change.Audit) and
// appends it in the same transaction: no record travels in a context, and
// none can be forgotten. This package imports domain and the standard
// library only.
package store

import (
	"context"
	"slices"
	"time"

	"trainyard/internal/domain"
)

// Re-exported sentinels, so adapters and callers need only this package.
var (
	ErrNotFound = domain.ErrNotFound
	ErrConflict = domain.ErrConflict
	ErrInvalid  = domain.ErrInvalid
	// ErrUnavailable marks a failure to reach the database at all
	// (connection refused or reset, a server shutting down or starting
	// up, a lock or disk that does not answer): nothing was decided, and
	// the call may be repeated once the database is back.
	ErrUnavailable = domain.ErrUnavailable
)

// Store is a complete backend.
type Store interface {
	Jobs
	Tokens
	Users // identity: see the Users block below
	Pools
	Requests
	Secrets   // sealed secret values: secrets.go
	Audits    // the tamper-evident audit log: audit.go
	Metrics   // training metrics and attempt health: training.go (contract addition)
	Alerts    // alerts and their notification outbox: alerts.go
	Artifacts // manifests of outputs and checkpoints: artifacts.go
	// Templates are job templates: templates.go.
	Templates
	// Envs are software environments and their versions: envs.go.
	Envs
	// Workflows are sweeps and dependencies: workflow.go.
	Workflows
	// Notifications are job-end notifications and users' defaults: notify.go.
	Notifications
	// Ping checks the backend is reachable (used by /readyz).
	Ping(ctx context.Context) error
	// Kind names the backend: "sqlite" or "postgres".
	Kind() string
	Close() error
}

// NewJob is the input of CreateJob.
type NewJob struct {
	Spec        domain.Spec
	SpecJSON    []byte // canonical JSON of Spec
	SpecHash    string // "sha256:<hex>" of SpecJSON
	Submitter   string
	SubmittedAt time.Time
	// IdempotencyKey, when not empty, is unique per Submitter: a second
	// CreateJob with the same pair returns the first job and created=false.
	IdempotencyKey string
	// OutputDir computes the job's output directory from its new id. The
	// directory is stored on the job and is unique across all jobs: a clash
	// fails the create with ErrConflict and stores nothing.
	OutputDir func(id int64) string
	Actor     string // recorded on the submit event, e.g. "user:admin"
	// Code, when set, is the code package the job runs from; it is stored
	// with the job in the same transaction and returned by GetJob.
	Code *domain.CodeRef
	// RerunOf, when not 0, is the job this one re-runs; stored on the job.
	RerunOf int64
	// Held, when set, stores the job held (not queued) with this reason
	// and message: a job waiting for its dependencies or for its sweep's
	// max_parallel.
	Held *Hold
	// Sweep, when not 0, is the sweep the job is a member of.
	Sweep int64
	// Waits are the job's dependencies (its spec's after:), stored with it
	// for WaitersOn.
	Waits []domain.Dependency
}

// Hold is the state a job is created in when it must wait.
type Hold struct {
	Reason  domain.Reason
	Message string
}

// JobFilter selects jobs for ListJobs. Results are ordered by id descending.
type JobFilter struct {
	States   []domain.JobState // empty: all
	Project  string            // empty: all
	BeforeID int64             // cursor: only ids < BeforeID; 0: from the newest
	Limit    int               // 0: no limit
	// Owner, Pool and NameContains narrow the list as a caller asks (the
	// visibility restriction is Restrict's): Owner is the exact submitter,
	// Pool the exact pool, NameContains a substring of the name, matched
	// without regard to the case of ASCII letters (other letters match
	// only as written on SQLite; PostgreSQL folds them by its locale).
	// Empty: all.
	Owner        string
	Pool         string
	NameContains string
	// Sweep keeps only the members of this sweep; 0: all jobs.
	Sweep int64
	// Ascending orders by id ascending (and BeforeID is ignored); used by the
	// control loop to load the queue in submit order.
	Ascending bool
	// Restrict keeps only the jobs a caller may see: those of Projects, plus
	// those submitted by Submitter ("" matches no submitter). Without
	// Restrict, Projects and Submitter are ignored.
	Restrict  bool
	Projects  []string
	Submitter string
	// Into, when its capacity holds the rows asked for, is a buffer a
	// store may decode list rows into instead of allocating a page (a
	// page of Jobs is large). The caller lends it until it is done with
	// the result, and lends only a buffer that held nothing but list rows
	// (their Spec and SpecJSON left empty), or zero Jobs.
	Into []domain.Job
}

// Rows returns a page for n rows: Into, emptied, when it can hold them,
// else a new one.
func (f *JobFilter) Rows(n int) []domain.Job {
	if f.Into != nil && cap(f.Into) >= n {
		return f.Into[:0]
	}
	return make([]domain.Job, 0, n)
}

// JobCursor is a point in a store's history of job writes (LiveJobs,
// ChangedJobs, LiveJobRevs); its value means something only to the store
// that gave it, except that cursors and revisions (JobRev) compare as the
// points they name.
type JobCursor uint64

// JobRev is a live job's id and the point of its row's last write in the
// history that cursors name (LiveJobRevs). Every write to what JobDetail
// shows of a job (its row, its attempts, its events) writes its row, so
// a job whose revision is unchanged shows as it did.
type JobRev struct {
	ID  int64
	Rev JobCursor
}

// JobChanges is what ChangedJobsWith read at one moment.
type JobChanges struct {
	Jobs        []domain.Job     // as ChangedJobs returns them
	Cursor      JobCursor        // the cursor to pass next
	Attempts    []domain.Attempt // ActiveAttemptsOf(the ids of Jobs)
	SettingsRev int64            // SettingsRev
}

// Jobs stores jobs, their attempts and their transition events.
// DuplicateScan bounds how many of a submitter's newest jobs SameSpecJobs
// looks at; DuplicateShown, how many of those it returns.
const (
	DuplicateScan  = 200
	DuplicateShown = 3
	// UsageRuns is how many recent runs RecentUsage returns.
	UsageRuns = 3
)

// RunUsage is what one succeeded attempt held and used: its job's
// request, how long it ran, its CPU time and its memory peak.
type RunUsage struct {
	JobID      int64
	Request    domain.Resources
	Ran        time.Duration
	CPUSeconds float64
	MaxRSS     domain.ByteSize
}

type Jobs interface {
	// CreateJob stores the job in state queued, its config snapshot and a
	// submit event, in one transaction.
	CreateJob(ctx context.Context, p NewJob, audit domain.AuditRecord) (job domain.Job, created bool, err error)
	// GetJob returns the job with its Spec and SpecJSON, or ErrNotFound.
	GetJob(ctx context.Context, id int64) (domain.Job, error)
	// JobDetail returns the job with what showing it needs, in one read
	// (one statement, one snapshot), or ErrNotFound: see JobDetail.
	JobDetail(ctx context.Context, id int64) (JobDetail, error)
	// ListJobs returns jobs without Spec and SpecJSON (cheap rows).
	ListJobs(ctx context.Context, f JobFilter) ([]domain.Job, error)
	// SameSpecJobs returns the newest DuplicateShown of submitter's jobs of
	// snapshot specHash that are live (held included) or were submitted at
	// or after since (id, submitter, spec hash, state, submit time and
	// idempotency key only), newest first, and whether there are more, looking at the
	// submitter's newest DuplicateScan jobs only, so a submit pays a small,
	// bounded cost however many jobs its user has.
	SameSpecJobs(ctx context.Context, submitter, specHash string, since time.Time) (newest []domain.Job, more bool, err error)
	// RecentUsage returns what the newest UsageRuns succeeded attempts of
	// submitter's jobs named name used, newest first, looking at the
	// submitter's newest DuplicateScan jobs only.
	RecentUsage(ctx context.Context, submitter, name string) ([]RunUsage, error)
	// RecentRuns returns how long the newest limit succeeded attempts of
	// submitter's jobs named name ran, newest first, looking at the
	// submitter's newest DuplicateScan jobs only.
	RecentRuns(ctx context.Context, submitter, name string, limit int) ([]time.Duration, error)
	// LiveJobs returns every live job (queued, starting or running; cheap
	// rows, by id ascending) and a cursor for ChangedJobs, read at one
	// moment: a write the list does not show comes back from
	// ChangedJobs(cursor).
	LiveJobs(ctx context.Context) ([]domain.Job, JobCursor, error)
	// ChangedJobs returns every job (cheap rows, by id ascending, in any
	// state) created or updated after cursor, and the cursor to pass next.
	// It may return a job more than once across calls, never miss one.
	ChangedJobs(ctx context.Context, since JobCursor) ([]domain.Job, JobCursor, error)
	// ChangedJobsWith is ChangedJobs that also reads, in the same read
	// (one snapshot), the active attempts of the jobs it returns
	// (ActiveAttemptsOf) and the settings revision (SettingsRev): a
	// reader that keeps the live jobs, their attempts and the settings
	// learns what changed of all three in one read.
	ChangedJobsWith(ctx context.Context, since JobCursor) (JobChanges, error)
	// LiveJobRevs returns every live job's id and revision (by id
	// ascending) and a cursor, read at one moment like LiveJobs, without
	// reading the rest of the rows. A revision compares with cursors:
	// ChangedJobs(c) returns the job when its Rev > c, and a read that
	// returned the job with cursor c >= Rev (LiveJobs, ChangedJobs,
	// LiveJobRevs) showed its row as it still is. A reader that keeps
	// the live jobs thus checks them all, and reads again (JobsByID) only
	// those written since it last read them. SQLite's revision is the
	// number of the write transaction; PostgreSQL's, the id of the
	// writing transaction plus one, so that rows written by a transaction
	// still running when a read began (at or after the read's cursor, the
	// snapshot's xmin) count as written after it.
	LiveJobRevs(ctx context.Context) ([]JobRev, JobCursor, error)
	// JobsByID returns the jobs of ids (cheap rows, by id ascending, in
	// any state), read at one moment; ids of no job are left out.
	JobsByID(ctx context.Context, ids []int64) ([]domain.Job, error)
	// CountJobs counts jobs per state (for metrics and the UI).
	CountJobs(ctx context.Context) (map[domain.JobState]int, error)
	// ListAttempts returns a job's attempts in number order.
	ListAttempts(ctx context.Context, jobID int64) ([]domain.Attempt, error)
	// ActiveAttempts returns every attempt in state starting or running, in
	// (job id, number) order.
	ActiveAttempts(ctx context.Context) ([]domain.Attempt, error)
	// ActiveAttemptsOf returns ActiveAttempts' rows of the jobs of ids
	// only, in the same order, in one read. Every write to an attempt
	// writes its job's row (JobRev), so a reader that keeps the active
	// attempts reads again only those of the jobs ChangedJobs returns.
	ActiveAttemptsOf(ctx context.Context, ids []int64) ([]domain.Attempt, error)
	// AttemptSpans returns every attempt that started and had not finished
	// before since (running ones included), with its job's project, pool,
	// request, submitter and name and the attempt's state — the input of
	// fair-share usage and of spend reports. Ordered by (job, attempt).
	AttemptSpans(ctx context.Context, since time.Time) ([]AttemptSpan, error)
	// RunningSpans returns AttemptSpans' rows of the attempts starting or
	// running that have started, read on the state index: what running
	// attempts add to a budget's use.
	RunningSpans(ctx context.Context) ([]AttemptSpan, error)
	// AttemptTimes returns when each attempt of the given jobs that
	// started held its job's resources, ordered by (job, attempt), in one
	// read: what a page of jobs is priced from.
	AttemptTimes(ctx context.Context, jobIDs []int64) ([]AttemptTime, error)
	// SpendTotals sums, in the database, what attempts held between
	// q.Since and q.Until, by q.By and by pool and resource shape (the
	// input of spend reports, which price each row): one row per group,
	// not per attempt.
	SpendTotals(ctx context.Context, q SpendQuery) ([]SpendRow, error)
	// ReportTotals sums, in the database, the activity of a review report
	// (see ReportTotals): one row per group and two bounded lists of jobs.
	ReportTotals(ctx context.Context, q ReportQuery) (ReportTotals, error)
	// PreemptedAttempts returns every attempt that ended preempted at or
	// after since, by FinishedAt (then job, number): the recent history
	// the control loop's preemption guard is rebuilt from when it starts.
	PreemptedAttempts(ctx context.Context, since time.Time) ([]domain.Attempt, error)
	// ListEvents returns a job's transition events in order.
	ListEvents(ctx context.Context, jobID int64) ([]domain.Event, error)
	// Apply applies the changes in one transaction, in order. A change whose
	// guard does not hold (job or attempt not in an expected state, job
	// missing) is skipped and its slot in the returned slice holds ErrConflict
	// or ErrNotFound; the others commit. The second return value is for
	// failures of the transaction itself, in which case nothing was applied.
	Apply(ctx context.Context, changes []Change) ([]error, error)
}

// Change is one guarded update of a job and, optionally, one of its attempts.
//
// Job part: with a Move, the job must be in one of the states the move
// leaves and moves to Move.To(); an event is recorded (From=current state,
// To, Actor, Reason, Message, Attempt). Which moves exist is the domain's
// transition table (domain.Moves): no other change of state can be
// expressed. Without a Move, the job must be in one of In (required) and
// only Reason and Message (if SetReason) and the flags below change, with
// no event (but for a Priority change, which records one).
//
// Side effects on the job row with a Move: UpdatedAt = At; StartedAt = At
// if it reaches running and StartedAt is zero; FinishedAt = At if it
// reaches a terminal state; CancelRequested cleared if it reaches a
// terminal state or queued; PreemptRequested cleared; Preemptions
// incremented if CountPreemption; NextAttempt = NextAttempt (zero clears
// it).
type Change struct {
	JobID     int64
	Move      domain.Move       // the state change; zero: none
	In        []domain.JobState // without a Move: the states the job must be in
	Reason    domain.Reason
	Message   string
	SetReason bool // without a Move: update Reason/Message only
	Actor     string
	At        time.Time

	NextAttempt    time.Time // with a move to queued: earliest next start
	RequestCancel  bool      // set CancelRequested (without a Move)
	RequestPreempt bool      // set PreemptRequested (without a Move)
	// CountPreemption increments the job's Preemptions (with a Move).
	CountPreemption bool
	// Priority, when set (without a Move), changes the job's priority
	// class, the one the scheduler orders its queue by (the spec keeps the
	// class it was submitted with), and records an event that keeps the
	// job's state (From = To) with Actor, Reason and Message. An unknown
	// class, or one given with a Move, is domain.ErrInvalid.
	Priority domain.Priority

	// Audit, when not nil, is appended to the audit log with the change,
	// in the same transaction, when the change applies (a change skipped
	// by its guard appends nothing).
	Audit *domain.AuditRecord

	// Attempt, when not nil, changes an attempt in the same transaction. The
	// job guard must hold first.
	Attempt *AttemptChange

	// Manifest, when not nil, records the manifest of the change's attempt
	// (Attempt.Number, of this job) with the change, replacing one recorded
	// before (Artifacts.RecordManifest): an attempt's end and the outputs
	// it left are stored together.
	Manifest *domain.Manifest
}

// Guard lists the states the job must be in for the change to apply.
func (c Change) Guard() []domain.JobState {
	if !c.Move.IsZero() {
		return c.Move.From()
	}
	return c.In
}

// Applies reports whether the change's guard holds for a job in state s.
func (c Change) Applies(s domain.JobState) bool {
	if !c.Move.IsZero() {
		return c.Move.Leaves(s)
	}
	return slices.Contains(c.In, s)
}

// Guarded reports whether the change names states to guard on at all.
func (c Change) Guarded() bool { return !c.Move.IsZero() || len(c.In) > 0 }

// To is the state the change moves the job to; "" when it moves none.
func (c Change) To() domain.JobState { return c.Move.To() }

// AttemptChange creates or updates one attempt.
type AttemptChange struct {
	Number int
	// Create inserts attempt Number (must equal job.Attempts+1, which the
	// store then increments) in state To, with Node and GPUs. Otherwise the
	// attempt must exist and be in one of From.
	Create   bool
	From     []domain.AttemptState
	To       domain.AttemptState
	Reason   domain.Reason
	Message  string
	ExitCode *int
	Node     string
	GPUs     []int
	Usage    *domain.Usage // when set, recorded on the attempt
	Borrowed bool          // with Create: placed on borrowed capacity
	// StartedAt is set to Change.At when To is running; FinishedAt when To is terminal.

	// Token, with Create, stores the attempt's job token (its Subject
	// must be domain.JobTokenSubject of the attempt) and appends its
	// audit record in the change's transaction: an attempt and the one
	// token that may report for it are stored together or not at all.
	// A Hash already stored is ErrConflict.
	Token *TokenGrant
	// EndTokens, with a To that ends the attempt, deletes the attempt's
	// job tokens and appends this audit record in the change's
	// transaction: an attempt that ended may report nothing more, and
	// its end and its token's cannot be recorded apart.
	EndTokens *domain.AuditRecord
}

// TokenGrant is a token to store with the change that creates its
// attempt (AttemptChange.Token) and the audit record of its issue.
type TokenGrant struct {
	Token Token
	Audit domain.AuditRecord
}

// Audits returns the audit records the change appends when it applies:
// its own (Audit), then its attempt's token's (Token, EndTokens).
func (c Change) Audits() []domain.AuditRecord {
	var recs []domain.AuditRecord
	if c.Audit != nil {
		recs = append(recs, *c.Audit)
	}
	if a := c.Attempt; a != nil {
		if a.Token != nil {
			recs = append(recs, a.Token.Audit)
		}
		if a.EndTokens != nil {
			recs = append(recs, *a.EndTokens)
		}
	}
	return recs
}

// Audited reports whether the change appends audit records (Audits).
func (c Change) Audited() bool { return len(c.Audits()) > 0 }

// AttemptSpan is when one attempt held resources, and what it held.
type AttemptSpan struct {
	JobID      int64
	Attempt    int
	Project    string
	Pool       string
	Resources  domain.Resources
	StartedAt  time.Time
	FinishedAt time.Time // zero while it runs
	// For spend reports: who submitted the job, its name, and how the
	// attempt ended (running while it runs), which says whether its spend
	// was wasted.
	Submitter string
	JobName   string
	State     domain.AttemptState
	Reason    domain.Reason
	// Timeout is the job's policy.timeout: how long the attempt may run,
	// which bounds what a running one may still cost.
	Timeout domain.Duration
}

// JobDetail is a job as Jobs.JobDetail reads it: what GetJob returns but
// Spec (SpecJSON holds it, not decoded), with what ListAttempts and
// ListEvents return for it and what RateHistory returns for its pool.
type JobDetail struct {
	Job      domain.Job
	Attempts []domain.Attempt
	Events   []domain.Event
	Rates    []RateChange
}

// AttemptTime is when one attempt held its job's resources: from
// StartedAt to FinishedAt (zero while it runs).
type AttemptTime struct {
	JobID                 int64
	Attempt               int
	StartedAt, FinishedAt time.Time
}

// SpendQuery selects SpendTotals: the attempts that held resources in
// [Since, Until], grouped by By ("project", "pool", "user" or "job"), of
// the jobs of Projects only unless AllProjects. Splits, ascending and
// strictly inside the window, cut it into pieces whose held time is
// summed apart (the times rates changed, so that each piece has one
// price).
type SpendQuery struct {
	Since, Until time.Time
	By           string
	AllProjects  bool
	Projects     []string
	Splits       []time.Time
}

// SpendRow sums the attempts of one group that held one shape of
// resources in one pool, each clipped to the query's window: Held is the
// sum of their times (each to the microsecond), Attempts how many there
// were, Running how many of them still run. Waste rows hold the attempts
// that were preempted, failed, timed out or lost. HeldIn is Held by piece
// of the window (len(Splits)+1, each piece's time to the microsecond).
type SpendRow struct {
	Group     string
	Pool      string
	Resources domain.Resources
	Waste     bool
	Attempts  int
	Running   int
	Held      time.Duration
	HeldIn    []time.Duration
}

// RateChange is one entry of a pool's rate history: Rates are in force
// from From until the pool's next change. A pool's first entry is from
// its creation (from the epoch for pools older than the history).
type RateChange struct {
	Pool  string
	From  time.Time
	Rates domain.Rates
}

// Token is a stored API token. The secret itself is never stored: Hash is
// "sha256:<hex>" of it.
type Token struct {
	ID        int64
	Name      string // human label, e.g. "bootstrap"
	Subject   string // the user the token acts as, e.g. "admin"
	Role      string // e.g. "admin"
	Hash      string
	CreatedAt time.Time
	ExpiresAt time.Time // zero: never
	RevokedAt time.Time // zero: not revoked
}

// Tokens stores API tokens.
type Tokens interface {
	// CreateToken stores t (ID is assigned) and returns it. A duplicate Hash
	// is ErrConflict.
	CreateToken(ctx context.Context, t Token, audit domain.AuditRecord) (Token, error)
	// CreateTokens stores ts in one transaction with audit, IDs
	// assigned but not returned: the tokens of the attempts one
	// scheduling pass starts. A Hash already stored is ErrConflict, and
	// then none is stored.
	CreateTokens(ctx context.Context, ts []Token, audit ...domain.AuditRecord) error
	// TokenByHash returns the token with that hash, or ErrNotFound.
	TokenByHash(ctx context.Context, hash string) (Token, error)
	// CountTokens returns how many tokens exist (bootstrap happens at zero).
	CountTokens(ctx context.Context) (int, error)
}

// Pools stores pools, quotas and projects. Names are unique; lists are sorted
// by name (quotas by project, then pool).
type Pools interface {
	// PutPool creates the pool or replaces the one with the same name
	// (CreatedAt is kept from the first write, UpdatedAt set to p.UpdatedAt).
	PutPool(ctx context.Context, p domain.Pool, audit domain.AuditRecord) (domain.Pool, error)
	// GetPool returns the named pool or ErrNotFound.
	GetPool(ctx context.Context, name string) (domain.Pool, error)
	ListPools(ctx context.Context) ([]domain.Pool, error)
	// SettingsRev returns the settings revision: a number that changes
	// with every write to the pools, quotas, projects or compute
	// requests, whoever makes it (another replica, a migration, a
	// command run on the database), and only then. A reader that keeps
	// them reads them again only when it changed; read it before them.
	SettingsRev(ctx context.Context) (int64, error)
	// RateHistory returns every change of the named pools' rates (of
	// every pool when none is named), by pool, then From: PutPool records
	// one, in its transaction, whenever it writes rates other than the
	// pool's latest.
	RateHistory(ctx context.Context, pools ...string) ([]RateChange, error)
	// PutQuota creates or replaces the quota of (q.Project, q.Pool). The pool
	// must exist (ErrNotFound otherwise).
	PutQuota(ctx context.Context, q domain.Quota, audit domain.AuditRecord) error
	// ListQuotas returns quotas, filtered by project and/or pool when set.
	ListQuotas(ctx context.Context, project, pool string) ([]domain.Quota, error)
	// DeleteQuota removes a quota; ErrNotFound when there is none.
	DeleteQuota(ctx context.Context, project, pool string, audit domain.AuditRecord) error
	// PutProject creates or updates a project (its shares).
	PutProject(ctx context.Context, p domain.Project, audit domain.AuditRecord) error
	// GetProject returns the named project or ErrNotFound.
	GetProject(ctx context.Context, name string) (domain.Project, error)
	ListProjects(ctx context.Context) ([]domain.Project, error)
	// PutBudget creates or replaces the budget of b.Project.
	PutBudget(ctx context.Context, b domain.Budget, audit domain.AuditRecord) error
	// GetBudget returns the project's budget or ErrNotFound.
	GetBudget(ctx context.Context, project string) (domain.Budget, error)
	// ListBudgets returns every budget, by project.
	ListBudgets(ctx context.Context) ([]domain.Budget, error)
	// DeleteBudget removes the project's budget; ErrNotFound when there is
	// none.
	DeleteBudget(ctx context.Context, project string, audit domain.AuditRecord) error
}

// Requests stores compute requests and their decisions.
type Requests interface {
	// CreateRequest stores r as pending (ID and CreatedAt assigned from r).
	// The pool must exist (ErrNotFound).
	CreateRequest(ctx context.Context, r domain.QuotaRequest, audit domain.AuditRecord) (domain.QuotaRequest, error)
	// GetRequest returns one request or ErrNotFound.
	GetRequest(ctx context.Context, id int64) (domain.QuotaRequest, error)
	// ListRequests returns requests newest first, filtered by project and/or
	// pool when set.
	ListRequests(ctx context.Context, project, pool string) ([]domain.QuotaRequest, error)
	// DecideRequest moves a pending request to approved or denied, recording
	// who, when and why; a request no longer pending is ErrConflict.
	DecideRequest(ctx context.Context, id int64, to domain.RequestState, decider string, at time.Time, note string, audit domain.AuditRecord) (domain.QuotaRequest, error)
	// ActiveGrants returns approved requests whose Until is after now.
	ActiveGrants(ctx context.Context, now time.Time) ([]domain.QuotaRequest, error)
}

// ---- Identity: users, role bindings and token administration. ----

// Users stores users, the roles they hold and the administration of their
// tokens. User names are unique; lists are sorted by name, a user's roles
// global ones first, then by project and role.
type Users interface {
	// CreateUser stores u (its Roles are ignored); an existing name is
	// ErrConflict.
	CreateUser(ctx context.Context, u domain.User, audit domain.AuditRecord) (domain.User, error)
	// GetUser returns the named user with its roles, or ErrNotFound.
	GetUser(ctx context.Context, name string) (domain.User, error)
	// ListUsers returns every user with its roles.
	ListUsers(ctx context.Context) ([]domain.User, error)
	// GrantRole gives user the binding; granting one already held changes
	// nothing and reports created=false. A missing user is ErrNotFound.
	GrantRole(ctx context.Context, user string, b domain.RoleBinding, at time.Time, audit domain.AuditRecord) (created bool, err error)
	// RevokeRole takes the binding away; ErrNotFound when it is not held.
	RevokeRole(ctx context.Context, user string, b domain.RoleBinding, audit domain.AuditRecord) error
	// GetToken returns the token with that id, or ErrNotFound.
	GetToken(ctx context.Context, id int64) (Token, error)
	// ListTokens returns the tokens of subject ("" for every subject), by
	// id, revoked and expired ones included.
	ListTokens(ctx context.Context, subject string) ([]Token, error)
	// RevokeToken marks the token revoked at at and returns it; a token
	// already revoked keeps its first revocation time. ErrNotFound when
	// there is no such token.
	RevokeToken(ctx context.Context, id int64, at time.Time, audit domain.AuditRecord) (Token, error)
	// DeleteTokens deletes the tokens with those ids, in one transaction
	// with audit, and returns how many it deleted (an id not stored is
	// skipped).
	DeleteTokens(ctx context.Context, ids []int64, audit ...domain.AuditRecord) (int, error)
}
