package domain

import "time"

// RequestState is where a compute request is in its review.
type RequestState string

const (
	// RequestPending: waiting for a resource admin (or an admin).
	RequestPending RequestState = "pending"
	// RequestApproved: granted; it raises the quota until Until.
	RequestApproved RequestState = "approved"
	// RequestDenied: refused; Note says why.
	RequestDenied RequestState = "denied"
)

// QuotaRequest asks for more capacity for a project in a pool, for a while
// (R37). Once approved it is a grant: Extra is added to the project's
// guaranteed quota until Until, then the quota returns to what it was, by
// itself.
type QuotaRequest struct {
	ID        int64
	Project   string
	Pool      string
	Extra     Limits // added to the quota's guarantee while the grant is active
	Until     time.Time
	Reason    string
	Requester string
	State     RequestState
	Decider   string
	DecidedAt time.Time
	Note      string
	CreatedAt time.Time
}

// Active reports whether the request is an approved grant in force at now.
func (r QuotaRequest) Active(now time.Time) bool {
	return r.State == RequestApproved && now.Before(r.Until)
}

// Status is State, except that an approved grant past Until reads "expired".
func (r QuotaRequest) Status(now time.Time) string {
	if r.State == RequestApproved && !now.Before(r.Until) {
		return "expired"
	}
	return string(r.State)
}

// EffectiveQuotas adds the grants active at now to the quotas they name. A
// grant for a project without a quota in that pool creates one (normal
// priority ceiling). The result is sorted like the input, new quotas last in
// grant order; the input is not modified.
func EffectiveQuotas(quotas []Quota, grants []QuotaRequest, now time.Time) []Quota {
	out := make([]Quota, len(quotas))
	copy(out, quotas)
	for _, g := range grants {
		if !g.Active(now) {
			continue
		}
		i := -1
		for k := range out {
			if out[k].Project == g.Project && out[k].Pool == g.Pool {
				i = k
				break
			}
		}
		if i < 0 {
			out = append(out, Quota{Project: g.Project, Pool: g.Pool, MaxPriority: PriorityNormal})
			i = len(out) - 1
		}
		q := &out[i]
		q.Guaranteed.GPUs += g.Extra.GPUs
		// CPUs and memory of 0 mean "not limited": a grant keeps them so.
		if q.Guaranteed.CPUs > 0 {
			q.Guaranteed.CPUs += g.Extra.CPUs
		}
		if q.Guaranteed.Memory > 0 {
			q.Guaranteed.Memory += g.Extra.Memory
		}
		if q.Guaranteed.Jobs > 0 {
			q.Guaranteed.Jobs += g.Extra.Jobs
		}
	}
	return out
}

// GrantNotice warns that a running job's attempt holds capacity only a
// compute grant gives its project: when the grant ends soon, the attempt
// is preempted to reclaim it.
type GrantNotice struct {
	Job     Job
	Attempt int
	Grant   QuotaRequest
}
