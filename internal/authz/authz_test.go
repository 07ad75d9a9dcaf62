package authz

import (
	"slices"
	"strings"
	"testing"

	"trainyard/internal/domain"
)

// principals of the matrix, by row name. Project roles are in "vision"; the
// job token is for attempt 1 of job 7.
func matrixPrincipals() map[string]Principal {
	in := func(r domain.Role) []domain.ProjectRole {
		return []domain.ProjectRole{{Project: "vision", Role: r}}
	}
	return map[string]Principal{
		"admin":          {Subject: "root", Roles: []domain.Role{domain.RoleAdmin}, TokenID: 1},
		"resource-admin": {Subject: "ops", Roles: []domain.Role{domain.RoleResourceAdmin}, TokenID: 2},
		"auditor":        {Subject: "aud", Roles: []domain.Role{domain.RoleAuditor}, TokenID: 3},
		"lead":           {Subject: "lee", Projects: in(domain.RoleLead), TokenID: 4},
		"member":         {Subject: "alice", Projects: in(domain.RoleMember), TokenID: 5},
		"viewer":         {Subject: "vic", Projects: in(domain.RoleViewer), TokenID: 6},
		"none":           {Subject: "nobody", TokenID: 7},
		"job":            {JobID: 7, Attempt: 1, TokenID: 8},
	}
}

// scopes: the caller's own resource, another member's in the same project,
// and one of another project.
const (
	own          = "own"
	otherMember  = "other-member"
	otherProject = "other-project"
)

func resourceFor(a Action, scope string, p Principal) Resource {
	kind, _, _ := strings.Cut(string(a), ".")
	r := Resource{Kind: kind}
	switch scope {
	case own:
		r.ID, r.Project, r.Owner = "1", "vision", p.Subject
		if p.IsJob() {
			r.Owner = "alice"
		}
	case otherMember:
		r.ID, r.Project, r.Owner = "2", "vision", "bob"
	case otherProject:
		r.ID, r.Project, r.Owner = "3", "audio", "carol"
	}
	if a == AttemptReport || a == AttemptResume {
		r.Kind = "attempt"
		r.ID = map[string]string{own: "7/1", otherMember: "8/1", otherProject: "9/1"}[scope]
	}
	return r
}

var (
	everyone  = []string{"admin", "resource-admin", "auditor", "lead", "member", "viewer", "none"}
	withRole  = []string{"admin", "resource-admin", "auditor", "lead", "member", "viewer"}
	resources = []string{"admin", "resource-admin"}
)

// allowed lists, per action and scope, the rows that may act; every other
// cell must be denied.
var allowed = map[Action]map[string][]string{
	JobSubmit: {own: {"admin", "lead", "member"}, otherMember: {"admin", "lead", "member"}, otherProject: {"admin"}},
	JobRead: {own: withRole, otherMember: {"admin", "resource-admin", "auditor", "lead", "viewer"},
		otherProject: {"admin", "resource-admin", "auditor"}},
	JobCancel:    {own: {"admin", "lead", "member"}, otherMember: {"admin", "lead"}, otherProject: {"admin"}},
	JobHold:      {own: {"admin", "lead", "member"}, otherMember: {"admin", "lead"}, otherProject: {"admin"}},
	JobPriority:  {own: {"admin", "lead", "member"}, otherMember: {"admin", "lead"}, otherProject: {"admin"}},
	PoolRead:     {own: withRole, otherMember: withRole, otherProject: withRole},
	QuotaRead:    {own: withRole, otherMember: withRole, otherProject: withRole},
	ProjectRead:  {own: withRole, otherMember: withRole, otherProject: withRole},
	QueueRead:    {own: withRole, otherMember: withRole, otherProject: withRole},
	PoolWrite:    {own: resources, otherMember: resources, otherProject: resources},
	QuotaWrite:   {own: resources, otherMember: resources, otherProject: resources},
	ProjectWrite: {own: resources, otherMember: resources, otherProject: resources},
	QuotaApprove: {own: {"admin"}, otherMember: resources, otherProject: resources}, // own: the requester
	QuotaRequest: {own: {"admin", "lead", "member"}, otherMember: {"admin", "lead", "member"}, otherProject: {"admin"}},
	UserRead:     {own: {"admin", "auditor"}, otherMember: {"admin", "auditor"}, otherProject: {"admin", "auditor"}},
	AuditRead:    {own: {"admin", "auditor"}, otherMember: {"admin", "auditor"}, otherProject: {"admin", "auditor"}},
	UserWrite:    {own: {"admin"}, otherMember: {"admin"}, otherProject: {"admin"}},
	AlertTest:    {own: {"admin"}, otherMember: {"admin"}, otherProject: {"admin"}},
	ArtifactGC:   {own: {"admin", "resource-admin"}, otherMember: {"admin", "resource-admin"}, otherProject: {"admin", "resource-admin"}},
	RoleWrite:    {own: {"admin", "lead"}, otherMember: {"admin", "lead"}, otherProject: {"admin"}},
	TokenCreate:  {own: everyone, otherMember: {"admin"}, otherProject: {"admin"}},
	TokenRevoke:  {own: everyone, otherMember: {"admin"}, otherProject: {"admin"}},
	TokenRead:    {own: everyone, otherMember: {"admin", "auditor"}, otherProject: {"admin", "auditor"}},
	SecretRead: {own: {"admin", "auditor", "lead", "member"}, otherMember: {"admin", "auditor", "lead", "member"},
		otherProject: {"admin", "auditor"}},
	SecretWrite:   {own: {"admin", "lead"}, otherMember: {"admin", "lead"}, otherProject: {"admin"}},
	SecretRotate:  {own: {"admin", "lead"}, otherMember: {"admin", "lead"}, otherProject: {"admin"}},
	AttemptReport: {own: {"admin", "job"}, otherMember: {"admin"}, otherProject: {"admin"}},
	AttemptResume: {own: {"admin", "job"}, otherMember: {"admin"}, otherProject: {"admin"}},
	TemplateRead:  {own: withRole, otherMember: withRole, otherProject: withRole},
	TemplateWrite: {own: {"admin", "lead", "member"}, otherMember: {"admin", "lead", "member"}, otherProject: {"admin"}},
	EnvRead:       {own: withRole, otherMember: withRole, otherProject: withRole},
	EnvWrite:      {own: resources, otherMember: resources, otherProject: resources},
	CostRead: {own: withRole, otherMember: withRole,
		otherProject: {"admin", "resource-admin", "auditor"}},
	BudgetWrite: {own: resources, otherMember: resources, otherProject: resources},
	NotifyWrite: {own: everyone, otherMember: {"admin"}, otherProject: {"admin"}},
}

