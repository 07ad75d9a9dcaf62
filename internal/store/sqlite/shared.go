package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"trainyard/internal/domain"
	"trainyard/internal/store/sqlstore"
)

// backend is what the shared SQL layer needs from the store: the writer,
// the read pool, and SQLite's error mapping.
type backend struct{ s *Store }

func (b backend) Write(ctx context.Context, fn func(sqlstore.Exec) error, audit ...domain.AuditRecord) error {
	return b.s.write(ctx, func(w *writer) error { return fn(sharedExec{w}) }, withAudit(audit...))
}

func (b backend) WriteAuditing(ctx context.Context, fn func(sqlstore.Exec) error) error {
	return b.s.write(ctx, func(w *writer) error { return fn(sharedExec{w}) })
}

func (b backend) Reader() (sqlstore.Reader, error) {
	if err := b.s.checkOpen(); err != nil {
		return nil, err
	}
	return sharedReader{b.s}, nil
}

func (backend) Interpret(action string, err error) error { return interpretError(action, err) }

func (backend) IsUniqueViolation(err error) bool { return isUniqueViolation(err) }

func (backend) IsNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

// sharedExec runs shared statements on the writer's connection; queued
// statements run at once.
type sharedExec struct{ w *writer }

// args are the arguments of q: a statement that stamps job rows takes the
// transaction's revision first.
func (x sharedExec) args(q sqlstore.Query, args []any) []any {
	if !q.Revised() {
		return args
	}
	return append([]any{x.w.rev}, args...)
}

func (x sharedExec) Queue(action string, q sqlstore.Query, args ...any) error {
	_, err := x.w.exec(q.SQL(sqlstore.SQLite), x.args(q, args)...)
	return interpretError(action, err)
}

func (x sharedExec) QueueCheck(check func(int64, error) error, q sqlstore.Query, args ...any) error {
	return check(x.Exec(q, args...))
}

func (x sharedExec) Exec(q sqlstore.Query, args ...any) (int64, error) {
	res, err := x.w.exec(q.SQL(sqlstore.SQLite), x.args(q, args)...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (x sharedExec) QueryRow(q sqlstore.Query, args ...any) sqlstore.Row {
	return x.w.queryRow(q.SQL(sqlstore.SQLite), x.args(q, args)...)
}

func (x sharedExec) Query(fn func(sqlstore.Row) error, q sqlstore.Query, args ...any) error {
	rows, err := x.w.query(q.SQL(sqlstore.SQLite), x.args(q, args)...)
	if err != nil {
		return err
	}
	return eachRow(rows, fn)
}

func (x sharedExec) Savepoint(fn func() error) (err, fatal error) {
	return runInSavepoint(x.w, "change", func(*writer) error { return fn() })
}

func (x sharedExec) AppendAudit(recs []domain.AuditRecord) error { return x.w.appendAudit(recs) }

// sharedReader runs shared reads on the read pool, through its prepared
// statements.
type sharedReader struct{ s *Store }

func (r sharedReader) QueryRow(ctx context.Context, q sqlstore.Query, args ...any) sqlstore.Row {
	st, err := r.s.readStmt(ctx, q.SQL(sqlstore.SQLite))
	if err != nil {
		return errRow{err}
	}
	return st.QueryRowContext(ctx, args...)
}

func (r sharedReader) Query(ctx context.Context, fn func(sqlstore.Row) error, q sqlstore.Query, args ...any) error {
	st, err := r.s.readStmt(ctx, q.SQL(sqlstore.SQLite))
	if err != nil {
		return err
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil {
		return err
	}
	return eachRow(rows, fn)
}

// eachRow passes each of rows to fn, then closes them.
func eachRow(rows *sql.Rows, fn func(sqlstore.Row) error) error {
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	if err := rows.Close(); err != nil {
		return err
	}
	return rows.Err()
}

// errRow is a row whose query could not start.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
