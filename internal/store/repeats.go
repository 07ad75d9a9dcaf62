package store

import "trainyard/internal/domain"

// Repeats is what a submit read of its submitter's jobs of the same spec
// (as SameSpecJobs returns them), when its store reads them in the
// transaction that stores the job.
type Repeats struct {
	Jobs []domain.Job // newest first
	More bool         // there are more than Jobs
	Err  error        // the look failed; the job is stored all the same
}
