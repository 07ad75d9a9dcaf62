package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"trainyard/internal/domain"
	"trainyard/internal/store/sqlstore"
)

// backend is what the shared SQL layer needs from the store: the writer,
// the pool for reads, and PostgreSQL's error mapping.
type backend struct{ s *Store }

func (b backend) Write(ctx context.Context, fn func(sqlstore.Exec) error, audit ...domain.AuditRecord) error {
	return b.s.write(ctx, func(w *writer) error { return fn(sharedExec{w}) }, withAudit(audit...))
}

func (b backend) WriteAuditing(ctx context.Context, fn func(sqlstore.Exec) error) error {
	return b.s.write(ctx, func(w *writer) error { return fn(sharedExec{w}) }, appendsAudit)
}

func (b backend) Reader() (sqlstore.Reader, error) {
	if err := b.s.checkOpen(); err != nil {
		return nil, err
	}
	return sharedReader{b.s}, nil
}

func (backend) Interpret(action string, err error) error { return interpretError(action, err) }

func (backend) IsUniqueViolation(err error) bool { return isUniqueViolation(err) }

func (backend) IsNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// sharedExec runs shared statements through the writer's pipeline: queued
// statements travel with the next one that needs an answer.
type sharedExec struct{ w *writer }

func (x sharedExec) Queue(action string, q sqlstore.Query, args ...any) error {
	x.w.queue(action, q.SQL(sqlstore.Postgres), args...)
	return nil
}

func (x sharedExec) QueueCheck(check func(int64, error) error, q sqlstore.Query, args ...any) error {
	x.w.queueCheck(func(tag pgconn.CommandTag, err error) error { return check(tag.RowsAffected(), err) }, q.SQL(sqlstore.Postgres), args...)
	return nil
}

func (x sharedExec) Exec(q sqlstore.Query, args ...any) (int64, error) {
	tag, err := x.w.exec(q.SQL(sqlstore.Postgres), args...)
	return tag.RowsAffected(), err
}

func (x sharedExec) QueryRow(q sqlstore.Query, args ...any) sqlstore.Row {
	return x.w.queryRow(q.SQL(sqlstore.Postgres), args...)
}

func (x sharedExec) Query(fn func(sqlstore.Row) error, q sqlstore.Query, args ...any) error {
	return x.w.queryRows(func(rows pgx.Rows) error { return fn(rows) }, q.SQL(sqlstore.Postgres), args...)
}

func (x sharedExec) Savepoint(fn func() error) (err, fatal error) {
	return x.w.runInSavepoint("change", func(*writer) error { return fn() })
}

func (x sharedExec) AppendAudit(recs []domain.AuditRecord) error { return x.w.appendAudit(recs) }

// sharedReader runs shared reads on the pool.
type sharedReader struct{ s *Store }

func (r sharedReader) QueryRow(ctx context.Context, q sqlstore.Query, args ...any) sqlstore.Row {
	return r.s.pool.QueryRow(ctx, q.SQL(sqlstore.Postgres), args...)
}

func (r sharedReader) Query(ctx context.Context, fn func(sqlstore.Row) error, q sqlstore.Query, args ...any) error {
	rows, err := r.s.pool.Query(ctx, q.SQL(sqlstore.Postgres), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
