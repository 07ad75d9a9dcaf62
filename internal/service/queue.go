package service

import (
	"context"
	"time"

	"trainyard/internal/domain"
)

// QueueEntry is one waiting job as the scheduler last ordered it.
type QueueEntry struct {
	JobID     int64
	Name      string
	Project   string
	Pool      string
	Priority  domain.Priority
	Position  int // 1-based within its pool's queue
	Reason    domain.Reason
	Message   string
	Submitted time.Time
	// EstimatedStart is when the job is expected to start, from the running
	// jobs' timeouts; zero when it cannot be computed.
	EstimatedStart time.Time
}

// QueueFunc returns the queue of one pool (all pools when pool is ""), in
// scheduling order. The control loop provides it.
type QueueFunc func(ctx context.Context, pool string) ([]QueueEntry, error)
