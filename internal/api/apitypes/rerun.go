package apitypes

// RerunRequest is the body of POST /api/v1/jobs/{id}/rerun: the changes to
// make to the original job's spec before submitting it again. An empty body
// re-runs the spec unchanged.
type RerunRequest struct {
	// Env, when set, replaces the spec's env ("name@version" or "host").
	Env string `json:"env,omitempty"`
	// Set holds "key=value" overrides, as in SubmitRequest.
	Set []string `json:"set,omitempty"`
}
