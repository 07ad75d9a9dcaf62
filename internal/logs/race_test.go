//go:build race

package logs

// raceEnabled: the race detector drops sync.Pool items at random, so the
// regexp package allocates its machines anew.
const raceEnabled = true
