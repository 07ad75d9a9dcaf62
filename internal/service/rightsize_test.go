package service

import (
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// A request is named too large only when every recent run of a minute
// or more used under a quarter of it, and the fix names the request to
// make instead.
func TestRightSize(t *testing.T) {
	req := domain.Resources{CPUs: 4, Memory: 64 << 30, Nodes: 1}
	run := func(ran time.Duration, cpu float64, rss domain.ByteSize) store.RunUsage {
		return store.RunUsage{Request: req, Ran: ran, CPUSeconds: cpu, MaxRSS: rss}
	}
	tests := map[string]struct {
		runs []store.RunUsage
		want []string // "": no warning
	}{
		"no runs":          {nil, nil},
		"only short runs":  {[]store.RunUsage{run(10*time.Second, 0.1, 1<<20)}, nil},
		"uses what it has": {[]store.RunUsage{run(time.Hour, 3.5*3600, 40<<30)}, nil},
		"4 CPUs, uses 0.6": {[]store.RunUsage{run(time.Hour, 0.6*3600, 40<<30), run(10*time.Minute, 0.2*600, 30<<30)},
			[]string{`your last 2 runs of "train" used at most 0.6 of 4 CPUs`, "--set resources.cpus=1"}},
		"memory far below": {[]store.RunUsage{run(time.Hour, 3*3600, 5<<30)},
			[]string{`your last run of "train" peaked at 5GiB of 64GiB memory`, "--set resources.memory=8GiB"}},
		"both":             {[]store.RunUsage{run(time.Hour, 0.9*3600, 2<<30)}, []string{"0.9 of 4 CPUs and peaked at 2GiB", "cpus=2 --set resources.memory=3GiB"}},
		"one run used all": {[]store.RunUsage{run(time.Hour, 0.5*3600, 2<<30), run(time.Hour, 3.9*3600, 60<<30)}, nil},
	}
	for name, tt := range tests {
		got := rightSize("train", req, tt.runs, DefaultRightSizeMinRun)
		if len(tt.want) == 0 {
			if got != "" {
				t.Errorf("%s: warned %q", name, got)
			}
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q lacks %q", name, got, w)
			}
		}
	}
	small := domain.Resources{CPUs: 1, Memory: 1 << 30}
	if got := rightSize("train", small, []store.RunUsage{{Request: small, Ran: time.Hour}}, DefaultRightSizeMinRun); got != "" {
		t.Errorf("a small request warned %q", got)
	}
}
