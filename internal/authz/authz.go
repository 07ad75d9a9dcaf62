// Package authz decides who may do what: one pure function, Decide, used by
// every API route through the service layer. It performs no I/O.
package authz

// Action is one kind of operation a caller may attempt.
type Action string

// Actions. Every API route maps to exactly one.
const (
	JobSubmit Action = "job.submit"
	JobRead   Action = "job.read" // show, list, why, logs
	JobCancel Action = "job.cancel"

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
)

// Resource is what an action applies to. Empty fields mean "not specific"
// (e.g. listing).
type Resource struct {
	Kind    string // "job", "pool", "quota", "project", "user", "token", "audit", "secret", "request"
	ID      string
	Project string // owning project, when the resource belongs to one
	Owner   string // owning user (a job's submitter, a token's user)
}