func TestDecideMatrix(t *testing.T) {
	principals := matrixPrincipals()
	if len(allowed) != len(Actions()) {
		t.Fatalf("the matrix covers %d actions, Actions() lists %d", len(allowed), len(Actions()))
	}
	var unexpectedAllows, unexpectedDenials, cells int
	for _, a := range Actions() {
		for _, scope := range []string{own, otherMember, otherProject} {
			want, ok := allowed[a][scope]
			if !ok {
				t.Fatalf("matrix lacks %s/%s", a, scope)
			}
			for name, p := range principals {
				cells++
				d := Decide(p, a, resourceFor(a, scope, p))
				exp := slices.Contains(want, name)
				if d.Reason == "" {
					t.Errorf("%s %s on %s: empty reason", name, a, scope)
				}
				switch {
				case d.Allow && !exp:
					unexpectedAllows++
					t.Errorf("UNEXPECTED ALLOW: %s may %s on %s resource (%s)", name, a, scope, d.Reason)
				case !d.Allow && exp:
					unexpectedDenials++
					t.Errorf("unexpected denial: %s may not %s on %s resource (%s)", name, a, scope, d.Reason)
				}
			}
		}
	}
	t.Logf("%d cells, %d unexpected allows, %d unexpected denials", cells, unexpectedAllows, unexpectedDenials)
}

func TestDecideListing(t *testing.T) {
	ps := matrixPrincipals()
	tests := map[string]struct {
		who     string
		project string
		allow   bool
	}{
		"admin lists all":              {"admin", "", true},
		"auditor lists all":            {"auditor", "", true},
		"member lists (filtered)":      {"member", "", true},
		"member lists own project":     {"member", "vision", true},
		"member lists other project":   {"member", "audio", false},
		"viewer lists own project":     {"viewer", "vision", true},
		"no role may not list":         {"none", "", false},
		"job token may not list":       {"job", "", false},
		"resource-admin lists project": {"resource-admin", "audio", true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d := Decide(ps[tc.who], JobRead, Resource{Kind: "job", Project: tc.project})
			if d.Allow != tc.allow {
				t.Errorf("allow = %v (%s), want %v", d.Allow, d.Reason, tc.allow)
			}
		})
	}
}

