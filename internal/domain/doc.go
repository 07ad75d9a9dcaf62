// Package domain holds Trainyard's core types: jobs, attempts, specs, resources,
// states with their transition tables, reason codes and sentinel errors.
//
// It imports the standard library only and never reads the clock, the
// environment or randomness: callers pass time in.
package domain
