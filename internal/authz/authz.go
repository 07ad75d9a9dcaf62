// Package authz decides who may do what: one pure function, Decide, used by
// every API route through the service layer. It performs no I/O.
package authz

import (
	"slices"
	"strconv"

	"trainyard/internal/domain"
)

// Action is one kind of operation a caller may attempt.
type Action string

// Actions. Every API route maps to exactly one.
const (
	JobSubmit Action = "job.submit"
	JobRead   Action = "job.read" // show, list, why, logs
	JobCancel Action = "job.cancel"
	JobHold   Action = "job.hold" // hold and release
	// JobPriority: change a waiting job's priority class (within its
	// project's ceiling, which the service checks).
	JobPriority Action = "job.priority"

	PoolRead     Action = "pool.read"
	PoolWrite    Action = "pool.write"
	QuotaRead    Action = "quota.read"
	QuotaWrite   Action = "quota.write"
	ProjectRead  Action = "project.read"
	ProjectWrite Action = "project.write"
	QueueRead    Action = "queue.read"

	UserRead    Action = "user.read"
	UserWrite   Action = "user.write"
	RoleWrite   Action = "role.write"
	TokenCreate Action = "token.create"
	TokenRead   Action = "token.read"
	TokenRevoke Action = "token.revoke"

	AuditRead Action = "audit.read"

	SecretRead   Action = "secret.read" // names and metadata only, never values
	SecretWrite  Action = "secret.write"
	SecretRotate Action = "secret.rotate"

	QuotaRequest Action = "quota.request"
	QuotaApprove Action = "quota.approve"

	AttemptReport Action = "attempt.report" // job tokens: progress, metrics, checkpoints
	// AttemptResume: a job token reads its own job's checkpoints (list,
	// archive) to resume from one. The resource is the attempt ("42/1");
	// the caller checks that it is the job's latest and has not ended.
	AttemptResume Action = "attempt.resume"

	AlertTest Action = "alert.test" // send a test notification to a channel

	ArtifactGC Action = "artifact.gc" // delete files the retention policies let go

	TemplateRead  Action = "template.read"  // list and show job templates
	TemplateWrite Action = "template.write" // create a template or a new version of one

	EnvRead  Action = "env.read"  // list and show software environments
	EnvWrite Action = "env.write" // register a version, deprecate

	CostRead    Action = "cost.read"    // spend of a project's attempts, and its budget
	BudgetWrite Action = "budget.write" // set or remove a project's money budget

	// NotifyWrite shows, sets and clears a user's default job-end
	// notification (r.Owner is the user): one's own only.
	NotifyWrite Action = "notify.write"
)

// Resource is what an action applies to. Empty fields mean "not specific"
// (e.g. listing).
type Resource struct {
	Kind    string // "job", "pool", "quota", "project", "user", "token", "audit", "secret", "request"
	ID      string
	Project string // owning project, when the resource belongs to one
	Owner   string // owning user (a job's submitter, a token's user)
}

// Principal is the caller a decision is about.
type Principal = domain.Principal

// Decision is the outcome of Decide. Reason says which rule decided, in words
// fit for an error message (for a denial: the role that would be needed).
type Decision struct {
	Allow  bool
	Reason string
}

