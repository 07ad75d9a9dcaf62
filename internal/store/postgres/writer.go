package postgres

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlstore"
)

// maxBatch bounds how many write requests share one transaction, so one
// commit never holds the others for long. Each request is a subtransaction;
// PostgreSQL tracks up to 64 per transaction cheaply.
const maxBatch = 64

// connectTimeout bounds how long the writer waits for a connection.
const connectTimeout = 30 * time.Second

// Request states: a request is claimed by the writer or abandoned by its
// caller, never both, so a caller that gives up knows nothing was written.
const (
	reqPending int32 = iota
	reqClaimed
	reqAbandoned
)

// writeReq is one write waiting for the writer goroutine. fn runs inside the
// batch transaction, within its own savepoint, followed by appending the
// audit records the mutation was given (withAudit); results travel back through
// variables the closure captured, valid only when done delivers nil.
type writeReq struct {
	fn    func(w *writer) error
	audit []domain.AuditRecord // the mutation's records: withAudit
	// ownAudit marks a request that appends audit records itself
	// (AppendAudit); newJob one that takes a preallocated job id.
	ownAudit bool
	newJob   bool
	// fenced marks a write of leader term fence (store.WithFence): it
	// commits only while that term holds a live lease.
	fenced bool
	fence  int64
	// look, when set, reads the request's repeats at the batch's start:
	// see submit.go.
	look  *look
	state atomic.Int32
	done  chan error // buffered, receives exactly one value once claimed
}

// writeOpt marks what a request will need from its batch transaction.
type writeOpt func(*writeReq)

// needsJobID preallocates a job id for the request (see writer.nextJobID).
func needsJobID(r *writeReq) { r.newJob = true }

// withAudit appends recs in the request's transaction once fn succeeded
// (runRequest): the audit records of the mutation.
func withAudit(recs ...domain.AuditRecord) writeOpt {
	return func(r *writeReq) { r.audit = append(r.audit, recs...) }
}

// appendsAudit marks a request that appends audit records of its own.
func appendsAudit(r *writeReq) { r.ownAudit = true }

// writer owns the write connection. Only the writer goroutine (and Open,
// before it starts) touches it, so it needs no locking.
//
// Statements a request does not need answers from are queued and sent to the
// server together with the next statement whose answer it needs, or at the
// end of the request, as one pipeline: a request costs one or two round trips
// whatever its number of statements.
type writer struct {
	pool *pgxpool.Pool
	pc   *pgxpool.Conn
	conn *pgx.Conn
	ctx  context.Context // never canceled: interrupting a statement would roll back the whole batch

	pending []pendingStmt
	flushes int // pipelines sent, so a savepoint knows whether its statements left

	// optimistic runs requests without savepoints (see commitBatch);
	// queued and sent count statements ever queued and sent, so a failing
	// request knows whether its writes reached the server; aborted reports
	// that a statement failed, which only a rollback of the whole
	// transaction undoes.
	optimistic   bool
	queued, sent int
	aborted      bool

	bulk         bulk // rows waiting for their multi-row INSERT: bulk.go
	materialized int  // times bulk rows became statements

	snaps sqlstore.SnapshotCache // the config snapshots known stored

	audit auditState // the audit hook's state: see audit.go
	fence fenceState // the leader term this transaction read: see leader.go
	ids   []int64    // job ids preallocated for this batch's CreateJob requests
	// lastID is the highest job id the sequence handed out in this
	// transaction (0: none known).
	lastID int64
	// predicted is what the next audited batch expects to find under the
	// audit lock, and stale reports that the running batch found
	// otherwise: see begin. began is predicted as the running batch
	// began.
	predicted, began prediction
	stale            bool
	// contended reports that another writer came between this one's
	// batches lately: batches read rather than predict until one finds
	// what this writer left.
	contended bool
	// lookErr is the failure of a look of the running batch: see submit.go.
	lookErr error
}

