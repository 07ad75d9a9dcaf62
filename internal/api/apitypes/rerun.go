package apitypes

// RerunRequest is the body of POST /api/v1/jobs/{id}/rerun: the changes to
// make to the original job's spec before submitting it again. An empty body
// re-runs the spec unchanged.
type RerunRequest struct {
	// Env, when set, replaces the spec's env ("name@version" or "host").
	Env string `json:"env,omitempty"`
	// Set holds "key=value" overrides, as in SubmitRequest.
	Set []string `json:"set,omitempty"`
	// Resume starts the new job from the original's latest complete
	// checkpoint; FromCheckpoint from the one named (implies Resume). The
	// new job's spec records it (resume), and so its lineage.
	Resume         bool   `json:"resume,omitempty"`
	FromCheckpoint string `json:"from_checkpoint,omitempty"`
}