// Reasons. They are constants so Decide allocates nothing.
const (
	reasonAdmin        = "admin may do everything"
	reasonAuditorRead  = "auditor reads everything"
	reasonResourceRead = "resource-admin reads pools, quotas, projects, the queue, jobs and spend"
	reasonResource     = "resource-admin manages pools, quotas and projects"
	reasonLead         = "lead of the project"
	reasonMember       = "member of the project"
	reasonViewer       = "viewer of the project"
	reasonOwnJob       = "member of the project who submitted the job"
	reasonAnyRole      = "every user with a role reads shared configuration"
	reasonSelf         = "users manage their own tokens"
	reasonJobToken     = "the job token of this attempt"

	denyJobToken      = "a job token may only report for its own attempt and read its own job's checkpoints"
	denySubmit        = "submitting needs role member or lead in the project"
	denyJobRead       = "reading this job needs role viewer or lead in its project (a member reads only their own jobs)"
	denyJobCancel     = "canceling another user's job needs role lead in its project"
	denyJobCancelOwn  = "canceling needs role member or lead in the job's project"
	denyJobHold       = "holding or releasing another user's job needs role lead in its project"
	denyJobHoldOwn    = "holding or releasing needs role member or lead in the job's project"
	denyPriority      = "changing another user's job's priority needs role lead in its project"
	denyPriorityOwn   = "changing a job's priority needs role member or lead in the job's project"
	denyResource      = "this needs role resource-admin"
	denyAnyRole       = "reading this needs a role; ask an admin to grant one"
	denyQueue         = "reading the queue needs a role; ask an admin to grant one"
	denyAdmin         = "this needs role admin"
	denyAdminOrAudit  = "this needs role admin or auditor"
	denyRoleWrite     = "granting project roles needs role lead in the project (global roles need admin)"
	denyTokenOther    = "managing another user's tokens needs role admin"
	denySecretRead    = "reading secrets needs role member or lead in the project"
	denySecretWrite   = "changing secrets needs role lead in the project"
	denyQuotaRequest  = "requesting compute needs role member or lead in the project"
	denyQuotaApprove  = "approving compute requests needs role resource-admin"
	denyQuotaOwn      = "a compute request you filed must be decided by another resource-admin or an admin"
	denyAttemptReport = "reporting for an attempt needs that attempt's job token"
	denyAttemptResume = "reading checkpoints to resume from needs the job token of the job's attempt (users read them with job.read)"
	denyUnknown       = "unknown action"
	denyTemplateWrite = "creating templates needs role member or lead in the project"
	denyEnvWrite      = "registering or deprecating environments needs role admin or resource-admin"
	denyCostRead      = "reading a project's spend needs a role in the project (viewer, member or lead)"
)

func allow(reason string) Decision { return Decision{Allow: true, Reason: reason} }
func deny(reason string) Decision  { return Decision{Reason: reason} }

// projectLevel is the strongest project role held, as a rank.
type projectLevel int

const (
	levelNone projectLevel = iota
	levelViewer
	levelMember
	levelLead
)

func levelIn(p Principal, project string) projectLevel {
	if project == "" {
		return levelNone
	}
	best := levelNone
	for _, pr := range p.ProjectRoles(project) {
		l := levelNone
		switch pr.Role {
		case domain.RoleLead:
			l = levelLead
		case domain.RoleMember:
			l = levelMember
		case domain.RoleViewer:
			l = levelViewer
		}
		best = max(best, l)
	}
	return best
}

// hasAnyRole reports whether p holds at least one role anywhere.
func hasAnyRole(p Principal) bool {
	return p.Role != "" || len(p.Roles) > 0 || len(p.Projects) > 0
}

