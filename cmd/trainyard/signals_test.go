package main

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
)

// A burst of signals of one topic while one is on its way sends one more
// after it, not one each; another topic is sent on its own.
func TestSignalerCoalescesBursts(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	sent := map[string]int{}
	s := &signaler{log: slog.New(slog.NewTextHandler(io.Discard, nil)), send: func(_ context.Context, topic string) error {
		if topic == "wake" {
			<-release
		}
		mu.Lock()
		sent[topic]++
		mu.Unlock()
		return nil
	}}
	count := func(topic string) int {
		mu.Lock()
		defer mu.Unlock()
		return sent[topic]
	}
	waitFor := func(topic string, n int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); count(topic) < n; {
			if time.Now().After(deadline) {
				t.Fatalf("%s sent %d times, want %d", topic, count(topic), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for range 10 {
		s.signal("wake") // the first blocks in send; the rest wait for it
	}
	s.signal("auth")
	waitFor("auth", 1)
	release <- struct{}{}
	release <- struct{}{} // the one sent after the burst
	waitFor("wake", 2)
	// Once the second is done, none is on its way.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		idle := !s.topics["wake"].sending
		s.mu.Unlock()
		if idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the wake signals never finished")
		}
	}
	if n := count("wake"); n != 2 {
		t.Fatalf("wake sent %d times for a burst of 10, want 2", n)
	}
	// Signaled again once idle, it sends anew.
	s.signal("wake")
	release <- struct{}{}
	waitFor("wake", 3)
}