// pendingStmt is a statement queued for the next pipeline. check turns its
// outcome into the request's error (nil: it did what was expected); onOK
// runs when it succeeded.
type pendingStmt struct {
	sql   string
	args  []any
	check func(tag pgconn.CommandTag, err error) error
	onOK  func()
	// rows, when set, reads the statement's rows (before check).
	rows func(pgx.Rows) error
}

// stmtError is the interpreted failure of a queued statement; interpretError
// passes it through unchanged.
type stmtError struct{ err error }

func (e stmtError) Error() string { return e.err.Error() }
func (e stmtError) Unwrap() error { return e.err }

func (w *writer) connect() error {
	ctx, cancel := context.WithTimeout(w.ctx, connectTimeout)
	defer cancel()
	pc, err := w.pool.Acquire(ctx)
	if err != nil {
		// The writer's context never ends: a deadline here is the
		// connect timeout, an outage like any failed connect.
		return fmt.Errorf("acquire the write connection: %w (%v)", store.ErrUnavailable, err)
	}
	// The statements that run while the transaction is aborted must not
	// need preparing then: prepare them now, once per connection.
	for _, name := range []string{"request", "change"} {
		for _, sql := range []string{"ROLLBACK TO " + name, "RELEASE " + name} {
			if _, err := pc.Conn().Prepare(ctx, sql, sql); err != nil {
				pc.Release()
				return interpretError("prepare the write connection", err)
			}
		}
	}
	w.pc, w.conn = pc, pc.Conn()
	return nil
}

// release returns the write connection to the pool (which discards it when
// it is broken or inside a transaction).
func (w *writer) release() {
	if w.pc != nil {
		w.pc.Release()
		w.pc, w.conn = nil, nil
	}
}

// queue adds a statement to the next pipeline; a failure is reported as
// interpretError(action, err).
func (w *writer) queue(action, sql string, args ...any) {
	w.materialize()
	w.queued++
	w.pending = append(w.pending, pendingStmt{sql: sql, args: args, check: func(_ pgconn.CommandTag, err error) error {
		return interpretError(action, err)
	}})
}

// queueCheck adds a statement whose outcome check judges.
func (w *writer) queueCheck(check func(pgconn.CommandTag, error) error, sql string, args ...any) {
	w.materialize()
	w.queued++
	w.pending = append(w.pending, pendingStmt{sql: sql, args: args, check: check})
}

// flush sends the queued statements and reports the first failure.
func (w *writer) flush() error { return w.roundTrip("", nil, nil) }

// roundTrip sends the queued statements followed, when read is not nil, by
// sql, whose result read consumes. A queued statement's failure is returned
// as its check made it (the statements after it do not run); otherwise the
// error of read.
func (w *writer) roundTrip(sql string, args []any, read func(pgx.BatchResults) error) error {
	w.materialize()
	if len(w.pending) == 0 && read == nil {
		return nil
	}
	if w.conn == nil {
		w.pending = w.pending[:0]
		return fmt.Errorf("the write connection is gone: %w", store.ErrUnavailable)
	}
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(w.pending)+1)}
	for _, p := range w.pending {
		b.Queue(p.sql, p.args...)
	}
	if read != nil {
		b.Queue(sql, args...)
	}
	pend := w.pending
	w.pending = nil
	w.flushes++
	w.sent += len(pend)
	br := w.conn.SendBatch(w.ctx, b)
	var first error
	for _, p := range pend {
		var tag pgconn.CommandTag
		var err error
		if p.rows != nil {
			tag, err = readRows(br, p.rows)
		} else {
			tag, err = br.Exec()
		}
		if first != nil {
			continue
		}
		if e := p.check(tag, err); e != nil {
			first = stmtError{e}
		} else if p.onOK != nil {
			p.onOK()
		}
	}
	if first != nil {
		w.aborted = true
	} else if read != nil {
		if first = read(br); first != nil && !errors.Is(first, pgx.ErrNoRows) {
			w.aborted = true
		}
	}
	if err := br.Close(); first == nil && err != nil {
		first, w.aborted = err, true
	}
	w.pending = pend[:0]
	return first
}

