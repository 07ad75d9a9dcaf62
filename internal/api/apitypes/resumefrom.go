package apitypes

// ResumedFrom names the checkpoint of another job a job started from.
type ResumedFrom struct {
	Job        int64  `json:"job"`
	Checkpoint string `json:"checkpoint"`
}
