package alerts

import (
	"container/heap"
	"time"
)

// queuedJobs is the engine's copy of the queued jobs, kept from what entered
// and left the queue (QueueChanged) or set whole (an Observation's
// Queued). Jobs not yet queued for queued_too_long's After wait in a heap
// by queue-entry time, so an evaluation looks only at the oldest, those
// that came past it since the last.
type queuedJobs struct {
	jobs map[int64]QueuedJob
	// waits holds the jobs not yet past the threshold, oldest first; an
	// entry whose job left the queue, or entered it again since, is
	// stale and skipped when it comes up.
	waits waitHeap
	// reruns are the queued jobs that re-run another (RerunOf), which
	// resolves the event alerts of the job they re-run.
	reruns map[int64]JobRef
}

func newQueued() queuedJobs {
	return queuedJobs{jobs: map[int64]QueuedJob{}, reruns: map[int64]JobRef{}}
}

// QueueChanged tells the engine what changed in the queue since it was
// last told: the jobs that entered it or whose entry changed, and the ids
// of those that left it (an id it does not know is ignored). Evaluate
// uses this queue for an Observation with QueueKept. Its cost follows the
// jobs named, not the queue.
func (e *Engine) QueueChanged(entered []QueuedJob, left []int64) {
	q := &e.queue
	for _, id := range left {
		delete(q.jobs, id)
		delete(q.reruns, id)
	}
	for _, j := range entered {
		old, had := q.jobs[j.Job.ID]
		q.jobs[j.Job.ID] = j
		if j.Job.RerunOf != 0 {
			q.reruns[j.Job.ID] = j.Job
		} else {
			delete(q.reruns, j.Job.ID)
		}
		if !had || !old.QueuedSince.Equal(j.QueuedSince) {
			heap.Push(&q.waits, wait{id: j.Job.ID, since: j.QueuedSince})
		}
	}
	if len(q.waits) > 2*len(q.jobs)+1024 { // mostly stale: start again
		q.rebuild()
	}
}

// SetQueue replaces the queue the engine keeps with jobs, the whole
// queue (see QueueChanged).
func (e *Engine) SetQueue(jobs []QueuedJob) { e.queue.set(jobs) }

// Queued reports whether the job is in the queue the engine keeps.
func (e *Engine) Queued(id int64) bool {
	_, ok := e.queue.jobs[id]
	return ok
}

// set replaces the queue with jobs.
func (q *queuedJobs) set(jobs []QueuedJob) {
	clear(q.jobs)
	clear(q.reruns)
	for _, j := range jobs {
		q.jobs[j.Job.ID] = j
		if j.Job.RerunOf != 0 {
			q.reruns[j.Job.ID] = j.Job
		}
	}
	q.rebuild()
}

// rebuild makes the heap of every job in the queue.
func (q *queuedJobs) rebuild() {
	q.waits = q.waits[:0]
	for id, j := range q.jobs {
		q.waits = append(q.waits, wait{id: id, since: j.QueuedSince})
	}
	heap.Init(&q.waits)
}

// pastDue takes out of the heap and returns the queued jobs that entered
// the queue at or before by: those past the threshold since the last call
// (a job queued since a zero time never is).
func (q *queuedJobs) pastDue(by time.Time) []QueuedJob {
	var out []QueuedJob
	for len(q.waits) > 0 && !q.waits[0].since.After(by) {
		w := heap.Pop(&q.waits).(wait)
		j, ok := q.jobs[w.id]
		if !ok || !j.QueuedSince.Equal(w.since) || j.QueuedSince.IsZero() {
			continue // stale
		}
		out = append(out, j)
	}
	return out
}

// wait is a queued job in the heap: its id and when it entered the queue.
type wait struct {
	id    int64
	since time.Time
}

// waitHeap orders waits oldest first, then by job id.
type waitHeap []wait

func (h waitHeap) Len() int { return len(h) }
func (h waitHeap) Less(i, j int) bool {
	if c := h[i].since.Compare(h[j].since); c != 0 {
		return c < 0
	}
	return h[i].id < h[j].id
}
func (h waitHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *waitHeap) Push(x any)   { *h = append(*h, x.(wait)) }
func (h *waitHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	*h = old[:len(old)-1]
	return w
}
