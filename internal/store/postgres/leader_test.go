package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// Leases are per schema: installations sharing a database elect apart.
// Within one, a second replica cannot acquire while the lease is live; it
// takes over once the lease expires (by the database's clock) or is
// released, with a higher epoch, and the old term can no longer renew.
func TestLeases(t *testing.T) {
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

	if name, _, err := b.Leader(ctx); err != nil || name != "" {
		t.Fatalf("Leader before any term = %q, %v; want none", name, err)
	}
	epochA, ok, err := a.AcquireLease(ctx, "a", time.Minute)
	if err != nil || !ok {
		t.Fatalf("AcquireLease(a) = %d %v %v", epochA, ok, err)
	}
	if name, epoch, err := b.Leader(ctx); err != nil || name != "a" || epoch != epochA {
		t.Fatalf("Leader = %q %d %v; want a, term %d", name, epoch, err, epochA)
	}
	if _, ok, err := b.AcquireLease(ctx, "b", time.Minute); err != nil || ok {
		t.Fatalf("b acquired a live lease: %v %v", ok, err)
	}
	if _, ok, err := other.AcquireLease(ctx, "other", time.Minute); err != nil || !ok {
		t.Fatalf("an installation in another schema could not lead: %v %v", ok, err)
	}
	// Holding the lead blocks no write.
	for _, st := range []*Store{a, b} {
		if err := st.AppendAudit(ctx, domain.AuditRecord{At: time.Now(), Actor: "user:t", Action: "test", Result: domain.AuditOK}); err != nil {
			t.Fatalf("an audited write while a leads: %v", err)
		}
	}

	// A short lease expires unless renewed: renewals keep it.
	if err := a.ReleaseLease(ctx, "a", epochA); err != nil {
		t.Fatal(err)
	}
	if name, _, _ := b.Leader(ctx); name != "" {
		t.Fatalf("Leader after release = %q; want none", name)
	}
	epochA, ok, err = a.AcquireLease(ctx, "a", 300*time.Millisecond)
	if err != nil || !ok {
		t.Fatalf("AcquireLease(a) after release = %v %v", ok, err)
	}
	renewUntil := time.Now().Add(time.Second)
	for time.Now().Before(renewUntil) {
		if err := a.RenewLease(ctx, "a", epochA, 300*time.Millisecond); err != nil {
			t.Fatalf("renew a live lease: %v", err)
		}
		if _, ok, _ := b.AcquireLease(ctx, "b", time.Minute); ok {
			t.Fatal("b acquired a renewed lease")
		}
		time.Sleep(50 * time.Millisecond) // the renewal interval under test, not a wait for state
	}
	var epochB int64
	deadline := time.Now().Add(5 * time.Second)
	for {
		epochB, ok, err = b.AcquireLease(ctx, "b", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b did not acquire the lease a stopped renewing")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if epochB <= epochA {
		t.Fatalf("epoch %d after %d; want it to grow", epochB, epochA)
	}
	if err := a.RenewLease(ctx, "a", epochA, time.Minute); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("the old term renewed: %v; want ErrConflict", err)
	}
	if name, epoch, _ := a.Leader(ctx); name != "b" || epoch != epochB {
		t.Fatalf("Leader = %q %d; want b, term %d", name, epoch, epochB)
	}
}

