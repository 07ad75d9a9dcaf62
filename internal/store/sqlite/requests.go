package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

const (
	requestCols      = `id, project, pool, gpus, cpus, memory, jobs, until_at, reason, requester, state, decider, decided_at, note, created_at`
	insertRequestSQL = `INSERT INTO quota_requests (project, pool, gpus, cpus, memory, jobs, until_at, reason, requester, state, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?)`
	getRequestSQL    = `SELECT ` + requestCols + ` FROM quota_requests WHERE id = ?`
	listRequestsSQL  = `SELECT ` + requestCols + ` FROM quota_requests WHERE (? = '' OR project = ?) AND (? = '' OR pool = ?) ORDER BY id DESC`
	decideRequestSQL = `UPDATE quota_requests SET state = ?, decider = ?, decided_at = ?, note = ? WHERE id = ? AND state = 'pending'`
	activeGrantsSQL  = `SELECT ` + requestCols + ` FROM quota_requests WHERE state = 'approved' AND until_at > ? ORDER BY id`
	requestStateSQL  = `SELECT state FROM quota_requests WHERE id = ?`
)

func scanRequest(sc rowScanner) (domain.QuotaRequest, error) {
	var (
		r          domain.QuotaRequest
		mem, until int64
		created    int64
		decided    sql.NullInt64
		state      string
	)
	if err := sc.Scan(&r.ID, &r.Project, &r.Pool, &r.Extra.GPUs, &r.Extra.CPUs, &mem, &r.Extra.Jobs, &until,
		&r.Reason, &r.Requester, &state, &r.Decider, &decided, &r.Note, &created); err != nil {
		return r, err
	}
	r.Extra.Memory = domain.ByteSize(mem)
	r.Until = time.Unix(0, until).UTC()
	r.CreatedAt = time.Unix(0, created).UTC()
	r.DecidedAt = timeOf(decided)
	r.State = domain.RequestState(state)
	return r, nil
}

// CreateRequest stores a pending compute request.
func (s *Store) CreateRequest(ctx context.Context, r domain.QuotaRequest, audit domain.AuditRecord) (domain.QuotaRequest, error) {
	action := fmt.Sprintf("create compute request of project %q in pool %q", r.Project, r.Pool)
	err := s.write(ctx, func(w *writer) error {
		var n int
		if err := w.queryRow(poolExistsSQL, r.Pool).Scan(&n); err != nil {
			return interpretError(action, err)
		}
		if n == 0 {
			return fmt.Errorf("%s: pool %q does not exist: %w", action, r.Pool, store.ErrNotFound)
		}
		res, err := w.exec(insertRequestSQL, r.Project, r.Pool, r.Extra.GPUs, r.Extra.CPUs, int64(r.Extra.Memory), r.Extra.Jobs,
			r.Until.UnixNano(), r.Reason, r.Requester, r.CreatedAt.UnixNano())
		if err != nil {
			return interpretError(action, err)
		}
		r.ID, err = res.LastInsertId()
		r.State = domain.RequestPending
		r.Until, r.CreatedAt = normTime(r.Until), normTime(r.CreatedAt)
		return interpretError(action, err)
	}, withAudit(audit))
	return r, err
}

// GetRequest returns one compute request.
func (s *Store) GetRequest(ctx context.Context, id int64) (domain.QuotaRequest, error) {
	if err := s.checkOpen(); err != nil {
		return domain.QuotaRequest{}, err
	}
	st, err := s.readStmt(ctx, getRequestSQL)
	if err != nil {
		return domain.QuotaRequest{}, interpretError("get compute request", err)
	}
	r, err := scanRequest(st.QueryRowContext(ctx, id))
	return r, interpretError(fmt.Sprintf("get compute request %d", id), err)
}

func (s *Store) queryRequests(ctx context.Context, query string, args ...any) ([]domain.QuotaRequest, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	st, err := s.readStmt(ctx, query)
	if err != nil {
		return nil, interpretError("list compute requests", err)
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return nil, interpretError("list compute requests", err)
	}
	defer rows.Close()
	var out []domain.QuotaRequest
	for rows.Next() {
		r, err := scanRequest(rows)
		if err != nil {
			return nil, interpretError("list compute requests", err)
		}
		out = append(out, r)
	}
	return out, interpretError("list compute requests", rows.Err())
}

// ListRequests returns compute requests newest first.
func (s *Store) ListRequests(ctx context.Context, project, pool string) ([]domain.QuotaRequest, error) {
	return s.queryRequests(ctx, listRequestsSQL, project, project, pool, pool)
}

// ActiveGrants returns the approved requests still in force at now.
func (s *Store) ActiveGrants(ctx context.Context, now time.Time) ([]domain.QuotaRequest, error) {
	return s.queryRequests(ctx, activeGrantsSQL, now.UnixNano())
}

// DecideRequest approves or denies a pending request.
func (s *Store) DecideRequest(ctx context.Context, id int64, to domain.RequestState, decider string, at time.Time, note string, audit domain.AuditRecord) (domain.QuotaRequest, error) {
	action := fmt.Sprintf("decide compute request %d", id)
	if to != domain.RequestApproved && to != domain.RequestDenied {
		return domain.QuotaRequest{}, fmt.Errorf("%s: %q is not a decision: %w", action, to, store.ErrInvalid)
	}
	var out domain.QuotaRequest
	err := s.write(ctx, func(w *writer) error {
		res, err := w.exec(decideRequestSQL, string(to), decider, at.UnixNano(), note, id)
		if err != nil {
			return interpretError(action, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			var state string
			if err := w.queryRow(requestStateSQL, id).Scan(&state); errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("%s: it does not exist: %w", action, store.ErrNotFound)
			}
			return fmt.Errorf("%s: it is already %s: %w", action, state, store.ErrConflict)
		}
		out, err = scanRequest(w.queryRow(getRequestSQL, id))
		return interpretError(action, err)
	}, withAudit(audit))
	return out, err
}
