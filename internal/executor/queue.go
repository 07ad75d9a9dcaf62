package executor

import "sync"

// EventQueue delivers an executor's events in the order they were pushed,
// without ever blocking the one that pushes them on a slow reader: events
// wait in memory until Events' reader takes them. Executors push while
// holding their own lock, so that events are ordered as their state
// changes; the queue's lock is taken after it, never before.
type EventQueue struct {
	mu      sync.Mutex
	pending []Event
	wake    chan struct{}
	out     chan Event
	stop    <-chan struct{}
}

// NewEventQueue returns a queue whose delivery (Run) ends when stop is
// closed.
func NewEventQueue(stop <-chan struct{}) *EventQueue {
	return &EventQueue{wake: make(chan struct{}, 1), out: make(chan Event, 1024), stop: stop}
}

// Push queues ev for delivery.
func (q *EventQueue) Push(ev Event) {
	q.mu.Lock()
	q.pending = append(q.pending, ev)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Events is the channel Run delivers to (Executor.Events).
func (q *EventQueue) Events() <-chan Event { return q.out }

// Run delivers queued events until stop is closed.
func (q *EventQueue) Run() {
	for {
		select {
		case <-q.stop:
			return
		case <-q.wake:
		}
		q.mu.Lock()
		batch := q.pending
		q.pending = nil
		q.mu.Unlock()
		for _, ev := range batch {
			select {
			case q.out <- ev:
			case <-q.stop:
				return
			}
		}
	}
}
