package sqlite

import (
	"context"
	"database/sql"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/column"
	"trainyard/internal/store/sqlstore"
)

var (
	insertSweepSQL = `INSERT INTO sweeps (name, project, submitter, created_at, method, members, max_parallel, spec_json, idempotency_key)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
	sweepMembersSQL = `UPDATE sweeps SET members = ? WHERE id = ?`
	sweepByKeySQL   = sqlstore.QSweepByKey.SQL(sqlstore.SQLite)
)

// CreateSweep implements store.Workflows: the sweep's row and every member
// in one transaction.
func (s *Store) CreateSweep(ctx context.Context, sw domain.Sweep, members func(id int64) ([]store.NewJob, error), audit domain.AuditRecord) (domain.Sweep, []domain.Job, bool, error) {
	args, err := sqlstore.SweepArgs(sw)
	if err != nil {
		return domain.Sweep{}, nil, false, err
	}
	var jobs []domain.Job
	var existing *domain.Sweep
	err = s.write(ctx, func(w *writer) error {
		jobs, existing = nil, nil
		if sw.IdempotencyKey != "" {
			found, err := sqlstore.SweepByKey(w.queryRow(sweepByKeySQL, sw.Submitter, sw.IdempotencyKey), sql.ErrNoRows)
			if err != nil {
				return interpretError("create sweep: look up idempotency key", err)
			}
			if found != nil {
				existing = found
				w.audit.skip = true // a replay changes nothing
				return nil
			}
		}
		res, err := w.exec(insertSweepSQL, args...)
		if err != nil {
			return interpretError("create sweep", err)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return interpretError("create sweep: read its id", err)
		}
		sw.ID = id
		news, err := members(id)
		if err != nil {
			return err
		}
		if jobs, err = column.AddMembers(news, id, w.addJob); err != nil {
			return err
		}
		sw.Members = len(jobs)
		if _, err := w.exec(sweepMembersSQL, int64(len(jobs)), id); err != nil {
			return interpretError("create sweep: count its members", err)
		}
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
