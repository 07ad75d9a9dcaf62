package jobspec

import (
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
)

func TestStopPolicyLoads(t *testing.T) {
	s := mustLoad(t, minimal+"policy: {timeout: 1h, grace: 45s, warn: {signal: USR1, before: 5m}, stop_signal_to: main}\n")
	p := s.Policy
	if p.Grace.D() != 45*time.Second || p.StopSignalTo != domain.StopMain || p.Warn == nil ||
		p.Warn.Signal != "USR1" || p.Warn.Before.D() != 5*time.Minute {
		c, _ := Canonical(s)
		t.Fatalf("policy decoded as %s", c)
	}
	s = mustLoad(t, minimal, "policy.grace=2m", "policy.stop_signal_to=group")
	if s.Policy.Grace.D() != 2*time.Minute || s.Policy.StopSignalTo != domain.StopGroup {
		t.Errorf("--set gave grace %s, stop_signal_to %q", s.Policy.Grace, s.Policy.StopSignalTo)
	}
	// Absent fields stay absent, so older specs keep their canonical form.
	c, _ := Canonical(mustLoad(t, minimal))
	for _, f := range []string{"grace", "warn", "stop_signal_to"} {
		if strings.Contains(string(c), `"`+f+`"`) {
			t.Errorf("canonical form of a spec without %s names it: %s", f, c)
		}
	}
}

func TestStopPolicyErrors(t *testing.T) {
	tests := map[string]struct {
		policy string
		path   string
		want   string
	}{
		"negative grace":      {"{grace: -1s}", "policy.grace", "0 or more"},
		"bad target":          {"{stop_signal_to: leader}", "policy.stop_signal_to", `"leader" is not a stop target`},
		"uncatchable signal":  {"{warn: {signal: KILL, before: 1m}}", "policy.warn.signal", "not a warning signal"},
		"lower-case signal":   {"{warn: {signal: usr1, before: 1m}}", "policy.warn.signal", "upper case"},
		"missing signal":      {"{warn: {before: 1m}}", "policy.warn.signal", "is missing"},
		"zero before":         {"{warn: {signal: USR1}}", "policy.warn.before", "more than 0"},
		"before past timeout": {"{timeout: 10m, warn: {signal: USR1, before: 10m}}", "policy.warn.before", "shorter than policy.timeout (10m), got 10m"},
		"no timeout":          {"{timeout: 0, warn: {signal: USR1, before: 1m}}", "policy.warn", "has none"},
		"warn not a mapping":  {"{warn: USR1}", "policy.warn", "must be a mapping"},
		"unknown warn field":  {"{warn: {signal: USR1, before: 1m, after: 2m}}", "policy.warn.after", ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			es := loadErrors(t, minimal+"policy: "+tc.policy+"\n")
			for _, e := range es {
				if e.Path == tc.path && strings.Contains(e.Message, tc.want) {
					return
				}
			}
			t.Errorf("errors %v; want one at %s containing %q", es, tc.path, tc.want)
		})
	}
	if _, err := Load([]byte(minimal+"policy: {warn: {signal: SIGUSR2, before: 1m}}\n"), nil); err != nil {
		t.Errorf("SIG prefix refused: %v", err)
	}
}

func TestEffectiveGrace(t *testing.T) {
	for _, tc := range []struct{ job, def, ceiling, want time.Duration }{
		{0, 10 * time.Second, 10 * time.Minute, 10 * time.Second},
		{45 * time.Second, 10 * time.Second, 10 * time.Minute, 45 * time.Second},
		{time.Hour, 10 * time.Second, 10 * time.Minute, 10 * time.Minute},
		{time.Hour, 10 * time.Second, 0, time.Hour},
		{0, 20 * time.Minute, 10 * time.Minute, 10 * time.Minute},
	} {
		if got := domain.EffectiveGrace(tc.job, tc.def, tc.ceiling); got != tc.want {
			t.Errorf("EffectiveGrace(%s, %s, %s) = %s, want %s", tc.job, tc.def, tc.ceiling, got, tc.want)
		}
	}
}
