// Package sqlstore holds what the SQL backends of the metadata store share:
// each query's text, its row scanning and column encoding, and the logic of
// the mutations around them. A backend (internal/store/sqlite,
// internal/store/postgres) embeds Shared, whose methods implement part of
// store.Store, and supplies a Backend: how it runs a write transaction, how it
// reads, and how its driver's errors map to the store's sentinels.
//
// What engines do differently stays in the backend: the writer and its group
// commit or pipelining, bulk loading, leader leases, notifications and
// migrations. What differs only in SQL text is written once here: statements
// use ? placeholders and become $n for PostgreSQL on a statement's first use
// (see Q): a call after that pays nothing for the translation, and a process
// that runs no statement, such as a CLI command, pays nothing at its start.
package sqlstore

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"

	"trainyard/internal/domain"
)

// Engine names a database engine, which selects the text of each Query.
type Engine int

const (
	SQLite Engine = iota
	Postgres
	engines
)

// Query is one statement in the text of each engine, translated from its
// source on first use. Copies of a Query share the translation.
type Query struct{ q *query }

type query struct {
	src  string
	text [engines]atomic.Pointer[string]
	// rev marks a statement that stamps the job rows it writes with the
	// transaction's revision ({REV}): SQLite passes the revision as the
	// statement's first argument (see Revised).
	rev bool
}

// SQL returns q's text for engine e. Concurrent first uses may each
// translate it; they store the same text.
func (q Query) SQL(e Engine) string {
	if t := q.q.text[e].Load(); t != nil {
		return *t
	}
	t := translate(q.q.src, e)
	q.q.text[e].Store(&t)
	return t
}

// Revised reports whether q's SQLite text takes the writer's revision as
// its first argument, before the ones the caller passes.
func (q Query) Revised() bool { return q.q.rev }

// Q builds a statement written with ? placeholders in SQLite's form. For
// PostgreSQL each ? becomes $1, $2, … in order; each marker becomes its
// engine's text (see markers). Quoted text is copied as it is.
func Q(text string) Query {
	q := &query{src: text}
	if i := strings.Index(text, revMarker); i >= 0 {
		if strings.Contains(text[:i], "?") {
			panic("sqlstore: " + revMarker + " must come before every ? of " + text)
		}
		q.rev = true
	}
	return Query{q}
}

// revMarker sets the revision columns of a job row: SQLite numbers write
// transactions in commit order (one writer), PostgreSQL records the
// writing transaction's id, whose snapshot order ChangedJobs follows.
const revMarker = "{REV}"

// markers are the clauses whose text differs between the engines.
var markers = []struct {
	marker string
	text   [engines]string
}{
	// Order text by bytes, as SQLite's default collation does.
	{"{C}", [engines]string{SQLite: "", Postgres: ` COLLATE "C"`}},
	// Lock the rows read until the transaction ends (SQLite has one
	// writer, so its reads inside a write are stable already).
	{"{FOR UPDATE}", [engines]string{SQLite: "", Postgres: ` FOR UPDATE`}},
	{revMarker, [engines]string{SQLite: "rev = ?", Postgres: "changed_xid = pg_current_xact_id()"}},
	// Keep a subquery from being merged into the query around it, so that
	// what it computes per row is computed once.
	{"{NOFLAT}", [engines]string{SQLite: " LIMIT -1", Postgres: " OFFSET 0"}},
	// Join the table on the right to each row of the per-job sums on the
	// left, in that order: with a filter on the right table, SQLite would
	// otherwise sum every job, index the sums and look them up per match.
	{"{THENJOIN}", [engines]string{SQLite: "CROSS JOIN", Postgres: "JOIN"}},
	// Read attempts in job order where that lets SQLite group them by job
	// without sorting (on the index led by job_id); PostgreSQL hashes.
	{"{BYJOB}", [engines]string{SQLite: "ORDER BY a.job_id", Postgres: ""}},
}

// Each builds a statement whose text differs beyond placeholders, given in
// each engine's own form.
func Each(sqliteText, postgresText string) Query { return fixed(sqliteText, postgresText) }

// fixed is a statement whose text is given for each engine as it is.
func fixed(sqliteText, postgresText string) Query {
	q := &query{}
	q.text[SQLite].Store(&sqliteText)
	q.text[Postgres].Store(&postgresText)
	return Query{q}
}

