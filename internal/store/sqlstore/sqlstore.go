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
// use ? placeholders and become $n for PostgreSQL when the package
// initializes (see Q), so a call pays nothing for the translation.
package sqlstore

import (
	"context"
	"strconv"
	"strings"

	"trainyard/internal/domain"
)

// Engine names a database engine, which selects the text of each Query.
type Engine int

const (
	SQLite Engine = iota
	Postgres
	engines
)

// Query is one statement in the text of each engine, built at package
// initialization.
type Query struct{ text [engines]string }

// SQL returns q's text for engine e.
func (q Query) SQL(e Engine) string { return q.text[e] }

// Q builds a statement written with ? placeholders in SQLite's form. For
// PostgreSQL each ? becomes $1, $2, … in order, and each marker becomes its
// PostgreSQL text (see pgMarkers); SQLite drops the markers. Quoted text is
// copied as it is.
func Q(text string) Query {
	lite := text
	for _, m := range pgMarkers {
		lite = strings.ReplaceAll(lite, m.marker, "")
	}
	return Query{text: [engines]string{SQLite: lite, Postgres: numbered(text)}}
}

// pgMarkers are the clauses only PostgreSQL needs.
var pgMarkers = []struct{ marker, text string }{
	// Order text by bytes, as SQLite's default collation does.
	{"{C}", ` COLLATE "C"`},
	// Lock the rows read until the transaction ends (SQLite has one
	// writer, so its reads inside a write are stable already).
	{"{FOR UPDATE}", ` FOR UPDATE`},
}

// Each builds a statement whose text differs beyond placeholders, given in
// each engine's own form.
func Each(sqliteText, postgresText string) Query {
	return Query{text: [engines]string{SQLite: sqliteText, Postgres: postgresText}}
}

// numbered rewrites the ? placeholders of text as $n and the markers as
// their PostgreSQL text, outside quoted strings and identifiers.
func numbered(text string) string {
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
		case c == '?':
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		case c == '{':
			if m, ok := markerAt(text[i:]); ok {
				b.WriteString(m.text)
				i += len(m.marker) - 1
				continue
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

func markerAt(text string) (m struct{ marker, text string }, ok bool) {
	for _, m := range pgMarkers {
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
