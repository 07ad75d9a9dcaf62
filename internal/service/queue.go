package service

import (
	"context"

	"trainyard/internal/domain"
)

// QueueEntry is one waiting job as the scheduler last ordered it.
type QueueEntry = domain.QueueEntry

// QueueFunc returns the queue of one pool (all pools when pool is ""), in
// scheduling order. The control loop provides it.
type QueueFunc func(ctx context.Context, pool string) ([]QueueEntry, error)
