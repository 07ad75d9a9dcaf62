package postgres

import (
	"context"
	"slices"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/column"
	"trainyard/internal/store/sqlstore"
)

var insertSweepSQL = sqlstore.SweepInsertQ.SQL(sqlstore.Postgres)

// CreateSweep implements store.Workflows: the sweep's row and every member
// in one transaction, the members' rows in one multi-row INSERT per table.
func (s *Store) CreateSweep(ctx context.Context, sw domain.Sweep, members func(id int64) ([]store.NewJob, error), audit domain.AuditRecord) (domain.Sweep, []domain.Job, error) {
	args, err := sqlstore.SweepArgs(sw)
	if err != nil {
		return domain.Sweep{}, nil, err
	}
	var jobs []domain.Job
	err = s.write(ctx, func(w *writer) error {
		var id int64
		if err := w.queryRow(insertSweepSQL, args...).Scan(&id); err != nil {
			return interpretError("create sweep", err)
		}
		sw.ID = id
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
		sw.Members = len(jobs)
		w.queue("create sweep: count its members", `UPDATE sweeps SET members = $1 WHERE id = $2`, len(jobs), id)
		w.audit.id = id // fills "{id}" in the audit record's Target
		return nil
	}, withAudit(audit))
	if err != nil {
		return domain.Sweep{}, nil, err
	}
	return sw, jobs, nil
}
