package control

import (
	"cmp"
	"context"
	"slices"

	"trainyard/internal/domain"
)

// activeAttempts are the active (starting or running) attempts, kept
// between cycles: read in full when the view is (a full read or a
// check); else the view's read of the jobs written since the last brings
// their active attempts with them (Store.ChangedJobsWith), as every
// write to an attempt writes its job, and those replace what was kept
// of these jobs. Loop goroutine only.
type activeAttempts struct {
	loaded bool
	full   bool             // the view was read in full: read every attempt
	ids    []int64          // the jobs the view read since the attempts were merged
	fresh  []domain.Attempt // their active attempts, read with them
	list   []domain.Attempt
	spare  []domain.Attempt // the list before list, reused by a merge
}

// noteRead records the jobs the view read (by id ascending) and their
// active attempts, read with them, for refreshAttempts to merge.
func (a *activeAttempts) noteRead(jobs []domain.Job, fresh []domain.Attempt) {
	if len(a.ids) > 0 {
		a.full = true // two reads unmerged: not expected, read everything
	}
	a.ids, a.fresh = a.ids[:0], fresh
	for _, j := range jobs {
		a.ids = append(a.ids, j.ID)
	}
}

// refreshAttempts brings the active attempts up to date with the view
// and returns them, by (job id, number). The list is the loop's until the
// next cycle: callers read it and keep no reference.
func (c *Controller) refreshAttempts(ctx context.Context) ([]domain.Attempt, error) {
	a := &c.attempts
	if !a.loaded || a.full {
		list, err := c.cfg.Store.ActiveAttempts(ctx)
		if err != nil {
			a.loaded = false
			return nil, err
		}
		a.list, a.spare, a.loaded, a.full, a.ids, a.fresh = list, nil, true, false, a.ids[:0], nil
		return a.list, nil
	}
	if len(a.ids) > 0 {
		ids := slices.Compact(slices.Sorted(slices.Values(a.ids)))
		a.list, a.spare = mergeAttempts(a.spare[:0], a.list, ids, a.fresh), a.list
		a.ids, a.fresh = a.ids[:0], nil
	}
	return a.list, nil
}

// mergeAttempts appends to dst the attempts of old whose job is not in
// ids (ascending) and those of fresh (the jobs of ids' active attempts,
// by job id and number), by (job id, number).
func mergeAttempts(dst, old []domain.Attempt, ids []int64, fresh []domain.Attempt) []domain.Attempt {
	less := func(x, y *domain.Attempt) bool {
		return cmp.Or(cmp.Compare(x.JobID, y.JobID), cmp.Compare(x.Number, y.Number)) < 0
	}
	i, k, f := 0, 0, 0
	for i < len(old) {
		o := &old[i]
		for k < len(ids) && ids[k] < o.JobID {
			k++
		}
		if k < len(ids) && ids[k] == o.JobID {
			i++ // read again: fresh has it, if it is still active
			continue
		}
		for f < len(fresh) && less(&fresh[f], o) {
			dst = append(dst, fresh[f])
			f++
		}
		dst = append(dst, *o)
		i++
	}
	return append(dst, fresh[f:]...)
}
