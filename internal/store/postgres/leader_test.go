package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// Leadership is per schema: installations sharing a database elect apart.
// Within one, a second replica waits until the leader lets go; the new
// term's epoch fences the old one; signals reach every listener.
func TestLeadershipAndSignals(t *testing.T) {
	ctx := context.Background()
	dsn := newSchema(t)
	open := func() *Store {
		s, err := Open(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a, b, other := open(), open(), openTest(t)

	actx, endA := context.WithCancel(ctx)
	termA, err := a.Lead(actx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if name, epoch, err := b.Leader(ctx); err != nil || name != "a" || epoch != termA.Epoch {
		t.Fatalf("Leader = %q %d %v; want a, term %d", name, epoch, err, termA.Epoch)
	}
	// Holding the lead blocks no write (the locks' keys differ).
	wctx, cancelWrite := context.WithTimeout(ctx, 5*time.Second)
	defer cancelWrite()
	for _, st := range []*Store{a, b} {
		if err := st.AppendAudit(wctx, domain.AuditRecord{At: time.Now(), Actor: "user:t", Action: "test", Result: domain.AuditOK}); err != nil {
			t.Fatalf("an audited write while a leads: %v", err)
		}
	}
	octx, cancelO := context.WithTimeout(ctx, 5*time.Second)
	defer cancelO()
	if _, err := other.Lead(octx, "other"); err != nil {
		t.Fatalf("an installation in another schema could not lead: %v", err)
	}

	// b waits while a leads.
	wctx, cancelW := context.WithTimeout(ctx, 700*time.Millisecond)
	if _, err := b.Lead(wctx, "b"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("b led while a did: %v", err)
	}
	cancelW()

	// Signals reach a listener.
	got := make(chan string, 4)
	lctx, stopListen := context.WithCancel(ctx)
	defer stopListen()
	go b.ListenSignals(lctx, func(topic string) { got <- topic })
	deadline := time.After(10 * time.Second)
	for sent := false; !sent; {
		if err := a.Signal(ctx, "auth"); err != nil {
			t.Fatal(err)
		}
		select {
		case topic := <-got:
			if topic != "auth" {
				t.Fatalf("signal %q, want auth", topic)
			}
			sent = true
		case <-time.After(100 * time.Millisecond): // the listener may not be listening yet: send again
		case <-deadline:
			t.Fatal("no signal arrived")
		}
	}

	// a lets go; b leads with a newer epoch; a's term is fenced.
	endA()
	<-termA.Lost
	bctx, cancelB := context.WithTimeout(ctx, 10*time.Second)
	defer cancelB()
	termB, err := b.Lead(bctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	if termB.Epoch <= termA.Epoch {
		t.Fatalf("epoch %d after %d; want it to grow", termB.Epoch, termA.Epoch)
	}
	if err := a.Fence(ctx, termA.Epoch); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("the old term passed the fence: %v", err)
	}
	if err := b.Fence(ctx, termB.Epoch); err != nil {
		t.Fatalf("the current term failed the fence: %v", err)
	}
}