// exec runs sql after the queued statements, in the same round trip.
func (w *writer) exec(sql string, args ...any) (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	err := w.roundTrip(sql, args, func(br pgx.BatchResults) error {
		var err error
		tag, err = br.Exec()
		return err
	})
	return tag, err
}

// queryRow runs sql after the queued statements, in the same round trip,
// when its Scan is called.
func (w *writer) queryRow(sql string, args ...any) pendingRow {
	return pendingRow{w: w, sql: sql, args: args}
}

type pendingRow struct {
	w    *writer
	sql  string
	args []any
}

func (r pendingRow) Scan(dest ...any) error {
	return r.w.roundTrip(r.sql, r.args, func(br pgx.BatchResults) error {
		return br.QueryRow().Scan(dest...)
	})
}

// queryRows runs sql after the queued statements and passes each row to fn.
func (w *writer) queryRows(fn func(pgx.Rows) error, sql string, args ...any) error {
	return w.roundTrip(sql, args, func(br pgx.BatchResults) error {
		rows, err := br.Query()
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
	})
}

// write runs fn in the writer goroutine inside a transaction and returns its
// error, or the error of the commit. If ctx ends before the writer picks the
// request up, nothing is written and ctx's error is returned; once picked up,
// the request runs to completion and write reports its outcome.
func (s *Store) write(ctx context.Context, fn func(w *writer) error, opts ...writeOpt) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.closed.Load() {
		return errClosed
	}
	r := &writeReq{fn: fn, done: make(chan error, 1)}
	r.fence, r.fenced = store.FenceFrom(ctx)
	for _, o := range opts {
		o(r)
	}
	select {
	case s.reqs <- r:
	case <-s.closing:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		if r.state.CompareAndSwap(reqPending, reqAbandoned) {
			return ctx.Err()
		}
		return <-r.done
	case <-s.writerDone:
		select {
		case err := <-r.done:
			return err
		default:
			return errClosed
		}
	}
}

// runWriter is the writer goroutine: it takes the requests waiting at that
// moment (up to maxBatch) and commits them as one transaction.
func (s *Store) runWriter() {
	defer close(s.writerDone)
	batch := make([]*writeReq, 0, maxBatch)
	for {
		var first *writeReq
		select {
		case first = <-s.reqs:
		case <-s.closing:
			s.failQueued()
			return
		}
		batch = append(batch[:0], first)
		// Give callers just woken by the previous commit a chance to queue
		// their next request, so it joins this batch.
		runtime.Gosched()
	collect:
		for len(batch) < maxBatch {
			select {
			case r := <-s.reqs:
				batch = append(batch, r)
			default:
				break collect
			}
		}
		s.commitBatch(batch)
		clear(batch)
	}
}

// failQueued answers every request still queued at Close.
func (s *Store) failQueued() {
	for {
		select {
		case r := <-s.reqs:
			if r.state.CompareAndSwap(reqPending, reqClaimed) {
				r.done <- errClosed
			}
		default:
			return
		}
	}
}

