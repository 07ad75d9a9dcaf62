package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"trainyard/internal/domain"
)

// A pool from before the rate history gets, when the history's migration
// runs, one entry in force since the epoch with the rates it has then.
func TestRateHistoryBackfill(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "trainyard.db")
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	rates := domain.Rates{GPUHour: 2 * domain.MoneyUnit}
	p := domain.Pool{Name: "gpu", Executor: "local", Rates: rates, CreatedAt: t0, UpdatedAt: t0}
	if _, err := s.PutPool(ctx, p, domain.AuditRecord{Actor: "user:test", Action: "pool.write", Result: domain.AuditOK}); err != nil {
		t.Fatal(err)
	}
	// Back to the schema before the history: the pool row alone.
	if err := s.write(ctx, func(w *writer) error {
		if _, err := w.exec("DROP TABLE pool_rates"); err != nil {
			return err
		}
		_, err := w.exec("DELETE FROM schema_migrations WHERE name = '0029_pool_rates_history.sql'")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(ctx, path); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.RateHistory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Pool != "gpu" || !got[0].From.Equal(time.Unix(0, 0)) || got[0].Rates != rates {
		t.Errorf("history after the migration = %+v, want pool gpu at 2.00/GPU-h since the epoch", got)
	}
}
