package sqlite

import (
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlstore"
)

// The look for repeats (CreateJobLooking) considers only the submitter's
// newest DuplicateScan jobs, and finding the oldest of them walks that
// many index entries. When one submitter creates several jobs in one
// transaction (a script or a sweep submitting at once), the writer reads
// where that window starts once, at the second look, and counts the
// submitter's creates after it: a later look steps over that many ids
// only.

// repeatWindows is what the writer knows of submitters' windows in the
// running transaction. It stays true only while the requests that run are
// creates, which add exactly the job they report; any other request, or
// one that fails, makes it forget everything.
type repeatWindows struct {
	seen map[string]bool          // submitters looked up in this transaction
	wins map[string]*repeatWindow // and those looked up twice
	// Set by the running request (see createJob).
	keep    bool   // it is a create: it changes no job but the one it adds
	created string // the submitter of the job it added ("": none)
}

// repeatWindow is where a submitter's window starts: when it was read,
// the submitter's newest DuplicateScan jobs numbered n, the oldest being
// oldest; added jobs were created since.
type repeatWindow struct {
	n      int
	oldest int64
	added  int
}

// start returns the window's oldest id as the id skip places above from.
func (w *repeatWindow) start() (from int64, skip int) {
	if w.n == store.DuplicateScan {
		return w.oldest, w.added
	}
	// The submitter had fewer: all its jobs count until it has
	// DuplicateScan, and then the window starts above its oldest.
	return 0, max(0, w.n+w.added-store.DuplicateScan)
}

// begin starts a transaction: nothing is known.
func (r *repeatWindows) begin() {
	clear(r.seen)
	clear(r.wins)
	r.startRequest()
}

func (r *repeatWindows) startRequest() { r.keep, r.created = false, "" }

// endRequest takes in what the request that just ran did; err is its
// outcome.
func (r *repeatWindows) endRequest(err error) {
	switch {
	case err != nil || !r.keep:
		clear(r.seen)
		clear(r.wins)
	case r.created != "":
		if w := r.wins[r.created]; w != nil {
			w.added++
		}
	}
	r.startRequest()
}

// repeatWindow returns the submitter's window, reading it at its second
// look in the transaction; nil: the look walks the window as SameSpecJobs
// does.
func (w *writer) repeatWindow(submitter string) (*repeatWindow, error) {
	r := &w.repeats
	if win := r.wins[submitter]; win != nil {
		return win, nil
	}
	if !r.seen[submitter] {
		if r.seen == nil {
			r.seen = map[string]bool{}
		}
		r.seen[submitter] = true
		return nil, nil
	}
	query, args := sqlstore.SubmitterWindowQuery(submitter)
	win := &repeatWindow{}
	if err := w.queryRow(query.SQL(sqlstore.SQLite), args...).Scan(&win.n, &win.oldest); err != nil {
		return nil, err
	}
	if r.wins == nil {
		r.wins = map[string]*repeatWindow{}
	}
	r.wins[submitter] = win
	return win, nil
}

// lookSameSpec runs SameSpecJobs's query in the write transaction, with
// the walk over the submitter's newest jobs spared when repeatWindow can.
func (w *writer) lookSameSpec(submitter, specHash string, since time.Time) ([]domain.Job, error) {
	win, err := w.repeatWindow(submitter)
	if err != nil {
		return nil, err
	}
	query, args := sqlstore.SameSpecQuery(submitter, specHash, since)
	if win != nil {
		from, skip := win.start()
		query, args = sqlstore.SameSpecAfterQuery(submitter, specHash, since, from, skip)
	}
	return w.sameSpec(query.SQL(sqlstore.SQLite), args, submitter, specHash)
}