// commitBatch runs the claimed requests of batch in one transaction, each in
// its own savepoint, and answers each one.
func (s *Store) commitBatch(batch []*writeReq) {
	claimed := batch[:0:0]
	jobs, audited := 0, false
	for _, r := range batch {
		if r.state.CompareAndSwap(reqPending, reqClaimed) {
			claimed = append(claimed, r)
			if r.newJob {
				jobs++
			}
			audited = audited || r.ownAudit || len(r.audit) > 0
		}
	}
	if len(claimed) == 0 {
		return
	}
	w := s.w
	failAll := func(err error) {
		w.rollback()
		for _, r := range claimed {
			r.done <- err
		}
	}
	if w.conn == nil {
		if err := w.connect(); err != nil {
			failAll(err)
			return
		}
	}
	// First without savepoints: when every request succeeds or fails
	// before writing, which is nearly always, the batch costs two round
	// trips and no subtransactions. Otherwise roll it all back and run it
	// again, each request in its own savepoint.
	results, fatal := s.runBatch(claimed, jobs, audited, true)
	if fatal != nil && w.stale {
		// Another writer moved the audit chain or the job ids since this
		// one's last batch: run it again reading them.
		w.contended = true
		w.rollback()
		if w.conn == nil {
			if err := w.connect(); err != nil {
				failAll(err)
				return
			}
		}
		results, fatal = s.runBatch(claimed, jobs, audited, true)
	}
	if fatal != nil {
		w.rollback()
		if w.conn == nil {
			if err := w.connect(); err != nil {
				failAll(err)
				return
			}
		}
		results, fatal = s.runBatch(claimed, jobs, audited, false)
	}
	if fatal != nil {
		failAll(fatal)
		return
	}
	s.batches.Add(1)
	s.batched.Add(int64(len(claimed)))
	for i, r := range claimed {
		r.done <- results[i]
	}
}

// rollback ends the open transaction, if any, dropping the connection when
// it is broken (the next batch connects afresh).
func (w *writer) rollback() {
	w.pending = w.pending[:0]
	w.bulk = bulk{}
	if w.conn == nil {
		return
	}
	if _, err := w.conn.Exec(w.ctx, "ROLLBACK"); err != nil || w.conn.IsClosed() {
		w.release()
	}
}

// runBatch runs the requests in one transaction and commits it, with or
// without a savepoint per request. fatal reports that nothing committed.
func (s *Store) runBatch(claimed []*writeReq, jobs int, audited, optimistic bool) (results []error, fatal error) {
	w := s.w
	w.optimistic, w.aborted = optimistic, false
	fenced := slices.ContainsFunc(claimed, func(r *writeReq) bool { return r.fenced })
	if err := w.begin(jobs, audited, fenced, s.looks(claimed, optimistic)); err != nil {
		return nil, interpretError("begin write transaction", err)
	}
	results = make([]error, len(claimed))
	for i, r := range claimed {
		head, snaps := w.audit.head, w.snaps.Mark()
		err, fatal := w.runInSavepoint("request", func(w *writer) error { return runRequest(w, r) })
		if fatal != nil {
			return nil, fatal
		}
		if err != nil {
			w.audit.head = head // the request's records were rolled back
			w.snaps.Undo(snaps)
		}
		results[i] = err
	}
	w.queue("commit write transaction", "COMMIT")
	if err := w.flush(); err != nil {
		return nil, err
	}
	w.predict()
	w.snaps.Commit()
	return results, nil
}

// prediction is the audit chain's head and the last job id handed out as
// this writer's last committed audited batch left them, known only then.
type prediction struct {
	known  bool
	seq    int64
	hash   string
	lastID int64
}

// predict records, after a commit, what the next audited batch will find
// unless another writer comes between.
func (w *writer) predict() {
	switch {
	case w.audit.locked:
		w.predicted = prediction{known: true, seq: w.audit.head.seq, hash: w.audit.head.hash, lastID: w.lastID}
	case w.lastID == 0 || w.lastID > w.began.lastID:
		// It appended no record; any job ids it took came after.
		w.predicted = w.began
		w.predicted.lastID = max(w.began.lastID, w.lastID)
	}
}

