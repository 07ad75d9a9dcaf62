package sqlstore

import (
	"context"
	"strconv"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// qSameSpec reads the submitter's newest jobs through the (submitter, id)
// index, then keeps those of one snapshot that are live or recent.
var qSameSpec = Q(`SELECT ` + ListCols + ` FROM (SELECT ` + ListCols + ` FROM jobs WHERE submitter = ?
	ORDER BY id DESC LIMIT ` + strconv.Itoa(store.DuplicateScan) + `) AS newest
	WHERE spec_hash = ? AND (state IN (?, ?, ?, ?) OR submitted_at >= ?) ORDER BY id DESC`)

// SameSpecJobs implements store.Jobs.
func (s Shared) SameSpecJobs(ctx context.Context, submitter, specHash string, since time.Time) ([]domain.Job, error) {
	return queryAll(ctx, s, "list jobs of the same spec", func(row Row) (domain.Job, error) { return ScanJob(row, false) },
		qSameSpec, submitter, specHash, string(domain.JobQueued), string(domain.JobHeld), string(domain.JobStarting), string(domain.JobRunning), since.UnixNano())
}
