package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"

	"trainyard/internal/domain"
	"trainyard/internal/store/sqlstore"
)

// maxBatch bounds how many write requests share one transaction, so one
// commit never holds the others for long.
const maxBatch = 256

// Request states: a request is claimed by the writer or abandoned by its
// caller, never both, so a caller that gives up knows nothing was written.
const (
	reqPending int32 = iota
	reqClaimed
	reqAbandoned
)

// writeReq is one write waiting for the writer goroutine. fn runs inside the
// batch transaction, within its own savepoint, followed by appending the
// audit records the mutation was given (withAudit; see runRequest); results
// travel back through variables the closure captured, valid only when done
// delivers nil.
type writeReq struct {
	fn    func(w *writer) error
	audit []domain.AuditRecord // the mutation's records: withAudit
	// create marks a CreateJob request (createsJob): see runBatch.
	create bool
	state  atomic.Int32
	done   chan error // buffered, receives exactly one value once claimed
}

// writeOpt adds to what a write request does.
type writeOpt func(*writeReq)

// withAudit appends recs in the request's transaction once fn succeeded
// (runRequest): the audit records of the mutation.
func withAudit(recs ...domain.AuditRecord) writeOpt {
	return func(r *writeReq) { r.audit = append(r.audit, recs...) }
}

// createsJob marks a CreateJob request.
func createsJob(r *writeReq) { r.create = true }

// writer owns the single write connection. Only the writer goroutine (and
// Open, before it starts) touches it, so it needs no locking.
type writer struct {
	conn  *sql.Conn
	ctx   context.Context // never canceled: interrupting a statement would roll back the whole batch
	stmts map[string]*sql.Stmt
	audit auditState // the audit hook's state: see audit.go
	// rev numbers write transactions in commit order; every job row a
	// transaction writes carries it (LiveJobs, ChangedJobs).
	rev int64
	// jobID is the last job id handed out in the running transaction (0:
	// none yet): see nextJobID.
	jobID int64
	// snaps knows which config snapshots are stored: see snapshots.go.
	snaps sqlstore.SnapshotCache
	// repeats spares the looks for repeats of one transaction walking
	// the same submitter's jobs again: see repeats.go.
	repeats repeatWindows
	// ran counts the statements run, so a failed request tells whether
	// it ran any (runBatch).
	ran int
	// notes are the jobs the running batch wrote: detailcache.go.
	notes writeNotes
	// dataVersion is the connection's PRAGMA data_version at the last
	// batch (noteOtherWriters).
	dataVersion int64
}

func newWriter(conn *sql.Conn) *writer {
	return &writer{conn: conn, ctx: context.Background(), stmts: map[string]*sql.Stmt{}}
}

// stmt returns the prepared statement for query, preparing it on first use.
func (w *writer) stmt(query string) (*sql.Stmt, error) {
	if st, ok := w.stmts[query]; ok {
		return st, nil
	}
	st, err := w.conn.PrepareContext(w.ctx, query)
	if err != nil {
		return nil, err
	}
	w.stmts[query] = st
	return st, nil
}

func (w *writer) exec(query string, args ...any) (sql.Result, error) {
	w.ran++
	st, err := w.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(w.ctx, args...)
}

func (w *writer) queryRow(query string, args ...any) *sql.Row {
	w.ran++
	st, err := w.stmt(query)
	if err != nil {
		// sql.Row carries no constructor for an error; run the query
		// unprepared so the same error surfaces from Scan.
		return w.conn.QueryRowContext(w.ctx, query, args...)
	}
	return st.QueryRowContext(w.ctx, args...)
}

func (w *writer) query(query string, args ...any) (*sql.Rows, error) {
	w.ran++
	st, err := w.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(w.ctx, args...)
}

