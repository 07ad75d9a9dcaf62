package service

import (
	"strconv"
	"strings"

	"trainyard/internal/domain"
)

// checkSkipMark starts the note the control loop appends to an attempt's
// start transition when the executor skipped the environment's check
// because it passed recently ("attempt 2 started (pid 7); environment
// check py3@1 passed on node n1 at …; not run again until …").
const checkSkipMark = "; environment check "

// checkSkipNote returns, for why, the note of attempt's start transition
// that its environment check was not run because it passed recently; ""
// when the check ran, or there is none.
func checkSkipNote(events []domain.Event, attempt int) string {
	start := "attempt " + strconv.Itoa(attempt) + " started "
	for i := len(events) - 1; i >= 0; i-- {
		e := events[i]
		if e.To != domain.JobRunning || !strings.HasPrefix(e.Message, start) {
			continue
		}
		if _, note, ok := strings.Cut(e.Message, checkSkipMark); ok {
			return "attempt " + strconv.Itoa(attempt) + " skipped its environment check: " + strings.TrimPrefix(checkSkipMark, "; ") + note
		}
		return ""
	}
	return ""
}