// Decide says whether p may perform a on r. It is pure and allocation-free.
//
// Rules, in order: a job token may only report for its own attempt and
// read its own job's checkpoints (AttemptResume); admin may do everything; then the action's own rule (see docs/security.md).
// For a listing (r.ID empty) of jobs, Decide allows any user with a role
// and the caller filters the rows with Visible.
func Decide(p Principal, a Action, r Resource) Decision {
	if p.IsJob() {
		if (a == AttemptReport || a == AttemptResume) && isOwnAttempt(p, r.ID) {
			return allow(reasonJobToken)
		}
		return deny(denyJobToken)
	}
	if p.HasGlobal(domain.RoleAdmin) {
		return allow(reasonAdmin)
	}
	auditor := p.HasGlobal(domain.RoleAuditor)
	resAdmin := p.HasGlobal(domain.RoleResourceAdmin)
	switch a {
	case JobSubmit:
		switch levelIn(p, r.Project) {
		case levelLead:
			return allow(reasonLead)
		case levelMember:
			return allow(reasonMember)
		}
		return deny(denySubmit)
	case JobRead:
		switch {
		case auditor:
			return allow(reasonAuditorRead)
		case resAdmin:
			return allow(reasonResourceRead)
		case r.ID == "" && r.Project == "" && hasAnyRole(p):
			return allow(reasonAnyRole) // a listing, filtered by VisibleJobs
		}
		switch levelIn(p, r.Project) {
		case levelLead:
			return allow(reasonLead)
		case levelViewer:
			return allow(reasonViewer)
		case levelMember:
			if r.ID == "" {
				return allow(reasonMember) // a listing of the project: own jobs only
			}
			if r.Owner != "" && r.Owner == p.Subject {
				return allow(reasonOwnJob)
			}
		}
		return deny(denyJobRead)
	case JobCancel:
		return ownJobOrLead(p, r, denyJobCancelOwn, denyJobCancel)
	case JobHold:
		return ownJobOrLead(p, r, denyJobHoldOwn, denyJobHold)
	case JobPriority:
		return ownJobOrLead(p, r, denyPriorityOwn, denyPriority)
	case PoolRead, QuotaRead, ProjectRead:
		switch {
		case auditor:
			return allow(reasonAuditorRead)
		case resAdmin:
			return allow(reasonResourceRead)
		case hasAnyRole(p):
			return allow(reasonAnyRole)
		}
		return deny(denyAnyRole)
	case QueueRead:
		switch {
		case auditor:
			return allow(reasonAuditorRead)
		case resAdmin:
			return allow(reasonResourceRead)
		case hasAnyRole(p):
			return allow(reasonAnyRole)
		}
		return deny(denyQueue)
	case PoolWrite, QuotaWrite, ProjectWrite, ArtifactGC, BudgetWrite:
		if resAdmin {
			return allow(reasonResource)
		}
		return deny(denyResource)
	case QuotaApprove:
		// r.Owner is the requester: nobody but an admin decides their own.
		switch {
		case !resAdmin:
			return deny(denyQuotaApprove)
		case r.Owner != "" && r.Owner == p.Subject:
			return deny(denyQuotaOwn)
		}
		return allow(reasonResource)
	case QuotaRequest:
		if l := levelIn(p, r.Project); l == levelLead || l == levelMember {
			return allow(reasonMember)
		}
		return deny(denyQuotaRequest)
	case UserRead, AuditRead:
		if auditor {
			return allow(reasonAuditorRead)
		}
		return deny(denyAdminOrAudit)
	case UserWrite, AlertTest:
		return deny(denyAdmin)
	case RoleWrite:
		// r.Project is the project of the role granted; "" is a global role.
		if r.Project != "" && levelIn(p, r.Project) == levelLead {
			return allow(reasonLead)
		}
		return deny(denyRoleWrite)
	case TokenCreate, TokenRevoke, NotifyWrite:
		if r.Owner != "" && r.Owner == p.Subject {
			return allow(reasonSelf)
		}
		return deny(denyTokenOther)
	case TokenRead:
		switch {
		case r.Owner != "" && r.Owner == p.Subject:
			return allow(reasonSelf)
		case auditor:
			return allow(reasonAuditorRead)
		}
		return deny(denyTokenOther)
	case SecretRead:
		if auditor {
			return allow(reasonAuditorRead)
		}
		if l := levelIn(p, r.Project); l == levelLead || l == levelMember {
			return allow(reasonMember)
		}
		return deny(denySecretRead)
	case SecretWrite, SecretRotate:
		if levelIn(p, r.Project) == levelLead {
			return allow(reasonLead)
		}
		return deny(denySecretWrite)
	case AttemptReport:
		return deny(denyAttemptReport)
	case AttemptResume:
		return deny(denyAttemptResume)
	case TemplateRead:
		if hasAnyRole(p) {
			return allow(reasonAnyRole)
		}
		return deny(denyAnyRole)
	case TemplateWrite:
		if l := levelIn(p, r.Project); l == levelLead || l == levelMember {
			return allow(reasonMember)
		}
		return deny(denyTemplateWrite)
	case EnvRead:
		if hasAnyRole(p) {
			return allow(reasonAnyRole)
		}
		return deny(denyAnyRole)
	case EnvWrite:
		if resAdmin {
			return allow(reasonResource)
		}
		return deny(denyEnvWrite)
	case CostRead:
		// Spend is the project's, not the submitter's: every role in the
		// project reads all of it. A report over all projects (r.Project
		// empty) is filtered with VisibleCost.
		switch {
		case auditor:
			return allow(reasonAuditorRead)
		case resAdmin:
			return allow(reasonResourceRead)
		case r.Project == "" && hasAnyRole(p):
			return allow(reasonAnyRole)
		}
		switch levelIn(p, r.Project) {
		case levelLead:
			return allow(reasonLead)
		case levelMember:
			return allow(reasonMember)
		case levelViewer:
			return allow(reasonViewer)
		}
		return deny(denyCostRead)
	}
	return deny(denyUnknown)
}