func (w *writer) close() error {
	var errs []error
	for _, st := range w.stmts {
		errs = append(errs, st.Close())
	}
	w.stmts = nil
	errs = append(errs, w.conn.Close())
	return errors.Join(errs...)
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
		// The writer has stopped; it answers every request it took, so a
		// request without an answer was never taken.
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
		// their next request, so it joins this batch instead of waiting
		// for the next commit.
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

// commitBatch runs the claimed requests of batch in one transaction and
// answers each one.
//
// It runs them first without savepoints: a request that fails before
// running a statement (a check in Go) changed nothing, and when no request
// fails after running one, which is nearly always, each is spared opening
// and releasing a savepoint and copying the pages it changes into the
// savepoint's journal. When one does, the whole transaction is rolled back
// and the batch runs again with each request in its own savepoint, which
// undoes exactly that request's changes.
func (s *Store) commitBatch(batch []*writeReq) {
	claimed := batch[:0:0]
	for _, r := range batch {
		if r.state.CompareAndSwap(reqPending, reqClaimed) {
			claimed = append(claimed, r)
		}
	}
	if len(claimed) == 0 {
		return
	}
	claimed, results, fatal := s.runBatch(claimed, true)
	if errors.Is(fatal, errRetrySafely) {
		_, results, fatal = s.runBatch(claimed, false)
	}
	s.forgetWritten() // before anyone hears the writes are done
	if s.afterBatch != nil {
		s.afterBatch()
	}
	if fatal != nil {
		for _, r := range claimed {
			r.done <- fatal
		}
		return
	}
	s.batches.Add(1)
	s.batched.Add(int64(len(claimed)))
	for i, r := range claimed {
		r.done <- results[i]
	}
}

// errRetrySafely ends a run of a batch without savepoints: a request
// failed after running a statement, and only a savepoint undoes just its
// changes.
var errRetrySafely = errors.New("a write request failed after running a statement")

// runBatch runs the requests in one transaction and commits it, each in
// its own savepoint unless optimistic (see commitBatch), and returns them
// with their results in order. fatal reports that nothing committed.
//
// A batch of creates stays open for the requests queued while it runs
// (claimMore): submits that arrive while one batch runs share its commit
// instead of waiting for one of their own (a commit costs as much as
// several submits' statements). Only creates: a batch holding another write (which may have
// been waiting a while, or may hold the writer on purpose) commits when
// its requests are done. The rerun with savepoints runs the same
// requests and takes no more.
func (s *Store) runBatch(claimed []*writeReq, optimistic bool) (_ []*writeReq, results []error, fatal error) {
	w := s.w
	if _, err := w.exec("BEGIN IMMEDIATE"); err != nil {
		return claimed, nil, interpretError("begin write transaction", err)
	}
	if err := s.noteOtherWriters(); err != nil {
		_, _ = w.exec("ROLLBACK")
		return claimed, nil, interpretError("read the data version", err)
	}
	w.rev++
	w.audit.head = auditHead{} // read the newest audit record afresh, once per transaction
	w.jobID = 0                // and the last job id
	w.snaps.Begin()
	w.repeats.begin()
	results = make([]error, 0, len(claimed))
	creates := true // every request run so far is a create
	for i := 0; i < len(claimed); i++ {
		r := claimed[i]
		var err error
		mark := w.snaps.Mark()
		if optimistic {
			ran := w.ran
			if err = callSafely(w, func(w *writer) error { return runRequest(w, r) }); err != nil && w.ran != ran {
				fatal = errRetrySafely
			}
		} else {
			err, fatal = runInSavepoint(w, "request", func(w *writer) error { return runRequest(w, r) })
		}
		if fatal != nil {
			_, _ = w.exec("ROLLBACK")
			w.repeats.forget()
			return claimed, nil, fatal
		}
		if err != nil {
			// Nothing it wrote stays: in a savepoint it was rolled back;
			// optimistic, it ran no statement.
			w.snaps.Undo(mark)
		}
		w.repeats.endRequest(err)
		results = append(results, err)
		creates = creates && r.create
		if optimistic && creates && i == len(claimed)-1 {
			claimed = s.claimMore(claimed)
		}
	}
	if _, err := w.exec("COMMIT"); err != nil {
		_, _ = w.exec("ROLLBACK")
		w.repeats.forget()
		return claimed, nil, interpretError("commit write transaction", err)
	}
	w.snaps.Commit()
	return claimed, results, nil
}

// claimMore appends to claimed the requests waiting now, up to maxBatch
// in all.
func (s *Store) claimMore(claimed []*writeReq) []*writeReq {
	for len(claimed) < maxBatch {
		select {
		case r := <-s.reqs:
			if r.state.CompareAndSwap(reqPending, reqClaimed) {
				claimed = append(claimed, r)
			}
		default:
			return claimed
		}
	}
	return claimed
}

// runInSavepoint runs fn inside SAVEPOINT name. When fn fails, its changes are
// rolled back and its error returned as err. fatal reports that the savepoint
// itself could not be managed, which leaves the whole transaction unusable.
func runInSavepoint(w *writer, name string, fn func(w *writer) error) (err, fatal error) {
	if _, e := w.exec("SAVEPOINT " + name); e != nil {
		return nil, interpretError("open savepoint", e)
	}
	err = callSafely(w, fn)
	if err != nil {
		if _, e := w.exec("ROLLBACK TO " + name); e != nil {
			return nil, fmt.Errorf("roll back savepoint after %v: %w", err, interpretError("roll back savepoint", e))
		}
	}
	if _, e := w.exec("RELEASE " + name); e != nil {
		return nil, interpretError("release savepoint", e)
	}
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
