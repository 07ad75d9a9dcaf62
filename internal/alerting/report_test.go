package alerting_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"trainyard/internal/alerting"
	"trainyard/internal/alerts"
	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// The weekly report is written once a week, for the seven days before its
// scheduled time, and sent once: a restart in the same week restores it
// instead of sending it again, a failed write is tried again a minute
// later, and the next week's report replaces it without a "resolved"
// notification.
func TestWeeklyReportIsSentOncePerWeek(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	// Wednesday 2 December 2026, 12:00 UTC: the report due is that of
	// Monday 30 November 09:00, reviewing the week before it.
	clk := clock.NewFake(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	var mu sync.Mutex
	var asked []string
	fail := true
	review := func(_ context.Context, since, until time.Time, by string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, since.Format(time.RFC3339)+".."+until.Format(time.RFC3339)+" by "+by)
		if fail {
			fail = false
			return "", errors.New("store unavailable")
		}
		return "Review of " + since.Format("2006-01-02") + ": 3 jobs", nil
	}
	on := true
	tune := func(c *alerting.Config) {
		c.Clock, c.Review = clk, review
		c.Alerts.Rules.WeeklyReport = alerts.ReportRule{RuleBase: alerts.RuleBase{Enabled: &on}, By: "pool"}
	}
	h := &hook{}
	hs := httptest.NewServer(h)
	defer hs.Close()
	srv := hs.URL
	a, stop, done := newAlerterWith(t, st, srv, tune)
	observe(a, map[int64]domain.Job{}, nil)
	waitFor(t, "a first try", func() bool { mu.Lock(); defer mu.Unlock(); return len(asked) == 1 })
	// The write failed: nothing fires until a minute has passed.
	clk.Advance(alerting.ReportRetry)
	key := alerts.ReportKey("2026-W48")
	waitFor(t, "the report", func() bool { return slices.Contains(h.list(), "firing "+key) })
	mu.Lock()
	want := []string{"2026-11-23T09:00:00Z..2026-11-30T09:00:00Z by pool", "2026-11-23T09:00:00Z..2026-11-30T09:00:00Z by pool"}
	if !slices.Equal(asked, want) {
		t.Errorf("reviews asked = %q, want %q", asked, want)
	}
	mu.Unlock()
	firing, _ := st.ListAlerts(ctx, store.AlertFilter{State: domain.AlertFiring})
	if len(firing) != 1 || firing[0].Rule != "weekly_report" || firing[0].Severity != "info" || firing[0].Summary != "Review of 2026-11-23: 3 jobs" {
		t.Fatalf("stored alerts = %+v", firing)
	}
	// Delivery is at least once: a stop before the send is recorded would
	// send it again after the restart.
	waitFor(t, "the delivery recorded", func() bool {
		p, err := st.PendingNotifications(ctx, 10)
		return err == nil && len(p) == 0
	})
	stop()
	<-done

	// A restart later that week: the report is restored, not written or
	// sent again.
	clk.Advance(24 * time.Hour)
	a, stop, done = newAlerterWith(t, st, srv, tune)
	observe(a, map[int64]domain.Job{}, nil)
	clk.Advance(time.Second)
	// Monday 7 December 09:00: the next week's report replaces it.
	clk.Advance(time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC).Sub(clk.Now()))
	next := alerts.ReportKey("2026-W49")
	waitFor(t, "the next report", func() bool { return slices.Contains(h.list(), "firing "+next) })
	waitFor(t, "the first report to resolve", func() bool {
		l, _ := st.ListAlerts(ctx, store.AlertFilter{State: domain.AlertResolved})
		return len(l) == 1 && l[0].Key == key
	})
	stop()
	<-done
	if got := h.list(); !slices.Equal(got, []string{"firing " + key, "firing " + next}) {
		t.Errorf("notifications = %q; want each report once and no resolution", got)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 3 || asked[2] != "2026-11-30T09:00:00Z..2026-12-07T09:00:00Z by pool" {
		t.Errorf("reviews asked = %q; want one more, for the week to 7 December", asked)
	}
}
