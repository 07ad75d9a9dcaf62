package artifacts

import (
	"regexp"
	"testing"
)

// hfCheckpoint accepts exactly ^checkpoint-[0-9]+$.
func TestHFCheckpointName(t *testing.T) {
	re := regexp.MustCompile(`^checkpoint-[0-9]+$`)
	for _, s := range []string{"", "checkpoint-", "checkpoint-1", "checkpoint-0042", "checkpoint-12a", "checkpoint-1/", "Checkpoint-1",
		"checkpoint_1", "xcheckpoint-1", "checkpoint-1\n", "checkpoint--1", "checkpoint-١", "checkpoint-99999999999999999999"} {
		if got, want := hfCheckpoint(s), re.MatchString(s); got != want {
			t.Errorf("hfCheckpoint(%q) = %v, want %v", s, got, want)
		}
	}
}