// translate writes text in engine e's form: markers become their text and,
// for PostgreSQL, ? placeholders become $n, outside quoted strings and
// identifiers.
func translate(text string, e Engine) string {
	var b strings.Builder
	n := 0
	var quote byte
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '?' && e == Postgres:
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		case c == '{':
			if m, ok := markerAt(text[i:]); ok {
				b.WriteString(m.text[e]) // PostgreSQL's hold no placeholder
				i += len(m.marker) - 1
				continue
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

func markerAt(text string) (m struct {
	marker string
	text   [engines]string
}, ok bool) {
	for _, m := range markers {
		if strings.HasPrefix(text, m.marker) {
			return m, true
		}
	}
	return m, false
}

// Row is one result row: a database/sql Row or Rows, or a pgx Row or Rows.
type Row interface {
	Scan(dest ...any) error
}

// Exec runs the statements of one write request, inside the backend's write
// transaction.
type Exec interface {
	// Queue runs a statement whose result the request does not need; its
	// failure is the request's error, interpreted with action. A backend
	// may defer it to travel with the next statement (PostgreSQL
	// pipelines them, and then Queue returns nil and the failure ends the
	// request later) or run it at once (SQLite).
	Queue(action string, q Query, args ...any) error
	// QueueCheck is Queue for a statement whose outcome check judges,
	// given the number of rows it changed and its error; check's error
	// is the request's.
	QueueCheck(check func(rows int64, err error) error, q Query, args ...any) error
	// Exec runs a statement and returns the number of rows it changed.
	Exec(q Query, args ...any) (int64, error)
	// QueryRow runs a statement whose one row Scan reads.
	QueryRow(q Query, args ...any) Row
	// Query runs a statement and passes each of its rows to fn.
	Query(fn func(Row) error, q Query, args ...any) error
	// Savepoint runs fn inside a savepoint: when fn fails, what it wrote
	// is undone, its error is returned as err and the transaction goes
	// on. fatal reports that the savepoint could not be managed, which
	// leaves the whole transaction unusable. The statements fn queued
	// have run when Savepoint returns.
	Savepoint(fn func() error) (err, fatal error)
	// AppendAudit chains recs to the audit log in the transaction. It is
	// the request's last statement (see Backend.WriteAuditing).
	AppendAudit(recs []domain.AuditRecord) error
}

// Reader runs the queries of reads, outside the writer.
type Reader interface {
	QueryRow(ctx context.Context, q Query, args ...any) Row
	Query(ctx context.Context, fn func(Row) error, q Query, args ...any) error
}

// Backend is what a backend supplies to Shared.
type Backend interface {
	// Write runs fn as one write request of the backend's writer; once fn
	// succeeds, audit is appended in the same transaction.
	Write(ctx context.Context, fn func(Exec) error, audit ...domain.AuditRecord) error
	// WriteAuditing is Write for a request whose fn appends its own audit
	// records (Exec.AppendAudit), once it knows which: the backend
	// prepares for them before the transaction takes any row lock
	// (PostgreSQL takes the audit lock first, so that replicas cannot
	// deadlock over it).
	WriteAuditing(ctx context.Context, fn func(Exec) error) error
	// Reader returns the reader of the store, or the error every call
	// returns after Close.
	Reader() (Reader, error)
	// Interpret maps a driver error to the store's sentinels, prefixed by
	// the action that failed (nil stays nil).
	Interpret(action string, err error) error
	// IsUniqueViolation reports whether err is a UNIQUE or PRIMARY KEY
	// constraint failure.
	IsUniqueViolation(err error) bool
	// IsNoRows reports whether err says a query returned no row.
	IsNoRows(err error) bool
}

// Shared implements the parts of store.Store whose SQL the engines share.
// Embed it in a backend's Store.
type Shared struct {
	b Backend
	e Engine
}

// New returns the shared methods of a store on engine e.
func New(e Engine, b Backend) Shared { return Shared{b: b, e: e} }

func (s Shared) err(action string, err error) error { return s.b.Interpret(action, err) }

// queryOne reads the one row q selects with scan; no row is
// store.ErrNotFound, named by action.
func queryOne[T any](ctx context.Context, s Shared, action string, scan func(Row) (T, error), q Query, args ...any) (T, error) {
	var zero T
	r, err := s.b.Reader()
	if err != nil {
		return zero, err
	}
	v, err := scan(r.QueryRow(ctx, q, args...))
	if err != nil {
		return zero, s.err(action, err)
	}
	return v, nil
}

// queryAll reads every row of q with scan, in order; action names the read
// in its error.
func queryAll[T any](ctx context.Context, s Shared, action string, scan func(Row) (T, error), q Query, args ...any) ([]T, error) {
	r, err := s.b.Reader()
	if err != nil {
		return nil, err
	}
	var out []T
	if err := r.Query(ctx, func(row Row) error {
		v, err := scan(row)
		if err != nil {
			return err
		}
		out = append(out, v)
		return nil
	}, q, args...); err != nil {
		return nil, s.err(action, err)
	}
	return out, nil
}