const (
	// auditLockSQL serializes the transactions that append to the audit
	// log of this schema, across every replica, until they end.
	auditLockSQL = `SELECT pg_advisory_xact_lock(1952540018, hashtext(COALESCE(current_schema(), '')))`
	// batchStartSQL reads the audit chain's head and preallocates job ids.
	batchStartSQL = `SELECT COALESCE((SELECT seq FROM audit ORDER BY seq DESC LIMIT 1), 0),
		COALESCE((SELECT hash FROM audit ORDER BY seq DESC LIMIT 1), ''),
		ARRAY(SELECT nextval('jobs_id_seq') FROM generate_series(1, $1::int)),
		(SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END FROM jobs_id_seq)`
	allocIDsSQL = `SELECT ARRAY(SELECT nextval('jobs_id_seq') FROM generate_series(1, $1::int))`
	// predictedStartSQL is batchStartSQL for a batch that expects the
	// chain's head ($1, $2) and the $3 job ids $4: it allocates the ids
	// and fails with division_by_zero when anything differs.
	predictedStartSQL = `SELECT 1 / ((SELECT COALESCE((SELECT seq FROM audit ORDER BY seq DESC LIMIT 1), 0)) = $1
		AND (SELECT COALESCE((SELECT hash FROM audit ORDER BY seq DESC LIMIT 1), '')) = $2
		AND ARRAY(SELECT nextval('jobs_id_seq') FROM generate_series(1, $3::int)) = $4::bigint[])::int`
)

// errStale fails a batch whose prediction (predictedStartSQL) was wrong.
var errStale = errors.New("the audit chain or the job ids moved since the last batch")

// begin opens the batch transaction: it takes the audit lock and reads the
// chain's head when a request will append audit records, and preallocates
// jobs ids, in one round trip; when a request is fenced, it first reads the
// leader term (readFence) in the same round trip as BEGIN.
//
// After an audited batch committed, the writer knows the head and the
// last job id the next one finds under the audit lock, unless another
// writer (a replica) came between: the next batch then neither reads nor
// waits, it checks in the same round trip as its writes and its commit
// (predictedStartSQL), and a batch whose check fails is rolled back and
// runs again reading them (commitBatch). After such a failure batches
// read until one finds what this writer left, so replicas that write
// together do not pay for failed predictions batch after batch.
func (w *writer) begin(jobs int, audited, fenced bool, looks []*look) error {
	w.audit = auditState{}
	w.ids = w.ids[:0]
	w.lastID, w.stale = 0, false
	w.snaps.Begin()
	p := w.predicted
	w.began, w.predicted = p, prediction{} // until this batch commits
	w.pending = w.pending[:0]
	w.queued, w.sent = 0, 0
	w.bulk = bulk{}
	w.fence = fenceState{}
	w.queue("begin", "BEGIN")
	w.queueLooks(looks)
	if fenced {
		if err := w.readFence(); err != nil {
			return err
		}
	}
	switch {
	case audited && p.known && !w.contended:
		w.queue("take the audit lock", auditLockSQL)
		for i := range int64(jobs) {
			w.ids = append(w.ids, p.lastID+1+i)
		}
		w.queueCheck(func(_ pgconn.CommandTag, err error) error {
			var pe *pgconn.PgError
			if errors.As(err, &pe) && pe.Code == "22012" { // division_by_zero
				w.stale = true
				return errStale
			}
			return interpretError("begin write transaction", err)
		}, predictedStartSQL, p.seq, p.hash, jobs, slices.Clone(w.ids))
		w.lastID = p.lastID + int64(jobs)
		w.audit.head = auditHead{seq: p.seq, hash: p.hash, known: true}
		w.audit.locked = true
	case audited:
		w.queue("take the audit lock", auditLockSQL)
		var h auditHead
		var last int64
		if err := w.queryRow(batchStartSQL, jobs).Scan(&h.seq, &h.hash, &w.ids, &last); err != nil {
			return err
		}
		h.known = true
		w.audit.head, w.audit.locked = h, true
		w.lastID = last
		if len(w.ids) > 0 {
			w.lastID = slices.Max(w.ids)
		}
		if p.known {
			// Whether the prediction would have held: no other writer
			// came between.
			w.contended = h.seq != p.seq || h.hash != p.hash || w.lastID != p.lastID+int64(jobs)
		}
	case jobs > 0:
		if err := w.queryRow(allocIDsSQL, jobs).Scan(&w.ids); err != nil {
			return err
		}
		w.lastID = slices.Max(w.ids)
	default:
		return w.flush()
	}
	return nil
}