// A write made for a leader term (store.WithFence) commits only while that
// term holds a live lease, checked in its own transaction: a deposed or
// expired leader's write fails with ErrConflict and changes nothing.
func TestFencedWrites(t *testing.T) {
	ctx := context.Background()
	dsn := newSchema(t)
	a, b := openOn(t, dsn), openOn(t, dsn)
	j := createTestJob(t, a, "fenced")
	setMessage := func(st *Store, fctx context.Context, msg string) error {
		_, err := st.Apply(fctx, []store.Change{{JobID: j.ID, In: []domain.JobState{domain.JobQueued},
			SetReason: true, Reason: j.Reason, Message: msg, At: time.Now()}})
		return err
	}
	message := func() string {
		got, err := a.GetJob(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.Message
	}

	epochA, ok, err := a.AcquireLease(ctx, "a", 400*time.Millisecond)
	if err != nil || !ok {
		t.Fatalf("AcquireLease = %v %v", ok, err)
	}
	if err := setMessage(a, store.WithFence(ctx, epochA), "by a"); err != nil {
		t.Fatalf("a fenced write of the current term: %v", err)
	}
	if got := message(); got != "by a" {
		t.Fatalf("message %q after the current term's write; want %q", got, "by a")
	}

	// The lease expires (a froze): a's write is refused though no one
	// took over yet.
	waitFor(t, 5*time.Second, "a's lease to expire", func() bool { name, _, _ := b.Leader(ctx); return name == "" })
	err = setMessage(a, store.WithFence(ctx, epochA), "by a, expired")
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("a's write after its lease expired: %v; want ErrConflict saying the lease expired", err)
	}

	// b takes over: a's write is refused naming the new term, and changes
	// nothing; b's writes and unfenced writes go through.
	epochB, ok, err := b.AcquireLease(ctx, "b", time.Minute)
	if err != nil || !ok {
		t.Fatalf("b could not take over an expired lease: %v %v", ok, err)
	}
	err = setMessage(a, store.WithFence(ctx, epochA), "by a, deposed")
	if !errors.Is(err, store.ErrConflict) || !strings.Contains(err.Error(), "no longer leads") {
		t.Fatalf("the deposed leader's write: %v; want ErrConflict saying it no longer leads", err)
	}
	if got := message(); got != "by a" {
		t.Fatalf("message %q after refused writes; want them to change nothing", got)
	}
	if err := setMessage(a, store.WithFence(ctx, epochB), "by b"); err != nil {
		t.Fatalf("a write of the current term %d: %v", epochB, err)
	}
	if err := setMessage(a, ctx, "by the API"); err != nil {
		t.Fatalf("an unfenced write: %v", err)
	}
	if got := message(); got != "by the API" {
		t.Fatalf("message %q; want %q", got, "by the API")
	}
	// A refused write in a batch leaves the others in it alone.
	errs := make(chan error, 2)
	go func() { errs <- setMessage(a, store.WithFence(ctx, epochA), "deposed again") }()
	go func() {
		_, _, err := a.CreateJob(ctx, testNewJob(t, "beside"), domain.AuditRecord{Actor: "user:test", Action: "test", Result: domain.AuditOK})
		errs <- err
	}()
	var conflicts int
	for range 2 {
		if err := <-errs; errors.Is(err, store.ErrConflict) {
			conflicts++
		} else if err != nil {
			t.Fatalf("a write beside a refused one: %v", err)
		}
	}
	if conflicts != 1 {
		t.Fatalf("%d writes refused, want the deposed leader's one", conflicts)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A fenced write transaction holds the leader row, so a new term cannot
// start between its check and its commit; one whose client paused (a
// leader frozen mid-transaction) is ended by the database after
// fenceIdleTimeout, and the takeover goes through.
func TestPausedFencedTransactionCannotHoldOffTakeover(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	epoch, ok, err := s.AcquireLease(ctx, "a", 200*time.Millisecond)
	if err != nil || !ok {
		t.Fatalf("AcquireLease = %v %v", ok, err)
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx) // the frozen leader's write transaction
	if err != nil {
		t.Fatal(err)
	}
	var cur int64
	var live bool
	if err := tx.QueryRow(ctx, fenceSQL, fenceIdleTimeout).Scan(&cur, new(string), &live, new(string)); err != nil || cur != epoch || !live {
		t.Fatalf("fence read = %d %v %v; want term %d, live", cur, live, err, epoch)
	}
	waitFor(t, 5*time.Second, "a's lease to expire", func() bool { name, _, _ := s.Leader(ctx); return name == "" })
	start := time.Now()
	got := make(chan error, 1)
	go func() {
		_, ok, err := s.AcquireLease(ctx, "b", time.Minute)
		if err == nil && !ok {
			err = errors.New("b found a live lease")
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("b took over %v after the lease expired, while a's fenced transaction was open (%v); want it to wait", time.Since(start), err)
	case <-time.After(500 * time.Millisecond): // how long the takeover must at least wait
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("b's takeover: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("b never took over: the paused transaction held the leader row")
	}
	t.Logf("takeover waited %v for the paused transaction", time.Since(start).Round(time.Millisecond))
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("the paused leader's transaction committed after the takeover")
	}
}
