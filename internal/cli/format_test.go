package cli

import (
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
)

func TestAge(t *testing.T) {
	tests := map[time.Duration]string{
		0:                              "0s",
		-5 * time.Second:               "0s", // clock skew
		12 * time.Second:               "12s",
		59 * time.Second:               "59s",
		time.Minute:                    "1m",
		5*time.Minute + 59*time.Second: "5m",
		3*time.Hour + 10*time.Minute:   "3h",
		23 * time.Hour:                 "23h",
		50 * time.Hour:                 "2d",
		400 * 24 * time.Hour:           "400d",
	}
	for d, want := range tests {
		if got := age(testNow, testNow.Add(-d)); got != want {
			t.Errorf("age(%v) = %q, want %q", d, got, want)
		}
	}
	if got := age(testNow, time.Time{}); got != "-" {
		t.Errorf("age(zero) = %q, want -", got)
	}
}

func TestDuration(t *testing.T) {
	tests := map[time.Duration]string{
		45*time.Second + 300*time.Millisecond: "45s",
		12*time.Minute + 3*time.Second:        "12m3s",
		time.Hour + 20*time.Minute:            "1h20m",
		51 * time.Hour:                        "2d3h",
		-time.Second:                          "0s",
		0:                                     "0s",
		800 * time.Millisecond:                "0.8s",
		999 * time.Millisecond:                "1s",
		time.Second:                           "1s",
		1500 * time.Millisecond:               "1.5s",
		59*time.Second + 600*time.Millisecond: "1m0s",
	}
	for d, want := range tests {
		if got := duration(d); got != want {
			t.Errorf("duration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestMemText(t *testing.T) {
	for in, want := range map[string]string{
		"24683656KiB": "23.5GiB", "32GiB": "32GiB", "1536MiB": "1.5GiB", "512": "512B", "0": "0B", "lots": "lots",
	} {
		if got := memText(in); got != want {
			t.Errorf("memText(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0B", 1023: "1023B", 1024: "1.0KiB", 3 << 29: "1.5GiB", 64 << 20: "64.0MiB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestJobDuration(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	started := now.Add(-90 * time.Second)
	finished := now.Add(-30 * time.Second)
	cases := map[string]struct {
		job  apitypes.Job
		want string
	}{
		"running":                {apitypes.Job{State: "running", StartedAt: &started}, "1m30s"},
		"finished":               {apitypes.Job{State: "succeeded", StartedAt: &started, FinishedAt: &finished}, "1m0s"},
		"queued after a preempt": {apitypes.Job{State: "queued", StartedAt: &started}, "-"},
		"never started":          {apitypes.Job{State: "queued"}, "-"},
	}
	for name, tc := range cases {
		if got := jobDuration(now, tc.job); got != tc.want {
			t.Errorf("%s: jobDuration = %q, want %q", name, got, tc.want)
		}
	}
}
