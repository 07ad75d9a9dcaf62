package sqlstore

import (
	"context"
	"strconv"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// qRecentRuns walks the submitter's jobs of one name from the newest down,
// as qRecentUsage does, bounded below by the oldest of the submitter's
// newest DuplicateScan ids, and stops at the limit.
var qRecentRuns = Q(`SELECT a.started_at, a.finished_at
	FROM jobs j JOIN attempts a ON a.job_id = j.id
	WHERE j.submitter = ? AND j.name = ? AND a.state = ? AND a.started_at IS NOT NULL AND a.finished_at > a.started_at
	AND j.id >= (SELECT COALESCE(MIN(id), 0) FROM (SELECT id FROM jobs WHERE submitter = ? ORDER BY id DESC LIMIT ` + strconv.Itoa(store.DuplicateScan) + `) AS newest)
	ORDER BY j.id DESC, a.number DESC LIMIT ?`)

// RecentRuns implements store.Jobs.
func (s Shared) RecentRuns(ctx context.Context, submitter, name string, limit int) ([]time.Duration, error) {
	if limit <= 0 {
		return nil, nil
	}
	return queryAll(ctx, s, "read recent run times", func(row Row) (time.Duration, error) {
		var started, finished int64
		err := row.Scan(&started, &finished)
		return time.Duration(finished - started), err
	}, qRecentRuns, submitter, name, string(domain.AttemptSucceeded), submitter, int64(limit))
}
