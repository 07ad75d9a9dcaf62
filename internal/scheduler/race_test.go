//go:build race

package scheduler_test

// raceEnabled: the race detector slows the randomised tests tenfold;
// they run fewer seeds under it.
const raceEnabled = true
