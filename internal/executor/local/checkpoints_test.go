package local

import (
	"testing"
	"time"
)

// A slow scan (a checkpoint directory a job filled with entries) spaces
// the next ones out, so the supervisor's CPU stays bounded.
func TestCheckpointScanBacksOff(t *testing.T) {
	for _, tc := range []struct{ took, want time.Duration }{
		{time.Millisecond, checkpointScan},
		{checkpointScan / 20, checkpointScan},
		{time.Second, 20 * time.Second},
	} {
		if got := nextScan(tc.took); got != tc.want {
			t.Errorf("nextScan(%s) = %s, want %s", tc.took, got, tc.want)
		}
	}
}
