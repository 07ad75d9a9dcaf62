package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

const requestCols = `id, project, pool, gpus, cpus, memory, jobs, until_at, reason, requester, state, decider, decided_at, note, created_at`

var (
	qPoolExists    = Q(`SELECT COUNT(*) FROM pools WHERE name = ?`)
	qRequestInsert = Q(`INSERT INTO quota_requests (project, pool, gpus, cpus, memory, jobs, until_at, reason, requester, state, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?) RETURNING id`)
	qRequestGet    = Q(`SELECT ` + requestCols + ` FROM quota_requests WHERE id = ?`)
	qRequestList   = Q(`SELECT ` + requestCols + ` FROM quota_requests WHERE (? = '' OR project = ?) AND (? = '' OR pool = ?) ORDER BY id DESC`)
	qRequestDecide = Q(`UPDATE quota_requests SET state = ?, decider = ?, decided_at = ?, note = ? WHERE id = ? AND state = 'pending'
		RETURNING ` + requestCols)
	qActiveGrants = Q(`SELECT ` + requestCols + ` FROM quota_requests WHERE state = 'approved' AND until_at > ? ORDER BY id`)
	qRequestState = Q(`SELECT state FROM quota_requests WHERE id = ?`)
)

func scanRequest(row Row) (domain.QuotaRequest, error) {
	var (
		r              domain.QuotaRequest
		mem            int64
		until, created int64
		decided        sql.NullInt64
		state          string
	)
	if err := row.Scan(&r.ID, &r.Project, &r.Pool, &r.Extra.GPUs, &r.Extra.CPUs, &mem, &r.Extra.Jobs, &until,
		&r.Reason, &r.Requester, &state, &r.Decider, &decided, &r.Note, &created); err != nil {
		return r, err
	}
	r.Extra.Memory = domain.ByteSize(mem)
	r.Until = time.Unix(0, until).UTC()
	r.CreatedAt = time.Unix(0, created).UTC()
	r.DecidedAt = TimeOf(decided)
	r.State = domain.RequestState(state)
	return r, nil
}

// CreateRequest stores a pending compute request.
func (s Shared) CreateRequest(ctx context.Context, r domain.QuotaRequest, audit domain.AuditRecord) (domain.QuotaRequest, error) {
	action := fmt.Sprintf("create compute request of project %q in pool %q", r.Project, r.Pool)
	out := r
	err := s.b.Write(ctx, func(x Exec) error {
		var n int64
		if err := x.QueryRow(qPoolExists, r.Pool).Scan(&n); err != nil {
			return s.err(action, err)
		}
		if n == 0 {
			return fmt.Errorf("%s: pool %q does not exist: %w", action, r.Pool, store.ErrNotFound)
		}
		out = r
		err := x.QueryRow(qRequestInsert, r.Project, r.Pool, int64(r.Extra.GPUs), r.Extra.CPUs, int64(r.Extra.Memory), int64(r.Extra.Jobs),
			r.Until.UnixNano(), r.Reason, r.Requester, r.CreatedAt.UnixNano()).Scan(&out.ID)
		out.State = domain.RequestPending
		out.Until, out.CreatedAt = NormTime(r.Until), NormTime(r.CreatedAt)
		return s.err(action, err)
	}, audit)
	return out, err
}

// GetRequest returns one compute request.
func (s Shared) GetRequest(ctx context.Context, id int64) (domain.QuotaRequest, error) {
	rd, err := s.b.Reader()
	if err != nil {
		return domain.QuotaRequest{}, err
	}
	r, err := scanRequest(rd.QueryRow(ctx, qRequestGet, id))
	return r, s.err(fmt.Sprintf("get compute request %d", id), err)
}

func (s Shared) queryRequests(ctx context.Context, q Query, args ...any) ([]domain.QuotaRequest, error) {
	rd, err := s.b.Reader()
	if err != nil {
		return nil, err
	}
	var out []domain.QuotaRequest
	if err := rd.Query(ctx, func(row Row) error {
		r, err := scanRequest(row)
		out = append(out, r)
		return err
	}, q, args...); err != nil {
		return nil, s.err("list compute requests", err)
	}
	return out, nil
}

// ListRequests returns compute requests newest first.
func (s Shared) ListRequests(ctx context.Context, project, pool string) ([]domain.QuotaRequest, error) {
	return s.queryRequests(ctx, qRequestList, project, project, pool, pool)
}

// ActiveGrants returns the approved requests still in force at now.
func (s Shared) ActiveGrants(ctx context.Context, now time.Time) ([]domain.QuotaRequest, error) {
	return s.queryRequests(ctx, qActiveGrants, now.UnixNano())
}

// DecideRequest approves or denies a pending request.
func (s Shared) DecideRequest(ctx context.Context, id int64, to domain.RequestState, decider string, at time.Time, note string, audit domain.AuditRecord) (domain.QuotaRequest, error) {
	action := fmt.Sprintf("decide compute request %d", id)
	if to != domain.RequestApproved && to != domain.RequestDenied {
		return domain.QuotaRequest{}, fmt.Errorf("%s: %q is not a decision: %w", action, to, store.ErrInvalid)
	}
	var out domain.QuotaRequest
	err := s.b.Write(ctx, func(x Exec) error {
		var err error
		out, err = scanRequest(x.QueryRow(qRequestDecide, string(to), decider, at.UnixNano(), note, id))
		if err = s.err(action, err); !errors.Is(err, store.ErrNotFound) {
			return err // decided, or failed
		}
		var state string
		if err := s.err(action, x.QueryRow(qRequestState, id).Scan(&state)); errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%s: it does not exist: %w", action, store.ErrNotFound)
		} else if err != nil {
			return err
		}
		return fmt.Errorf("%s: it is already %s: %w", action, state, store.ErrConflict)
	}, audit)
	return out, err
}
