package scheduler

// SetMemo turns the class decision memo on or off, so that tests can check
// that it never changes a decision.
func SetMemo(on bool) { memoOff = !on }
