package main

import (
	"fmt"
	"time"

	"trainyard/internal/control"
	"trainyard/internal/domain"
)

// preemptionGuardConfig is the server config's preemption_guard: section
// (docs/scheduling.md): a job preempted more than max times within window
// is held from preemption for hold. max: 0 turns the guard off.
type preemptionGuardConfig struct {
	Max    *int   `yaml:"max"`    // default 3
	Window string `yaml:"window"` // default 30m
	Hold   string `yaml:"hold"`   // default 1h
}

// guard checks the section and returns the guard it sets; what it leaves
// out takes the defaults.
func (c preemptionGuardConfig) guard() (control.PreemptionGuard, error) {
	g := control.DefaultPreemptionGuard()
	if c.Max != nil {
		if *c.Max < 0 {
			return g, fmt.Errorf("server config preemption_guard.max: %d is negative; use a count such as 3, or 0 to turn the guard off", *c.Max)
		}
		g.Max = *c.Max
	}
	for _, d := range []struct {
		name string
		s    string
		v    *time.Duration
	}{{"window", c.Window, &g.Window}, {"hold", c.Hold, &g.Hold}} {
		if d.s == "" {
			continue
		}
		v, err := domain.ParseDuration(d.s)
		if err != nil || v <= 0 {
			return g, fmt.Errorf("server config preemption_guard.%s: %q is not a positive duration; use e.g. 30m or 1h", d.name, d.s)
		}
		*d.v = v
	}
	return g, nil
}

// retryStormConfig is the server config's retry_storm: section
// (docs/operator.md): once failures attempts of one project's jobs of one
// name failed within window, their retries are paused (held). failures:
// 0 turns the guard off.
type retryStormConfig struct {
	Failures *int   `yaml:"failures"` // default 10
	Window   string `yaml:"window"`   // default 10m
}

// storm checks the section and returns the guard it sets.
func (c retryStormConfig) storm() (control.RetryStorm, error) {
	g := control.DefaultRetryStorm
	if c.Failures != nil {
		if *c.Failures < 0 {
			return g, fmt.Errorf("server config retry_storm.failures: %d is negative; use a count such as 10, or 0 to turn the guard off", *c.Failures)
		}
		g.Failures = *c.Failures
	}
	if c.Window != "" {
		v, err := domain.ParseDuration(c.Window)
		if err != nil || v <= 0 {
			return g, fmt.Errorf("server config retry_storm.window: %q is not a positive duration; use e.g. 10m or 1h", c.Window)
		}
		g.Window = v
	}
	return g, nil
}
