package service_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/executor/local"
	"trainyard/internal/logs"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite/sqlitetest"
)

type logEnv struct {
	svc    *service.Service
	st     store.Store
	clk    *clock.Fake
	layout logs.Layout
}

func newLogEnv(t *testing.T) logEnv {
	t.Helper()
	dir := t.TempDir()
	st := sqlitetest.Open(t, dir)
	clk := clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))
	layout := logs.Layout{Root: filepath.Join(dir, "runs")}
	svc := service.New(service.Config{Store: st, Clock: clk, ArtifactsRoot: filepath.Join(dir, "artifacts"), Logs: layout, Files: local.NewReader(layout.Root)})
	pool := domain.Pool{Name: "default", Nodes: []domain.Node{{Name: "n1", CPUs: 8, Memory: 32 << 30}}}
	if _, _, err := svc.Pools.PutPool(context.Background(), admin, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Pools.SetQuota(context.Background(), admin, domain.Quota{Project: "default", Pool: "default",
		Guaranteed: pool.Capacity(), MaxPriority: domain.PriorityUrgent}); err != nil {
		t.Fatal(err)
	}
	return logEnv{svc: svc, st: st, clk: clk, layout: layout}
}

// job submits a job and gives it an attempt directory with a log (the
// store's job has no attempt row: retention goes by the job's end); cancel
// ends it at the fake clock's time.
func (e logEnv) job(t *testing.T, name string, cancel bool) int64 {
	t.Helper()
	ctx := context.Background()
	job, _, err := e.svc.Jobs.Submit(ctx, admin, service.SubmitInput{Doc: []byte("name: " + name + "\nentrypoint: [true]\n")})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(e.layout.WorkDir(job.ID, 1), 0o755); err != nil {
		t.Fatal(err)
	}
	line := logs.AppendLine(nil, e.clk.Now(), logs.Stdout, []byte("hello from "+name))
	if err := os.WriteFile(e.layout.LogPath(job.ID, 1), line, 0o644); err != nil {
		t.Fatal(err)
	}
	if cancel {
		if _, err := e.svc.Jobs.Cancel(ctx, admin, job.ID, ""); err != nil {
			t.Fatal(err)
		}
	}
	return job.ID
}

func (e logEnv) hasLogs(id int64) bool {
	_, err := os.Stat(e.layout.AttemptDir(id, 1))
	return err == nil
}

func TestExpireLogs(t *testing.T) {
	e := newLogEnv(t)
	ctx := context.Background()
	const keep = 30 * 24 * time.Hour
	old := e.job(t, "old", true)
	e.clk.Advance(20 * 24 * time.Hour)
	recent := e.job(t, "recent", true)
	active := e.job(t, "active", false)
	auditBefore, err := e.st.ListAudit(ctx, store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}

	if n, err := e.svc.Artifacts.ExpireLogs(ctx, 0); n != 0 || err != nil || !e.hasLogs(old) {
		t.Fatalf("retention 0 = %d, %v; it must delete nothing", n, err)
	}
	e.clk.Advance(11 * 24 * time.Hour) // old finished 31 days ago, recent 11
	n, err := e.svc.Artifacts.ExpireLogs(ctx, keep)
	if err != nil || n != 1 {
		t.Fatalf("ExpireLogs = %d, %v; want 1 job", n, err)
	}
	if e.hasLogs(old) || !e.hasLogs(recent) || !e.hasLogs(active) {
		t.Fatalf("logs left: old %v recent %v active %v; want only old's deleted", e.hasLogs(old), e.hasLogs(recent), e.hasLogs(active))
	}
	if _, err := e.st.GetJob(ctx, old); err != nil {
		t.Errorf("the job row of an expired job is gone: %v", err)
	}
	auditAfter, err := e.st.ListAudit(ctx, store.AuditFilter{})
	if err != nil || len(auditAfter) != len(auditBefore) {
		t.Errorf("audit records %d → %d (%v); retention must not touch them", len(auditBefore), len(auditAfter), err)
	}

	_, err = e.svc.Jobs.OpenLogs(ctx, admin, old, service.LogRequest{})
	if !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("logs of an expired job: %v, want not found", err)
	}
	if want := "the logs of job 1 expired under the server's log retention (30d)"; err.Error() != want {
		t.Errorf("error = %q, want %q", err, want)
	}
	if _, err := e.svc.Jobs.OpenLogs(ctx, admin, recent, service.LogRequest{}); err == nil || strings.Contains(err.Error(), "expired") {
		t.Errorf("logs of a recent job (no attempt row): %v, want the no-attempt error, not expiry", err)
	}
	// A second pass finds nothing new.
	if n, err := e.svc.Artifacts.ExpireLogs(ctx, keep); n != 0 || err != nil {
		t.Errorf("second pass = %d, %v", n, err)
	}
}

func TestRunLogRetention(t *testing.T) {
	e := newLogEnv(t)
	const keep = 24 * time.Hour
	first := e.job(t, "first", true)
	e.clk.Advance(2 * keep)
	second := e.job(t, "second", true)

	ctx, cancel := context.WithCancel(context.Background())
	ticks := make(chan time.Time)
	passes := make(chan int)
	stopped := make(chan struct{})
	go func() {
		e.svc.Artifacts.RunLogRetention(ctx, keep, ticks, func(n int) { passes <- n })
		close(stopped)
	}()
	// The first pass runs at start.
	if n := <-passes; n != 1 || e.hasLogs(first) || !e.hasLogs(second) {
		t.Fatalf("start pass expired %d; first has logs %v, second %v", n, e.hasLogs(first), e.hasLogs(second))
	}
	e.clk.Advance(2 * keep)
	ticks <- e.clk.Now()
	if n := <-passes; n != 1 || e.hasLogs(second) {
		t.Fatalf("daily pass expired %d; second has logs %v", n, e.hasLogs(second))
	}
	cancel()
	<-stopped
}

func TestLogFilterValidation(t *testing.T) {
	e := newLogEnv(t)
	id := e.job(t, "filtered", true)
	ctx := context.Background()
	tests := map[string]struct {
		req  service.LogRequest
		path string // "" when valid
	}{
		"valid grep":         {service.LogRequest{Grep: `loss=\d+`}, ""},
		"bad grep":           {service.LogRequest{Grep: `loss(`}, "grep"},
		"duration since":     {service.LogRequest{Since: "10m"}, ""},
		"day since":          {service.LogRequest{Since: "1d"}, ""},
		"rfc3339 since":      {service.LogRequest{Since: "2025-06-01T12:00:00Z"}, ""},
		"bad since":          {service.LogRequest{Since: "yesterday"}, "since"},
		"negative since":     {service.LogRequest{Since: "-5m"}, "since"},
		"both bad name both": {service.LogRequest{Grep: "[", Since: "x"}, "grep"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := e.svc.Jobs.OpenLogs(ctx, admin, id, tt.req)
			if tt.path == "" {
				// The job has no attempt: a valid filter gets that far.
				var fe domain.FieldErrors
				if errors.As(err, &fe) {
					t.Fatalf("OpenLogs: %v", err)
				}
				return
			}
			if paths := fieldPaths(t, err); len(paths) == 0 || paths[0] != tt.path {
				t.Errorf("field paths = %v, want %s first", paths, tt.path)
			}
		})
	}
}
