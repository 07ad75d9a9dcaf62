package sqlstore

import (
	"context"
	"strconv"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// qSameSpec finds the oldest of the submitter's newest DuplicateScan ids
// on the (submitter, id) index alone (stepping over the newer ones, which
// costs less than gathering them to take their minimum; none: the
// submitter has fewer, and all count), then walks the submitter's jobs of
// the snapshot from the newest down to it on (submitter, spec_hash, id),
// stopping after one more than it shows: a submit reads a handful of
// rows, however many jobs of that spec there are.
var qSameSpec = Q(`SELECT id, state, submitted_at, idempotency_key FROM jobs
	WHERE submitter = ? AND spec_hash = ? AND (state IN (?, ?, ?, ?) OR submitted_at >= ?)
	AND id >= COALESCE((SELECT id FROM jobs WHERE submitter = ? ORDER BY id DESC LIMIT 1 OFFSET ` + strconv.Itoa(store.DuplicateScan-1) + `), 0)
	ORDER BY id DESC LIMIT ` + strconv.Itoa(store.DuplicateShown+1))

// qSameSpecAfter is qSameSpec for a writer that knows where the
// submitter's newest DuplicateScan jobs start (SubmitterWindow): the
// oldest of them is found stepping over a given number of the
// submitter's ids from a given one up, rather than over all of them from
// the newest down.
var qSameSpecAfter = Q(`SELECT id, state, submitted_at, idempotency_key FROM jobs
	WHERE submitter = ? AND spec_hash = ? AND (state IN (?, ?, ?, ?) OR submitted_at >= ?)
	AND id >= COALESCE((SELECT id FROM jobs WHERE submitter = ? AND id >= ? ORDER BY id LIMIT 1 OFFSET ?), 0)
	ORDER BY id DESC LIMIT ` + strconv.Itoa(store.DuplicateShown+1))

// qSubmitterWindow counts the submitter's newest DuplicateScan jobs and
// returns the oldest one's id.
var qSubmitterWindow = Q(`SELECT COUNT(*), COALESCE(MIN(id), 0) FROM
	(SELECT id FROM jobs WHERE submitter = ? ORDER BY id DESC LIMIT ` + strconv.Itoa(store.DuplicateScan) + `)`)

// SameSpecJobs implements store.Jobs.
func (s Shared) SameSpecJobs(ctx context.Context, submitter, specHash string, since time.Time) (newest []domain.Job, more bool, err error) {
	r, err := s.b.Reader()
	if err != nil {
		return nil, false, err
	}
	q, args := SameSpecQuery(submitter, specHash, since)
	var jobs []domain.Job
	if err := r.Query(ctx, func(row Row) error {
		return SameSpecRow(row, &jobs, submitter, specHash)
	}, q, args...); err != nil {
		return nil, false, s.err("list jobs of the same spec", err)
	}
	newest, more = SameSpecNewest(jobs)
	return newest, more, nil
}

// SameSpecQuery returns SameSpecJobs's statement and arguments, for a
// store that runs it in a transaction of its own choosing; SameSpecRow
// reads one of its rows, and SameSpecNewest returns what SameSpecJobs
// returns of them.
func SameSpecQuery(submitter, specHash string, since time.Time) (Query, []any) {
	return qSameSpec, []any{submitter, specHash, string(domain.JobQueued), string(domain.JobHeld), string(domain.JobStarting),
		string(domain.JobRunning), since.UnixNano(), submitter}
}

// SameSpecAfterQuery is SameSpecQuery where the oldest of the
// submitter's newest DuplicateScan ids is its id skip places above from
// (counting from, when it is one of the submitter's, as 0). With from 0
// and skip 0 that is the submitter's oldest id, which counts every job.
func SameSpecAfterQuery(submitter, specHash string, since time.Time, from int64, skip int) (Query, []any) {
	return qSameSpecAfter, []any{submitter, specHash, string(domain.JobQueued), string(domain.JobHeld), string(domain.JobStarting),
		string(domain.JobRunning), since.UnixNano(), submitter, from, skip}
}

// SubmitterWindowQuery returns the statement that reads how many of the
// submitter's newest DuplicateScan jobs there are (fewer: it has no
// more) and the oldest one's id (0: none).
func SubmitterWindowQuery(submitter string) (Query, []any) {
	return qSubmitterWindow, []any{submitter}
}

// SameSpecRow reads a row of SameSpecQuery into a job it appends to
// *jobs, all of them in one allocation (a job is large).
func SameSpecRow(row Row, jobs *[]domain.Job, submitter, specHash string) error {
	if *jobs == nil {
		*jobs = make([]domain.Job, 0, store.DuplicateShown+1)
	}
	*jobs = append(*jobs, domain.Job{Submitter: submitter, SpecHash: specHash})
	j := &(*jobs)[len(*jobs)-1]
	var state string
	var at int64
	if err := row.Scan(&j.ID, &state, &at, &j.IdempotencyKey); err != nil {
		return err
	}
	j.State, j.SubmittedAt = domain.JobState(state), time.Unix(0, at).UTC()
	return nil
}

// SameSpecNewest returns the newest DuplicateShown of the rows of
// SameSpecQuery, and whether there are more.
func SameSpecNewest(jobs []domain.Job) (newest []domain.Job, more bool) {
	if len(jobs) > store.DuplicateShown {
		return jobs[:store.DuplicateShown], true
	}
	return jobs, false
}
