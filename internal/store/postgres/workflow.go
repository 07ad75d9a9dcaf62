package postgres

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/column"
	"trainyard/internal/store/sqlstore"
)

const (
	nextSweepIDSQL = `SELECT nextval('sweeps_id_seq')`
	insertSweepSQL = `INSERT INTO sweeps (id, name, project, submitter, created_at, method, members, max_parallel, spec_json, idempotency_key)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`
)

var sweepByKeySQL = sqlstore.QSweepByKey.SQL(sqlstore.Postgres)

// CreateSweep implements store.Workflows: the sweep's row and every member
// in one transaction, the members' rows in one multi-row INSERT per table.
// Only reads go to the server before the members are known to be good
// (the sweep's and the members' ids): a member that fails its checks
// leaves nothing behind, and the rows are written after.
func (s *Store) CreateSweep(ctx context.Context, sw domain.Sweep, members func(id int64) ([]store.NewJob, error), audit domain.AuditRecord) (domain.Sweep, []domain.Job, bool, error) {
	var jobs []domain.Job
	var existing *domain.Sweep
	err := s.write(ctx, func(w *writer) error {
		jobs, existing = nil, nil
		if sw.IdempotencyKey != "" {
			found, err := sqlstore.SweepByKey(w.queryRow(sweepByKeySQL, sw.Submitter, sw.IdempotencyKey), pgx.ErrNoRows)
			if err != nil {
				return interpretError("create sweep: look up idempotency key", err)
			}
			if found != nil {
				existing = found
				w.audit.skip = true // a replay changes nothing
				return nil
			}
		}
		var id int64
		if err := w.queryRow(nextSweepIDSQL).Scan(&id); err != nil {
			return interpretError("create sweep: allocate its id", err)
		}
		news, err := members(id)
		if err != nil {
			return err
		}
		if len(news) > 0 {
			// One round trip for every member's id.
			var ids []int64
			if err := w.queryRow(allocIDsSQL, len(news)).Scan(&ids); err != nil {
				return interpretError("create sweep: allocate job ids", err)
			}
			w.ids = append(w.ids, ids...)
			w.lastID = max(w.lastID, slices.Max(ids))
		}
		if jobs, err = column.AddMembers(news, id, w.addJob); err != nil {
			return err
		}
		row := sw
		row.ID, row.Members = id, len(jobs)
		args, err := sqlstore.SweepArgs(row)
		if err != nil {
			return err
		}
		w.queue("create sweep", insertSweepSQL, append([]any{id}, args...)...)
		sw = row
		w.audit.id = id // fills "{id}" in the audit record's Target
		return nil
	}, withAudit(audit))
	if err != nil {
		return domain.Sweep{}, nil, false, err
	}
	if existing != nil {
		jobs, err := s.SweepJobs(ctx, existing.ID)
		return *existing, jobs, false, err
	}
	return sw, jobs, true, nil
}
