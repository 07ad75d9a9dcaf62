package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

const (
	requestCols      = `id, project, pool, gpus, cpus, memory, jobs, until_at, reason, requester, state, decider, decided_at, note, created_at`
	insertRequestSQL = `INSERT INTO quota_requests (project, pool, gpus, cpus, memory, jobs, until_at, reason, requester, state, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'pending', $10) RETURNING id`
	getRequestSQL    = `SELECT ` + requestCols + ` FROM quota_requests WHERE id = $1`
	listRequestsSQL  = `SELECT ` + requestCols + ` FROM quota_requests WHERE ($1 = '' OR project = $1) AND ($2 = '' OR pool = $2) ORDER BY id DESC`
	decideRequestSQL = `UPDATE quota_requests SET state = $1, decider = $2, decided_at = $3, note = $4 WHERE id = $5 AND state = 'pending'
		RETURNING ` + requestCols
	activeGrantsSQL = `SELECT ` + requestCols + ` FROM quota_requests WHERE state = 'approved' AND until_at > $1 ORDER BY id`
	requestStateSQL = `SELECT state FROM quota_requests WHERE id = $1`
)

func scanRequest(sc rowScanner) (domain.QuotaRequest, error) {
	var (
		r               domain.QuotaRequest
		gpus, mem, jobs int64
		until, created  int64
		decided         pgtype.Int8
		state           string
	)
	if err := sc.Scan(&r.ID, &r.Project, &r.Pool, &gpus, &r.Extra.CPUs, &mem, &jobs, &until,
		&r.Reason, &r.Requester, &state, &r.Decider, &decided, &r.Note, &created); err != nil {
		return r, err
	}
	r.Extra.GPUs, r.Extra.Memory, r.Extra.Jobs = int(gpus), domain.ByteSize(mem), int(jobs)
	r.Until = unixNano(until)
	r.CreatedAt = unixNano(created)
	r.DecidedAt = timeOf(decided)
	r.State = domain.RequestState(state)
	return r, nil
}

// CreateRequest stores a pending compute request.
func (s *Store) CreateRequest(ctx context.Context, r domain.QuotaRequest, audit domain.AuditRecord) (domain.QuotaRequest, error) {
	action := fmt.Sprintf("create compute request of project %q in pool %q", r.Project, r.Pool)
	out := r
	err := s.write(ctx, func(w *writer) error {
		var n int64
		if err := w.queryRow(poolExistsSQL, r.Pool).Scan(&n); err != nil {
			return interpretError(action, err)
		}
		if n == 0 {
			return fmt.Errorf("%s: pool %q does not exist: %w", action, r.Pool, store.ErrNotFound)
		}
		out = r
		err := w.queryRow(insertRequestSQL, r.Project, r.Pool, int64(r.Extra.GPUs), r.Extra.CPUs, int64(r.Extra.Memory), int64(r.Extra.Jobs),
			r.Until.UnixNano(), r.Reason, r.Requester, r.CreatedAt.UnixNano()).Scan(&out.ID)
		out.State = domain.RequestPending
		out.Until, out.CreatedAt = normTime(r.Until), normTime(r.CreatedAt)
		return interpretError(action, err)
	}, withAudit(audit))
	return out, err
}

// GetRequest returns one compute request.
func (s *Store) GetRequest(ctx context.Context, id int64) (domain.QuotaRequest, error) {
	if err := s.checkOpen(); err != nil {
		return domain.QuotaRequest{}, err
	}
	r, err := scanRequest(s.pool.QueryRow(ctx, getRequestSQL, id))
	return r, interpretError(fmt.Sprintf("get compute request %d", id), err)
}

func (s *Store) queryRequests(ctx context.Context, query string, args ...any) ([]domain.QuotaRequest, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, query, args...)
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
	return s.queryRequests(ctx, listRequestsSQL, project, pool)
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
		var err error
		out, err = scanRequest(w.queryRow(decideRequestSQL, string(to), decider, at.UnixNano(), note, id))
		if !errors.Is(err, pgx.ErrNoRows) {
			return interpretError(action, err)
		}
		var state string
		if err := w.queryRow(requestStateSQL, id).Scan(&state); errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%s: it does not exist: %w", action, store.ErrNotFound)
		} else if err != nil {
			return interpretError(action, err)
		}
		return fmt.Errorf("%s: it is already %s: %w", action, state, store.ErrConflict)
	}, withAudit(audit))
	return out, err
}
