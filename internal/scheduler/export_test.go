package scheduler

// SetMemo turns the class decision memo on or off, so that tests can check
// that it never changes a decision.
func SetMemo(on bool) { memoOff = !on }

// ScratchHolds names what sc still holds of the last pass's snapshot or
// decisions ("" when nothing).
func ScratchHolds(sc *Scratch) string {
	for _, pd := range sc.pending[:cap(sc.pending)] {
		if pd != nil {
			return "a pending job"
		}
	}
	for _, d := range sc.decs[:cap(sc.decs)] {
		if d != (decision{}) {
			return "a decision"
		}
	}
	return ""
}
