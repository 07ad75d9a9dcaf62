package artifacts

import (
	"cmp"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"trainyard/internal/domain"
)

// Policy is one retention rule for finished jobs' files. A policy applies
// to the jobs of Project and Pool (empty: any); the most specific matching
// policy wins (project and pool, then project, then pool, then neither).
// A zero duration keeps those files forever. Outputs not matching
// ReportPaths (models and everything else) are never deleted by gc.
type Policy struct {
	Project string `yaml:"project" json:"project,omitempty"`
	Pool    string `yaml:"pool" json:"pool,omitempty"`
	// Checkpoints: how long a finished job's checkpoints are kept after it
	// finished.
	Checkpoints domain.Duration `yaml:"checkpoints" json:"checkpoints,omitempty"`
	// Reports: how long output files matching ReportPaths (default
	// DefaultReportPaths) are kept after the job finished.
	Reports     domain.Duration `yaml:"reports" json:"reports,omitempty"`
	ReportPaths []string        `yaml:"report_paths" json:"report_paths,omitempty"`
}

// DefaultReportPaths match evaluation reports in a job's outputs.
var DefaultReportPaths = []string{"eval/**", "reports/**"}

// Validate checks a list of policies, naming the field of the first error.
func ValidatePolicies(ps []Policy) error {
	for i, p := range ps {
		where := fmt.Sprintf("retention[%d]", i)
		if p.Checkpoints < 0 || p.Reports < 0 {
			return fmt.Errorf("%s: durations must be 0 (keep forever) or more", where)
		}
		for j, g := range p.ReportPaths {
			if _, err := path.Match(strings.ReplaceAll(g, "**", "*"), ""); err != nil || g == "" || strings.HasPrefix(g, "/") {
				return fmt.Errorf("%s.report_paths[%d]: %q is not a relative path pattern such as eval/** or *.csv", where, j, g)
			}
		}
		for k := range i {
			if ps[k].Project == p.Project && ps[k].Pool == p.Pool {
				return fmt.Errorf("%s: repeats the selector of retention[%d] (project %q, pool %q); merge them", where, k, p.Project, p.Pool)
			}
		}
	}
	return nil
}

// FinishedJob is what gc needs of one finished job.
type FinishedJob struct {
	ID          int64
	Project     string
	Pool        string
	FinishedAt  time.Time
	Checkpoints []domain.CheckpointRecord // kept ones
	Outputs     []domain.ArtifactFile     // its latest manifest
}

// Deletion is one thing gc removes.
type Deletion struct {
	JobID  int64  `json:"job"`
	Kind   string `json:"kind"` // KindCheckpoint, KindOutput or KindMove
	Path   string `json:"path"` // the checkpoint's name, or the output's path
	Bytes  int64  `json:"bytes"`
	Reason string `json:"reason"`
}

// Plan decides what gc removes at now: the checkpoints and report files of
// finished jobs older than their policy allows, by job then path. It is
// pure, so a dry run and the real run that follows compute the same list
// for the same input.
func Plan(jobs []FinishedJob, policies []Policy, now time.Time) []Deletion {
	var out []Deletion
	for _, j := range jobs {
		p, ok := policyFor(policies, j.Project, j.Pool)
		if !ok || j.FinishedAt.IsZero() {
			continue
		}
		age := now.Sub(j.FinishedAt)
		if d := p.Checkpoints.D(); d > 0 && age > d {
			for _, c := range j.Checkpoints {
				out = append(out, Deletion{JobID: j.ID, Kind: "checkpoint", Path: c.Name, Bytes: c.Size,
					Reason: fmt.Sprintf("checkpoints of finished jobs are kept %s (%s)", domain.FormatDuration(d), p.selector())})
			}
		}
		if d := p.Reports.D(); d > 0 && age > d {
			globs := p.ReportPaths
			if len(globs) == 0 {
				globs = DefaultReportPaths
			}
			for _, f := range j.Outputs {
				if matchAny(globs, f.Path) {
					out = append(out, Deletion{JobID: j.ID, Kind: "output", Path: f.Path, Bytes: f.Size,
						Reason: fmt.Sprintf("reports are kept %s (%s)", domain.FormatDuration(d), p.selector())})
				}
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Deletion) int {
		return cmp.Or(cmp.Compare(a.JobID, b.JobID), strings.Compare(a.Kind, b.Kind), strings.Compare(a.Path, b.Path))
	})
	return out
}

func (p Policy) selector() string {
	switch {
	case p.Project != "" && p.Pool != "":
		return "policy for project " + p.Project + " in pool " + p.Pool
	case p.Project != "":
		return "policy for project " + p.Project
	case p.Pool != "":
		return "policy for pool " + p.Pool
	}
	return "default policy"
}

// policyFor picks the most specific policy matching project and pool.
func policyFor(ps []Policy, project, pool string) (Policy, bool) {
	best, rank := Policy{}, -1
	for _, p := range ps {
		if (p.Project != "" && p.Project != project) || (p.Pool != "" && p.Pool != pool) {
			continue
		}
		r := 0
		if p.Project != "" {
			r += 2
		}
		if p.Pool != "" {
			r++
		}
		if r > rank {
			best, rank = p, r
		}
	}
	return best, rank >= 0
}

// matchAny reports whether rel matches one of the patterns: path.Match
// syntax, where a trailing "/**" also matches everything below.
func matchAny(globs []string, rel string) bool {
	for _, g := range globs {
		if dir, ok := strings.CutSuffix(g, "/**"); ok {
			if rel == dir || strings.HasPrefix(rel, dir+"/") {
				return true
			}
			continue
		}
		if ok, _ := path.Match(g, rel); ok {
			return true
		}
		if !strings.Contains(g, "/") {
			if ok, _ := path.Match(g, path.Base(rel)); ok {
				return true
			}
		}
	}
	return false
}