// nextJobID returns a job id allocated for this batch, or a fresh one.
func (w *writer) nextJobID() (int64, error) {
	if len(w.ids) > 0 {
		id := w.ids[0]
		w.ids = w.ids[1:]
		return id, nil
	}
	var ids []int64
	if err := w.queryRow(allocIDsSQL, 1).Scan(&ids); err != nil || len(ids) != 1 {
		return 0, interpretError("allocate a job id", errors.Join(err, errors.New("no id returned")))
	}
	w.lastID = max(w.lastID, ids[0])
	return ids[0], nil
}

// runInSavepoint runs fn inside SAVEPOINT name; fn's queued statements are
// sent before it returns. When fn fails, its changes are rolled back and its
// error returned as err. fatal reports that the savepoint itself could not
// be managed, which leaves the whole transaction unusable.
func (w *writer) runInSavepoint(name string, fn func(w *writer) error) (err, fatal error) {
	if w.optimistic {
		return w.runOptimistic(fn)
	}
	mark, flushes := len(w.pending), w.flushes
	bmark, mats := w.bulk.mark(), w.materialized
	established := false
	w.pending = append(w.pending, pendingStmt{sql: "SAVEPOINT " + name,
		check: func(_ pgconn.CommandTag, err error) error { return interpretError("open savepoint", err) },
		onOK:  func() { established = true }})
	err = callSafely(w, fn)
	if err == nil {
		err = w.flush()
	}
	if err == nil {
		w.queue("release savepoint", "RELEASE "+name)
		return nil, nil
	}
	if w.materialized != mats {
		w.bulk = bulk{} // what it holds now was added by fn
	} else {
		w.bulk.truncate(bmark)
	}
	if w.flushes == flushes {
		// Nothing left for the server: drop the unsent statements.
		w.pending = w.pending[:mark]
		return err, nil
	}
	w.pending = w.pending[:0]
	if !established {
		// A statement before the savepoint failed: the transaction is
		// aborted beyond what this savepoint can undo.
		return nil, err
	}
	w.queue("roll back savepoint", "ROLLBACK TO "+name)
	w.queue("release savepoint", "RELEASE "+name)
	if e := w.flush(); e != nil {
		return nil, fmt.Errorf("roll back savepoint after %v: %w", err, e)
	}
	return err, nil
}

// errRetrySafely ends an optimistic run of a batch: a request failed in a
// way only savepoints can isolate.
var errRetrySafely = errors.New("a write request failed after its writes reached the server")

// runOptimistic runs fn without a savepoint and leaves its statements queued
// for the next round trip. A failure of fn is isolated only when none of its
// statements has been sent (they are dropped) and no statement failed;
// otherwise it is fatal (errRetrySafely), and the batch runs again with
// savepoints. Requests keep to this: one that fails after a write of its own
// took effect fails through a statement (a constraint, a guard check), never
// through a Go error after an answered write.
func (w *writer) runOptimistic(fn func(w *writer) error) (err, fatal error) {
	mark, bmark, mats := w.queued, w.bulk.mark(), w.materialized
	err = callSafely(w, fn)
	switch {
	case err == nil:
		return nil, nil
	case w.aborted || w.sent > mark || w.materialized != mats:
		// Its writes left, or joined statements holding others' rows.
		return nil, errRetrySafely
	}
	w.pending = w.pending[:mark-w.sent]
	w.queued = mark
	w.bulk.truncate(bmark)
	return err, nil
}

// callSafely runs fn and turns a panic (for example in a caller's OutputDir
// function) into an error, so one bad request cannot stop the writer.
func callSafely(w *writer, fn func(w *writer) error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("write request panicked: %v", p)
		}
	}()
	return fn(w)
}

// auditOf is withAudit for a mutation whose record is optional.
func auditOf(rec *domain.AuditRecord) writeOpt {
	if rec == nil {
		return func(*writeReq) {}
	}
	return withAudit(*rec)
}
