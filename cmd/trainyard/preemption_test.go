package main

import (
	"strings"
	"testing"
	"time"

	"trainyard/internal/control"
)

// The preemption_guard: section sets the guard; what it leaves out keeps
// the defaults, max: 0 turns it off, and a bad value names its key.
func TestPreemptionGuardConfig(t *testing.T) {
	load := func(t *testing.T, text string) (control.PreemptionGuard, error) {
		t.Helper()
		cfg := configFromText(t, text)
		return cfg.PreemptionGuard.guard()
	}
	tests := map[string]struct {
		text string
		want control.PreemptionGuard
	}{
		"absent": {"listen: 127.0.0.1:0\n", control.PreemptionGuard{Max: 3, Window: 30 * time.Minute, Hold: time.Hour}},
		"all":    {"preemption_guard: {max: 5, window: 10m, hold: 2h}\n", control.PreemptionGuard{Max: 5, Window: 10 * time.Minute, Hold: 2 * time.Hour}},
		"off":    {"preemption_guard: {max: 0}\n", control.PreemptionGuard{Max: 0, Window: 30 * time.Minute, Hold: time.Hour}},
		"hold":   {"preemption_guard: {hold: 1d}\n", control.PreemptionGuard{Max: 3, Window: 30 * time.Minute, Hold: 24 * time.Hour}},
	}
	for name, tc := range tests {
		if got, err := load(t, tc.text); err != nil || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v", name, got, err, tc.want)
		}
	}
	for text, want := range map[string]string{
		"preemption_guard: {max: -1}\n":     "preemption_guard.max",
		"preemption_guard: {window: 0}\n":   "preemption_guard.window",
		"preemption_guard: {hold: soon}\n":  "preemption_guard.hold",
		"preemption_guard: {window: -5m}\n": "preemption_guard.window",
	} {
		if _, err := load(t, text); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v; want an error naming %s", text, err, want)
		}
	}
}
