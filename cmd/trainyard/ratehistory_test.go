package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/service"
	"trainyard/internal/store/sqlite"
)

// The config applied at each start records a pool's rates only when they
// differ from the stored ones, from that start on.
func TestConfigRatesRecordedWhenChanged(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	clk := clock.NewFake(time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC))
	svc := service.New(service.Config{Store: st, Clock: clk})
	start := func(gpuHour string) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "server.yaml")
		doc := "pools:\n  - {name: gpu, nodes: [{name: n, cpus: 1, memory: 1GiB}], rates: {gpu_hour: " + gpuHour + "}}\n"
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := loadServerConfig(path)
		if err == nil {
			err = applyScheduling(ctx, svc, cfg.schedulingConfig, executor.Inventory{}, quiet)
		}
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Hour)
	}
	start("2.00")
	start("2.00") // a restart with the same config
	start("3.00") // at hour 2
	h, err := st.RateHistory(ctx, "gpu")
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 || h[0].Rates.GPUHour != 2*domain.MoneyUnit || h[1].Rates.GPUHour != 3*domain.MoneyUnit ||
		!h[1].From.Equal(time.Date(2026, 3, 1, 2, 0, 0, 0, time.UTC)) {
		t.Errorf("rate history = %+v; want 2.00 from the first start, 3.00 from the third", h)
	}
}
