package main

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// signaler sends a store's signals to the other replicas (store.Signals)
// without making its callers wait, and with at most one signal of a topic
// on its way at a time: a topic signaled again meanwhile is sent once
// more when that one is done. Every call is still followed by a signal
// sent after it, but a burst of calls (a wake-up per submit) costs two
// signals, not one round trip and NOTIFY each.
type signaler struct {
	send func(ctx context.Context, topic string) error
	log  *slog.Logger

	mu     sync.Mutex
	topics map[string]*topicSends
}

// topicSends is whether a topic's signal is on its way, and whether it
// was signaled again since it left.
type topicSends struct{ sending, again bool }

// signal sends topic, now or after the one on its way.
func (s *signaler) signal(topic string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.topics == nil {
		s.topics = map[string]*topicSends{}
	}
	t := s.topics[topic]
	if t == nil {
		t = &topicSends{}
		s.topics[topic] = t
	}
	if t.sending {
		t.again = true
		return
	}
	t.sending = true
	go s.run(topic, t)
}

// run sends topic until no call came while it was sent.
func (s *signaler) run(topic string, t *topicSends) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := s.send(ctx, topic); err != nil {
			s.log.Warn("signal the other replicas", "topic", topic, "err", err)
		}
		cancel()
		s.mu.Lock()
		if !t.again {
			t.sending = false
			s.mu.Unlock()
			return
		}
		t.again = false
		s.mu.Unlock()
	}
}
