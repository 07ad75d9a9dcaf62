package domain

import (
	"sort"
	"strconv"
	"strings"
	"time"
)

// Role names what a user may do, globally or in one project.
type Role string

// Global roles.
const (
	RoleAdmin         Role = "admin"          // everything
	RoleResourceAdmin Role = "resource-admin" // pools, quotas, projects, approvals; reads jobs
	RoleAuditor       Role = "auditor"        // reads everything, changes nothing
)

// Project roles.
const (
	RoleLead   Role = "lead"   // every job and member of the project
	RoleMember Role = "member" // submits; sees and manages their own jobs
	RoleViewer Role = "viewer" // reads the project's jobs
)

// RoleJob is the role of a job token: it may only report for one attempt.
const RoleJob Role = "job"

// Global reports whether r is granted server-wide (no project).
func (r Role) Global() bool {
	return r == RoleAdmin || r == RoleResourceAdmin || r == RoleAuditor
}

// InProject reports whether r is granted within one project.
func (r Role) InProject() bool {
	return r == RoleLead || r == RoleMember || r == RoleViewer
}

// Roles lists every role a user can be granted, global ones first.
func Roles() []Role {
	return []Role{RoleAdmin, RoleResourceAdmin, RoleAuditor, RoleLead, RoleMember, RoleViewer}
}

// ProjectRole is a role held in one project.
type ProjectRole struct {
	Project string
	Role    Role
}

// RoleBinding grants Role to a user, in Project for project roles ("" for
// global ones).
type RoleBinding struct {
	Role    Role
	Project string
}

// String renders the binding as "admin" or "member@vision".
func (b RoleBinding) String() string {
	if b.Project == "" {
		return string(b.Role)
	}
	return string(b.Role) + "@" + b.Project
}

// User is a person (or robot account) that holds roles and tokens.
type User struct {
	Name      string
	CreatedAt time.Time
	Roles     []RoleBinding // global ones first, then by project and role
}

// Principal is an authenticated caller, as authorization sees it.
type Principal struct {
	Subject string // user name; "" for job tokens
	// Role is the strongest global role held (admin, then resource-admin,
	// then auditor; "" for none). Authenticate sets it along with Roles;
	// principals built in code (the server acting for itself) may set it
	// alone. Authorization treats it like an entry of Roles.
	Role     Role
	Roles    []Role        // global roles
	Projects []ProjectRole // per-project roles, sorted by Project then Role
	TokenID  int64         // the token that authenticated the caller; 0 for code
	// JobID and Attempt are set for job tokens only: the one attempt the
	// token may report for.
	JobID   int64
	Attempt int
}

// SignInLinkToken names the tokens `trainyard ui` makes for a sign-in
// link: the web sign-in page deletes one as soon as it made a session
// from it, so each link signs in once.
const SignInLinkToken = "web sign-in link"

// WebSessionToken names the tokens the web pages make for a session, one
// per sign-in.
const WebSessionToken = "web session"

// IsJob reports whether p is a job token.
func (p Principal) IsJob() bool { return p.JobID != 0 }

// Actor is how p appears in transitions and audit records: "user:alice",
// "job:42/1" for the job token of attempt 1 of job 42, or the subject itself
// for the server acting on its own ("system:config").
func (p Principal) Actor() string {
	if p.IsJob() {
		return "job:" + AttemptRef(p.JobID, p.Attempt)
	}
	if strings.HasPrefix(p.Subject, "system:") {
		return p.Subject
	}
	return "user:" + p.Subject
}

// HasGlobal reports whether p holds global role r.
func (p Principal) HasGlobal(r Role) bool {
	if p.Role == r {
		return true
	}
	for _, g := range p.Roles {
		if g == r {
			return true
		}
	}
	return false
}

// ProjectRoles returns p's roles in project (a sub-slice of p.Projects, which
// must be sorted).
func (p Principal) ProjectRoles(project string) []ProjectRole {
	ps := p.Projects
	i := sort.Search(len(ps), func(i int) bool { return ps[i].Project >= project })
	j := i
	for j < len(ps) && ps[j].Project == project {
		j++
	}
	return ps[i:j]
}

// SortProjectRoles sorts roles by project, then role, as Principal.Projects
// must be.
func SortProjectRoles(roles []ProjectRole) {
	sort.Slice(roles, func(i, j int) bool {
		if roles[i].Project != roles[j].Project {
			return roles[i].Project < roles[j].Project
		}
		return roles[i].Role < roles[j].Role
	})
}

// AttemptRef names one attempt of one job: "42/1".
func AttemptRef(jobID int64, attempt int) string {
	return strconv.FormatInt(jobID, 10) + "/" + strconv.Itoa(attempt)
}

// JobTokenSubject is the subject stored on the token of one attempt.
func JobTokenSubject(jobID int64, attempt int) string {
	return "job:" + AttemptRef(jobID, attempt)
}

// ParseJobTokenSubject reverses JobTokenSubject; ok is false for any other
// subject.
func ParseJobTokenSubject(s string) (jobID int64, attempt int, ok bool) {
	rest, found := strings.CutPrefix(s, "job:")
	if !found {
		return 0, 0, false
	}
	js, as, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, false
	}
	j, err1 := strconv.ParseInt(js, 10, 64)
	a, err2 := strconv.Atoi(as)
	if err1 != nil || err2 != nil || j <= 0 || a <= 0 {
		return 0, 0, false
	}
	return j, a, true
}

// DefaultTokenTTL is how long a token lives when no expiry is asked for.
const DefaultTokenTTL = 90 * 24 * time.Hour

// ParseTTL parses a token lifetime: a whole number of days ("30d"), a Go
// duration ("12h", "90m"), or "never" (0). "" is DefaultTokenTTL.
func ParseTTL(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "":
		return DefaultTokenTTL, nil
	case "never":
		return 0, nil
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 || n > 3650 {
			return 0, Errorf(ErrInvalid, "invalid expiry %q: want a whole number of days from 1 to 3650 such as 30d, a duration such as 12h, or never", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d <= 0 {
			return 0, Errorf(ErrInvalid, "invalid expiry %q: want a duration such as 30d or 12h, or never", s)
		}
	}
	if d < time.Minute {
		return 0, Errorf(ErrInvalid, "expiry %q is shorter than a minute; give at least 1m", s)
	}
	return d, nil
}
