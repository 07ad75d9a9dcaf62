package service

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// Right-sizing: a request far above what the same user's recent runs of
// the same job name used holds capacity nobody uses (and is paid for).
const (
	// rightSizeFraction: a request is far above use when every recent run
	// used at most this fraction of it.
	rightSizeFraction = 0.25
	// DefaultRightSizeMinRun: runs shorter than this say little about use
	// (Config.RightSizeMinRun).
	DefaultRightSizeMinRun = time.Minute
	// rightSizeMinCPUs and rightSizeMinMemory: smaller requests are not
	// worth a warning.
	rightSizeMinCPUs   = 2
	rightSizeMinMemory = 4 << 30
)

// rightSizing returns a warning when spec asks for far more CPUs or
// memory than the submitter's recent succeeded runs of the same name
// used, with the request to ask for instead; "" when it does not, or
// there is nothing to compare with.
func (s *JobService) rightSizing(ctx context.Context, p Principal, spec domain.Spec) string {
	if spec.Resources.CPUs < rightSizeMinCPUs && spec.Resources.Memory < rightSizeMinMemory {
		return ""
	}
	runs, err := s.st.RecentUsage(ctx, p.Subject, spec.Name)
	if err != nil {
		s.cfg.Logger.Warn("read recent usage for a right-sizing check", "err", err)
		return ""
	}
	return rightSize(spec.Name, spec.Resources, runs, s.cfg.RightSizeMinRun)
}

// rightSize is rightSizing's decision over the runs.
func rightSize(name string, req domain.Resources, usage []store.RunUsage, minRun time.Duration) string {
	var usedCPUs float64
	var peak domain.ByteSize
	n := 0
	for _, u := range usage {
		if u.Ran < minRun {
			continue
		}
		n++
		usedCPUs = max(usedCPUs, u.CPUSeconds/u.Ran.Seconds())
		peak = max(peak, u.MaxRSS)
	}
	if n == 0 {
		return ""
	}
	var asks, sets []string
	if req.CPUs >= rightSizeMinCPUs && usedCPUs <= req.CPUs*rightSizeFraction {
		suggest := max(1, math.Ceil(usedCPUs*1.5))
		asks = append(asks, fmt.Sprintf("used at most %.1f of %g CPUs", usedCPUs, req.CPUs))
		sets = append(sets, fmt.Sprintf("--set resources.cpus=%g", suggest))
	}
	if req.Memory >= rightSizeMinMemory && peak > 0 && float64(peak) <= float64(req.Memory)*rightSizeFraction {
		suggest := domain.ByteSize(math.Ceil(float64(peak)*1.5/(1<<30))) << 30
		asks = append(asks, fmt.Sprintf("peaked at %s of %s memory", peak, req.Memory))
		sets = append(sets, "--set resources.memory="+suggest.String())
	}
	if len(asks) == 0 {
		return ""
	}
	runs := "run"
	if n > 1 {
		runs = fmt.Sprintf("%d runs", n)
	}
	return fmt.Sprintf("your last %s of %q %s; ask for less with %s",
		runs, name, strings.Join(asks, " and "), strings.Join(sets, " "))
}
