package artifacts

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"trainyard/internal/domain"
)

// LifecyclePolicy moves a job's checkpoints between storage tiers and
// removes them: the KeepLocal newest stay in the job's output tree, older
// ones move to the object store (copied and verified there, then removed
// locally), and every checkpoint is removed from every tier DeleteAfter
// it was registered complete. It applies to the jobs of Project and Pool
// (empty: any), running or finished; the most specific matching policy
// wins, as for retention (project and pool, then project, then pool,
// then neither).
type LifecyclePolicy struct {
	Project string `yaml:"project" json:"project,omitempty"`
	Pool    string `yaml:"pool" json:"pool,omitempty"`
	// KeepLocal is how many of a job's newest checkpoints stay on local
	// disk (0: none); unset: none is moved.
	KeepLocal *int `yaml:"keep_local" json:"keep_local,omitempty"`
	// DeleteAfter removes a checkpoint from every tier this long after it
	// was registered; 0: never.
	DeleteAfter domain.Duration `yaml:"delete_after" json:"delete_after,omitempty"`
}

// Kinds of lifecycle and gc steps (Deletion.Kind).
const (
	KindCheckpoint = "checkpoint" // removed from every tier
	KindOutput     = "output"
	KindMove       = "move" // a checkpoint moved to the object store
)

// ValidateLifecycle checks a list of lifecycle policies, naming the field
// of the first error. objectStore says whether the server has one: moving
// checkpoints needs it.
func ValidateLifecycle(ps []LifecyclePolicy, objectStore bool) error {
	for i, p := range ps {
		where := fmt.Sprintf("checkpoint_lifecycle[%d]", i)
		if p.KeepLocal == nil && p.DeleteAfter == 0 {
			return fmt.Errorf("%s: set keep_local (how many newest checkpoints stay on local disk), delete_after (e.g. 30d), or both", where)
		}
		if p.KeepLocal != nil && *p.KeepLocal < 0 {
			return fmt.Errorf("%s.keep_local: %d is negative; use 0 to move every checkpoint to the object store", where, *p.KeepLocal)
		}
		if p.KeepLocal != nil && !objectStore {
			return fmt.Errorf("%s.keep_local: moving checkpoints needs an object store; set object_store in the server config, or drop keep_local", where)
		}
		if p.DeleteAfter < 0 {
			return fmt.Errorf("%s.delete_after: must be 0 (never) or a duration such as 30d", where)
		}
		for k := range i {
			if ps[k].Project == p.Project && ps[k].Pool == p.Pool {
				return fmt.Errorf("%s: repeats the selector of checkpoint_lifecycle[%d] (project %q, pool %q); merge them", where, k, p.Project, p.Pool)
			}
		}
	}
	return nil
}

// LifecycleJob is what a lifecycle plan needs of one job.
type LifecycleJob struct {
	ID          int64
	Project     string
	Pool        string
	Checkpoints []domain.CheckpointRecord // kept ones
	// InUse names a checkpoint a running attempt was handed to resume
	// from: it is not moved while that attempt may be reading it.
	InUse string
}

// PlanLifecycle decides what lifecycle policies do at now: checkpoints
// removed from every tier (KindCheckpoint) and checkpoints moved to the
// object store (KindMove), by job then kind then name. It is pure, so a
// dry run and the real run that follows compute the same list.
func PlanLifecycle(jobs []LifecycleJob, policies []LifecyclePolicy, now time.Time) []Deletion {
	var out []Deletion
	for _, j := range jobs {
		p, ok := lifecycleFor(policies, j.Project, j.Pool)
		if !ok {
			continue
		}
		var live []domain.CheckpointRecord
		for _, c := range j.Checkpoints {
			if d := p.DeleteAfter.D(); d > 0 && now.Sub(c.At) > d {
				out = append(out, Deletion{JobID: j.ID, Kind: KindCheckpoint, Path: c.Name, Bytes: c.Size,
					Reason: fmt.Sprintf("checkpoints are deleted from every tier %s after they complete (%s)", domain.FormatDuration(d), p.selector())})
				continue
			}
			live = append(live, c)
		}
		if p.KeepLocal == nil {
			continue
		}
		// Newest first: the first KeepLocal local ones stay.
		slices.SortFunc(live, func(a, b domain.CheckpointRecord) int {
			return cmp.Or(b.At.Compare(a.At), strings.Compare(b.Name, a.Name))
		})
		kept := 0
		for _, c := range live {
			if !c.OnLocal() {
				continue
			}
			if kept < *p.KeepLocal || c.Name == j.InUse {
				kept++
				continue
			}
			out = append(out, Deletion{JobID: j.ID, Kind: KindMove, Path: c.Name, Bytes: c.Size,
				Reason: fmt.Sprintf("the %d newest checkpoints stay on local disk, older ones move to the object store (%s)", *p.KeepLocal, p.selector())})
		}
	}
	slices.SortStableFunc(out, func(a, b Deletion) int {
		return cmp.Or(cmp.Compare(a.JobID, b.JobID), strings.Compare(a.Kind, b.Kind), strings.Compare(a.Path, b.Path))
	})
	return out
}

func (p LifecyclePolicy) selector() string {
	return Policy{Project: p.Project, Pool: p.Pool}.selector()
}

// lifecycleFor picks the most specific policy matching project and pool.
func lifecycleFor(ps []LifecyclePolicy, project, pool string) (LifecyclePolicy, bool) {
	rs := make([]Policy, len(ps))
	for i, p := range ps {
		rs[i] = Policy{Project: p.Project, Pool: p.Pool}
	}
	best, ok := policyFor(rs, project, pool)
	if !ok {
		return LifecyclePolicy{}, false
	}
	for _, p := range ps {
		if p.Project == best.Project && p.Pool == best.Pool {
			return p, true
		}
	}
	return LifecyclePolicy{}, false
}

// DeleteAfters lists the distinct positive DeleteAfter durations of ps:
// the periodic pass asks, for each, which checkpoints just came of age.
func DeleteAfters(ps []LifecyclePolicy) []time.Duration {
	var out []time.Duration
	for _, p := range ps {
		if d := p.DeleteAfter.D(); d > 0 && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}
