package service

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"trainyard/internal/cost"
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

// Sizing is a job's request against what its ended attempts used, as
// show and why tell it: set on JobDetail once an attempt of
// Config.RightSizeMinRun or more ended.
type Sizing struct {
	Held     time.Duration // the ended attempts' wall time
	CPUs     float64       // requested, over all nodes
	UsedCPUs float64       // CPU time used per second held
	GPUs     int           // requested, over all nodes
	UsedGPUs float64       // GPU time used per second held (utilisation-weighted)
	// IdleCost is what the CPUs held and not used cost at the pool's
	// rates (0 without rates).
	IdleCost           domain.Money
	Memory, PeakMemory domain.ByteSize // the limit, and the highest peak of an attempt
	// Oversized: the job used under a quarter of 2 or more CPUs (as the
	// review report names it); NearMemory: it peaked at ReviewNear of its
	// memory limit or more.
	Oversized, NearMemory bool
}

// sizing judges the ended attempts of job; nil when none ran minRun.
func sizing(job domain.Job, atts []domain.Attempt, rates domain.Rates, minRun time.Duration) *Sizing {
	var sz Sizing
	var cpu, gpu float64
	for _, a := range atts {
		if !a.State.Terminal() || a.StartedAt.IsZero() || !a.FinishedAt.After(a.StartedAt) {
			continue
		}
		sz.Held += a.FinishedAt.Sub(a.StartedAt)
		cpu += a.Usage.CPUSeconds
		gpu += a.Usage.GPUSeconds
		sz.PeakMemory = max(sz.PeakMemory, a.Usage.MaxRSS)
	}
	if sz.Held < minRun {
		return nil
	}
	res := job.Resources
	sz.CPUs = res.CPUs * float64(max(res.Nodes, 1))
	sz.UsedCPUs = cpu / sz.Held.Seconds()
	sz.GPUs, sz.UsedGPUs = res.GPUs*max(res.Nodes, 1), gpu/sz.Held.Seconds()
	sz.Memory = res.Memory
	sz.Oversized = sz.CPUs >= rightSizeMinCPUs && sz.UsedCPUs < sz.CPUs*ReviewUnder
	sz.NearMemory = res.Memory > 0 && float64(sz.PeakMemory) >= float64(res.Memory)*ReviewNear
	if idle := sz.CPUs - sz.UsedCPUs; idle > 0 {
		sz.IdleCost = cost.Of(domain.Resources{CPUs: idle, Nodes: 1}, rates, sz.Held)
	}
	return &sz
}

// sizingNotes are why's lines about a job's sizing: what it used of what
// it held, and what to ask for instead.
func sizingNotes(sz *Sizing, currency string) (notes []string) {
	if sz == nil {
		return nil
	}
	if sz.Oversized {
		note := fmt.Sprintf("its attempts used %.1f of the %g CPUs they held over %s", sz.UsedCPUs, sz.CPUs, sz.Held.Round(time.Second))
		if sz.IdleCost > 0 {
			note += fmt.Sprintf("; the idle CPUs cost %s %s", sz.IdleCost.Cents(), currency)
		}
		notes = append(notes, note+fmt.Sprintf(": ask for less next time (--set resources.cpus=%g)", max(1, math.Ceil(sz.UsedCPUs*1.5))))
	}
	if sz.NearMemory {
		notes = append(notes, fmt.Sprintf("its memory peaked at %s of its %s limit: close to being OOMKilled; raise resources.memory", sz.PeakMemory, sz.Memory))
	}
	return notes
}
