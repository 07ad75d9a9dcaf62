package apitypes

// PriorityRequest is the body of POST /api/v1/jobs/{id}/priority.
type PriorityRequest struct {
	// Priority is the waiting job's new class: low, normal, high or
	// urgent, at most what the job's project may use in its pool.
	Priority string `json:"priority"`
}