// ownJobOrLead is the rule of the actions that change a job's course: a
// project lead on any of the project's jobs, a member on their own.
// denyOwn says why the submitter, without that role, may not; denyOther
// why anyone else may not.
func ownJobOrLead(p Principal, r Resource, denyOwn, denyOther string) Decision {
	switch l := levelIn(p, r.Project); {
	case l == levelLead:
		return allow(reasonLead)
	case r.Owner != "" && r.Owner == p.Subject:
		if l == levelMember {
			return allow(reasonMember)
		}
		return deny(denyOwn)
	}
	return deny(denyOther)
}

// isOwnAttempt reports whether id names p's attempt ("42/1", as
// domain.AttemptRef writes it). The conversion in the comparison does not
// allocate.
func isOwnAttempt(p Principal, id string) bool {
	var buf [40]byte
	b := strconv.AppendInt(buf[:0], p.JobID, 10)
	b = append(b, '/')
	b = strconv.AppendInt(b, int64(p.Attempt), 10)
	return string(b) == id
}

// Visible describes which jobs p may see in a listing: All, or only jobs of
// Projects (where p is lead or viewer) plus jobs p submitted.
type Visible struct {
	All       bool
	Projects  []string
	Submitter string
}

// Sees reports whether a job of project submitted by submitter passes the
// filter.
func (v Visible) Sees(project, submitter string) bool {
	return v.All || (v.Submitter != "" && submitter == v.Submitter) || slices.Contains(v.Projects, project)
}

// VisibleJobs returns the job-listing filter for p.
func VisibleJobs(p Principal) Visible {
	if p.IsJob() {
		return Visible{}
	}
	if p.HasGlobal(domain.RoleAdmin) || p.HasGlobal(domain.RoleAuditor) || p.HasGlobal(domain.RoleResourceAdmin) {
		return Visible{All: true}
	}
	v := Visible{Submitter: p.Subject}
	for _, pr := range p.Projects {
		if pr.Role != domain.RoleLead && pr.Role != domain.RoleViewer {
			continue
		}
		if n := len(v.Projects); n == 0 || v.Projects[n-1] != pr.Project {
			v.Projects = append(v.Projects, pr.Project)
		}
	}
	return v
}

// Actions returns every action, for tests and documentation.
func Actions() []Action {
	return []Action{JobSubmit, JobRead, JobCancel, JobHold, JobPriority, PoolRead, PoolWrite, QuotaRead, QuotaWrite,
		ProjectRead, ProjectWrite, QueueRead, UserRead, UserWrite, RoleWrite, TokenCreate, TokenRead,
		TokenRevoke, AuditRead, SecretRead, SecretWrite, SecretRotate, QuotaRequest, QuotaApprove, AttemptReport, AttemptResume, AlertTest, ArtifactGC,
		TemplateRead, TemplateWrite, EnvRead, EnvWrite, CostRead, BudgetWrite, NotifyWrite}
}

// VisibleCost returns the spend-report filter for p: All for admins,
// resource-admins and auditors, else the projects p holds any role in
// (a member sees the whole project's spend, not only their own jobs').
func VisibleCost(p Principal) Visible {
	if p.IsJob() {
		return Visible{}
	}
	if p.HasGlobal(domain.RoleAdmin) || p.HasGlobal(domain.RoleAuditor) || p.HasGlobal(domain.RoleResourceAdmin) {
		return Visible{All: true}
	}
	var v Visible
	for _, pr := range p.Projects {
		if pr.Role != domain.RoleLead && pr.Role != domain.RoleMember && pr.Role != domain.RoleViewer {
			continue
		}
		if !slices.Contains(v.Projects, pr.Project) {
			v.Projects = append(v.Projects, pr.Project)
		}
	}
	return v
}
