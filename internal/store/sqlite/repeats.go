package sqlite

import (
	"slices"
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
//
// Once a submitter created DuplicateShown+1 jobs of a spec, a look at
// that spec needs no reading at all: it reads those jobs (see
// repeatMemo). The writer alone writes the database, so what it knows of
// them stays true from one transaction to the next while the requests
// that run are creates that commit.

// repeatWindows is what the writer knows of submitters' windows in the
// running transaction. It stays true only while the requests that run are
// creates, which add exactly the job they report; any other request, or
// one that fails, makes it forget everything.
type repeatWindows struct {
	seen map[string]bool          // submitters looked up in this transaction
	wins map[string]*repeatWindow // and those looked up twice
	// creates counts each submitter's creates since the writer last
	// forgot (forget).
	creates map[string]int
	// memos holds each submitter's newest jobs of each spec created
	// since: see repeatMemo.
	memos map[repeatKey]*repeatMemo
	// Set by the running request (see createJob).
	keep    bool   // it is a create: it changes no job but the one it adds
	created string // the submitter of the job it added ("": none)
	// createdJob is the job it added, with what a look reads of it.
	createdJob domain.Job
}

// repeatKey names a submitter's jobs of one spec.
type repeatKey struct{ submitter, specHash string }

// repeatMemo is a submitter's newest jobs of one spec created since the
// writer last forgot, newest first, DuplicateShown+1 at most, with each
// one's place among the submitter's creates since (1 the first). Every
// job of the spec newer than the oldest of them is among them, and each
// is queued (live), so when there are DuplicateShown+1 and the oldest is
// still among the submitter's newest DuplicateScan jobs, they are what a
// look reads, whatever since it asks for.
type repeatMemo struct {
	jobs []domain.Job
	ords []int
}

// answer returns the newest DuplicateShown jobs a look for the memo's
// submitter and spec reads (it reads more), given the submitter's creates
// so far; ok is false when only the query tells.
func (m *repeatMemo) answer(creates int) (jobs []domain.Job, ok bool) {
	// The submitter's jobs newer than the oldest number creates-ord.
	if len(m.jobs) != store.DuplicateShown+1 || creates-m.ords[len(m.ords)-1] >= store.DuplicateScan {
		return nil, false
	}
	return slices.Clone(m.jobs[:store.DuplicateShown]), true
}

// add records a new job of the memo's submitter and spec, its place among
// the submitter's creates ord.
func (m *repeatMemo) add(job domain.Job, ord int) {
	n := min(len(m.jobs), store.DuplicateShown)
	m.jobs = slices.Insert(m.jobs[:n], 0, job)
	m.ords = slices.Insert(m.ords[:n], 0, ord)
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

// maxMemos bounds the submitters and specs the writer remembers; past
// it, it forgets them all.
const maxMemos = 1024

// begin starts a transaction: no window is known; the memos of the
// creates committed before stay true.
func (r *repeatWindows) begin() {
	clear(r.seen)
	clear(r.wins)
	if len(r.memos) > maxMemos || len(r.creates) > maxMemos {
		r.forget()
	}
	r.startRequest()
}

// forget drops everything known: a request changed more than the job it
// added, or failed, or its transaction rolled back.
func (r *repeatWindows) forget() {
	clear(r.seen)
	clear(r.wins)
	clear(r.creates)
	clear(r.memos)
}

func (r *repeatWindows) startRequest() { r.keep, r.created, r.createdJob = false, "", domain.Job{} }

// endRequest takes in what the request that just ran did; err is its
// outcome.
func (r *repeatWindows) endRequest(err error) {
	switch {
	case err != nil || !r.keep:
		r.forget()
	case r.created != "":
		if w := r.wins[r.created]; w != nil {
			w.added++
		}
		if r.creates == nil {
			r.creates, r.memos = map[string]int{}, map[repeatKey]*repeatMemo{}
		}
		r.creates[r.created]++
		k := repeatKey{r.created, r.createdJob.SpecHash}
		m := r.memos[k]
		if m == nil {
			m = &repeatMemo{}
			r.memos[k] = m
		}
		m.add(r.createdJob, r.creates[r.created])
	}
	r.startRequest()
}

// memo returns the newest DuplicateShown jobs a look for submitter's jobs
// of specHash reads (it reads more) when the jobs the writer created
// tell.
func (r *repeatWindows) memo(submitter, specHash string) ([]domain.Job, bool) {
	m := r.memos[repeatKey{submitter, specHash}]
	if m == nil {
		return nil, false
	}
	return m.answer(r.creates[submitter])
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