func TestVisibleJobs(t *testing.T) {
	ps := matrixPrincipals()
	multi := Principal{Subject: "mia", Projects: []domain.ProjectRole{
		{Project: "audio", Role: domain.RoleViewer}, {Project: "nlp", Role: domain.RoleMember},
		{Project: "vision", Role: domain.RoleLead}, {Project: "vision", Role: domain.RoleViewer}}}
	tests := map[string]struct {
		p    Principal
		want Visible
	}{
		"admin":   {ps["admin"], Visible{All: true}},
		"auditor": {ps["auditor"], Visible{All: true}},
		"member":  {ps["member"], Visible{Submitter: "alice"}},
		"viewer":  {ps["viewer"], Visible{Projects: []string{"vision"}, Submitter: "vic"}},
		"job":     {ps["job"], Visible{}},
		"multi":   {multi, Visible{Projects: []string{"audio", "vision"}, Submitter: "mia"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := VisibleJobs(tc.p)
			if got.All != tc.want.All || got.Submitter != tc.want.Submitter || !slices.Equal(got.Projects, tc.want.Projects) {
				t.Errorf("VisibleJobs = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestDecideCodePrincipal(t *testing.T) {
	// The server acting for itself sets Role directly.
	p := Principal{Subject: "system", Role: domain.RoleAdmin}
	if d := Decide(p, QuotaWrite, Resource{Kind: "quota"}); !d.Allow {
		t.Errorf("Role admin denied: %s", d.Reason)
	}
}

func TestDecideMultipleProjectRoles(t *testing.T) {
	// The strongest role in the project wins, whatever the order.
	p := Principal{Subject: "mia", Projects: []domain.ProjectRole{
		{Project: "vision", Role: domain.RoleLead}, {Project: "vision", Role: domain.RoleViewer}}}
	if d := Decide(p, JobCancel, Resource{Kind: "job", ID: "2", Project: "vision", Owner: "bob"}); !d.Allow {
		t.Errorf("lead+viewer may not cancel: %s", d.Reason)
	}
	if d := Decide(p, JobCancel, Resource{Kind: "job", ID: "2", Project: "visions", Owner: "bob"}); d.Allow {
		t.Error("a role in vision allowed canceling in visions")
	}
}

func BenchmarkDecide(b *testing.B) {
	ps := matrixPrincipals()
	member := ps["member"]
	member.Projects = []domain.ProjectRole{
		{Project: "audio", Role: domain.RoleViewer}, {Project: "nlp", Role: domain.RoleMember},
		{Project: "speech", Role: domain.RoleViewer}, {Project: "vision", Role: domain.RoleMember}}
	cases := map[string]struct {
		p Principal
		a Action
		r Resource
	}{
		"member-cancel-own":   {member, JobCancel, Resource{Kind: "job", ID: "1", Project: "vision", Owner: "alice"}},
		"member-read-other":   {member, JobRead, Resource{Kind: "job", ID: "2", Project: "vision", Owner: "bob"}},
		"admin-quota-write":   {ps["admin"], QuotaWrite, Resource{Kind: "quota", Project: "vision"}},
		"job-attempt-report":  {ps["job"], AttemptReport, Resource{Kind: "attempt", ID: "7/1"}},
		"auditor-pool-denied": {ps["auditor"], PoolWrite, Resource{Kind: "pool", ID: "standard"}},
	}
	for name, c := range cases {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = Decide(c.p, c.a, c.r)
			}
		})
	}
}

// TestVisibleCost: global readers see every project's spend; others the
// projects they hold any role in, members included; job tokens none.
func TestVisibleCost(t *testing.T) {
	ps := matrixPrincipals()
	for name, want := range map[string]string{
		"admin": "all", "resource-admin": "all", "auditor": "all",
		"lead": "[vision]", "member": "[vision]", "viewer": "[vision]", "none": "[]", "job": "[]",
	} {
		v := VisibleCost(ps[name])
		got := "all"
		if !v.All {
			got = "[" + strings.Join(v.Projects, " ") + "]"
		}
		if got != want {
			t.Errorf("%s sees %s, want %s", name, got, want)
		}
		if v.Submitter != "" {
			t.Errorf("%s: the spend filter goes by project, not submitter: %+v", name, v)
		}
	}
}

// TestJobTokenResume: a job token reads the checkpoints of its own
// attempt's job (AttemptResume on "job/attempt") and nothing else of any
// job: not another attempt's, not another job's, and not JobRead, which
// would open show, logs and artifacts. Users' actions are unchanged.
func TestJobTokenResume(t *testing.T) {
	ps := matrixPrincipals()
	job := ps["job"] // attempt 1 of job 7
	for _, c := range []struct {
		name  string
		a     Action
		r     Resource
		allow bool
	}{
		{"own attempt", AttemptResume, Resource{Kind: "attempt", ID: "7/1", Project: "vision", Owner: "alice"}, true},
		{"another attempt of its job", AttemptResume, Resource{Kind: "attempt", ID: "7/2", Project: "vision", Owner: "alice"}, false},
		{"another job", AttemptResume, Resource{Kind: "attempt", ID: "8/1", Project: "vision", Owner: "alice"}, false},
		{"a prefix of its ref", AttemptResume, Resource{Kind: "attempt", ID: "7/", Project: "vision"}, false},
		{"a longer ref", AttemptResume, Resource{Kind: "attempt", ID: "7/10", Project: "vision"}, false},
		{"no ref", AttemptResume, Resource{Kind: "attempt"}, false},
		{"read its job", JobRead, Resource{Kind: "job", ID: "7", Project: "vision", Owner: "alice"}, false},
		{"list jobs", JobRead, Resource{Kind: "job"}, false},
	} {
		d := Decide(job, c.a, c.r)
		if d.Allow != c.allow {
			t.Errorf("%s: job token %s on %+v: allow %v (%s), want %v", c.name, c.a, c.r, d.Allow, d.Reason, c.allow)
		}
	}
	// Users resume nothing through this action (they read checkpoints with
	// job.read); only admin, who may do everything.
	for name, p := range ps {
		if name == "job" {
			continue
		}
		d := Decide(p, AttemptResume, Resource{Kind: "attempt", ID: "7/1", Project: "vision", Owner: p.Subject})
		if d.Allow != (name == "admin") {
			t.Errorf("%s: AttemptResume allow %v (%s)", name, d.Allow, d.Reason)
		}
	}
}
