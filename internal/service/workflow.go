package service

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/jobspec"
	"trainyard/internal/store"
)

// Workflows: a spec's after: (the job waits, held with reason Dependency,
// until the control loop finds its dependencies met), inputs that read an
// earlier job's outputs (from_job), and sweeps (SubmitSweep), whose
// members are ordinary jobs held for the sweep's max_parallel.

// checkWorkflow checks the workflow fields of a spec to submit: every job
// and sweep after: names exists and is visible to p, and every from_job
// input names a visible job, whose outputs it then reads (its path made
// absolute; a from_job job missing from after: is added to it, on
// succeeded). The platform's sweep labels may not be set by hand.
func (s *JobService) checkWorkflow(ctx context.Context, p Principal, spec *domain.Spec, rerun bool) error {
	var errs domain.FieldErrors
	for _, k := range []string{domain.SweepLabel, domain.ArrayIndexLabel} {
		if _, ok := spec.Labels[k]; ok {
			if rerun { // a re-run of a member is a job of its own
				delete(spec.Labels, k)
				continue
			}
			errs.Add("labels."+k, "is set by the platform on the members of a sweep; remove it")
		}
	}
	for i, d := range spec.After {
		field := fmt.Sprintf("after[%d]", i)
		if d.Sweep != 0 {
			if _, err := s.visibleSweep(ctx, p, d.Sweep); err != nil {
				errs.Add(field+".sweep", "%v", err)
			}
			continue
		}
		if _, err := s.visibleJob(ctx, p, d.Job); err != nil {
			errs.Add(field+".job", "%v", err)
		}
	}
	for i, in := range spec.Inputs {
		if in.FromJob == 0 {
			continue
		}
		field := fmt.Sprintf("inputs[%d]", i)
		parent, err := s.visibleJob(ctx, p, in.FromJob)
		if err != nil {
			errs.Add(field+".from_job", "%v", err)
			continue
		}
		if parent.OutputDir == "" {
			errs.Add(field+".from_job", "job %d has no output directory to read from; name a job that writes outputs, or leave from_job out", in.FromJob)
			continue
		}
		full := filepath.Join(parent.OutputDir, in.Path)
		if filepath.IsAbs(in.Path) { // a snapshot's, already resolved (a re-run)
			full = filepath.Clean(in.Path)
		}
		if full != parent.OutputDir && !strings.HasPrefix(full, parent.OutputDir+string(filepath.Separator)) {
			errs.Add(field+".path", "%q leads out of job %d's outputs; give a path inside them, e.g. model/", in.Path, in.FromJob)
			continue
		}
		spec.Inputs[i].Path = full
		if spec.Inputs[i].Name == "" {
			spec.Inputs[i].Name = "job-" + strconv.FormatInt(in.FromJob, 10)
		}
		spec.Inputs[i].Version = "job-" + strconv.FormatInt(in.FromJob, 10)
		if !slices.ContainsFunc(spec.After, func(d domain.Dependency) bool { return d.Job == in.FromJob }) {
			spec.After = append(spec.After, domain.Dependency{Job: in.FromJob, On: domain.DependSucceeded})
		}
	}
	return errs.Err()
}

// visibleJob returns job id if p may read it; otherwise an error that
// says so without telling whether it exists.
func (s *JobService) visibleJob(ctx context.Context, p Principal, id int64) (domain.Job, error) {
	job, err := s.st.GetJob(ctx, id)
	if err == nil {
		err = s.authorize(ctx, p, authz.JobRead, jobResource(job))
	}
	if err != nil {
		if errors.Is(err, domain.ErrNotFound) || errors.Is(err, domain.ErrForbidden) {
			return domain.Job{}, fmt.Errorf("job %d does not exist or is not yours to read; see your jobs with: trainyard ls", id)
		}
		return domain.Job{}, err
	}
	return job, nil
}

// visibleSweep returns sweep id if p may read it, like visibleJob.
func (s *JobService) visibleSweep(ctx context.Context, p Principal, id int64) (domain.Sweep, error) {
	sw, err := s.st.GetSweep(ctx, id)
	if err == nil {
		err = s.authorize(ctx, p, authz.JobRead, sweepResource(sw))
	}
	if err != nil {
		if errors.Is(err, domain.ErrNotFound) || errors.Is(err, domain.ErrForbidden) {
			return domain.Sweep{}, domain.Errorf(domain.ErrNotFound, "sweep %d does not exist or is not yours to read; see your sweeps with: trainyard sweep ls", id)
		}
		return domain.Sweep{}, err
	}
	return sw, nil
}

func sweepResource(sw domain.Sweep) authz.Resource {
	return authz.Resource{Kind: "job", ID: "sweep/" + strconv.FormatInt(sw.ID, 10), Project: sw.Project, Owner: sw.Submitter}
}

// waitHold is how a job with dependencies is created: held until the
// control loop finds them met (it looks at every new waiting job).
func waitHold(after []domain.Dependency) *store.Hold {
	if len(after) == 0 {
		return nil
	}
	return &store.Hold{Reason: domain.ReasonDependency, Message: domain.WaitMessage(after, nil)}
}

// SweepInput is a sweep submit: a spec with a sweep: section, or any spec
// with Array set.
type SweepInput struct {
	Doc []byte
	Set []string
	// Array, when set, makes a job array of the spec: "0-31", "1,3,5-9",
	// with an optional "%N" max_parallel.
	Array string
	Code  *domain.CodeRef
	// IdempotencyKey, when set, makes a repeated submit with it return
	// the first sweep (Created false) instead of storing another.
	IdempotencyKey string
}

// SweepResult is a stored sweep and its members' ids, in index order.
type SweepResult struct {
	Sweep domain.Sweep
	Jobs  []int64
	// Created is false when the IdempotencyKey matched an earlier sweep.
	Created bool
}

// SubmitSweep stores a sweep and its members in one transaction. Each
// member is the spec with its own params (the sweep's, over the spec's
// own), TRAINYARD_ARRAY_INDEX and the sweep's labels; it is admitted,
// queued and accounted as any job. Members beyond max_parallel are held
// (reason SweepLimit) and released by the control loop as others end.
func (s *JobService) SubmitSweep(ctx context.Context, p Principal, in SweepInput) (SweepResult, error) {
	spec, err := s.prepare(ctx, p, SubmitInput{Doc: in.Doc, Set: in.Set, Code: in.Code, IdempotencyKey: in.IdempotencyKey, sweep: true})
	if err != nil {
		return SweepResult{}, err
	}
	if in.Array != "" {
		if spec.Sweep != nil {
			return SweepResult{}, domain.FieldErrors{{Path: "array", Message: "the spec has a sweep: section already; give either sweep: or --array"}}
		}
		idx, maxPar, err := jobspec.ParseArray(in.Array)
		if err != nil {
			return SweepResult{}, domain.FieldErrors{{Path: "array", Message: err.Error()}}
		}
		spec.Sweep = &domain.SweepSpec{Method: domain.SweepArray, Indices: idx, MaxParallel: maxPar}
	}
	if spec.Sweep == nil {
		return SweepResult{}, domain.FieldErrors{{Path: "sweep", Message: "is missing; add a sweep: section (e.g. sweep: {params: {lr: [0.1, 0.01]}}) or submit a job array with --array 0-9"}}
	}
	sw := *spec.Sweep
	if spec.Notify != nil {
		return SweepResult{}, domain.FieldErrors{{Path: "notify", Message: "would send one message per member of the sweep; to hear when it ends, submit a job with after: [{sweep: ID, on: ended}] and notify:, once the sweep has its id"}}
	}
	var errs domain.FieldErrors
	jobspec.CheckSweep(&errs, &sw)
	if err := errs.Err(); err != nil {
		return SweepResult{}, err
	}
	base := spec
	base.Sweep = nil
	members := jobspec.Members(sw)
	if len(members) > 0 {
		// Every member has the same parameter names: one check covers them.
		first := memberSpec(base, members[0], 0)
		if fe := jobspec.Validate(first); len(fe) > 0 {
			return SweepResult{}, fe
		}
	}
	now := s.cfg.Clock.Now()
	rec := s.audited(ctx, p, authz.JobSubmit, "sweep/"+store.AuditIDPlaceholder, nil,
		map[string]any{"name": spec.Name, "project": spec.Project, "pool": spec.Pool, "method": sw.Method, "members": len(members), "max_parallel": sw.MaxParallel})
	outputs, project, name := base.Outputs.Path, base.Project, base.Name
	row := domain.Sweep{
		Name: spec.Name, Project: spec.Project, Submitter: p.Subject, CreatedAt: now,
		Method: sw.Method, MaxParallel: sw.MaxParallel, Objective: sw.Objective, Spec: sw,
		IdempotencyKey: in.IdempotencyKey,
	}
	newMembers := func(id int64) ([]store.NewJob, error) {
		out := make([]store.NewJob, len(members))
		for i, m := range members {
			ms := memberSpec(base, m, id)
			js, hash := jobspec.Canonical(ms)
			var held *store.Hold
			switch {
			case len(ms.After) > 0:
				held = waitHold(ms.After)
			case sw.MaxParallel > 0 && i >= sw.MaxParallel:
				held = &store.Hold{Reason: domain.ReasonSweepLimit, Message: sweepLimitMessage(id, sw.MaxParallel)}
			}
			out[i] = store.NewJob{Spec: ms, SpecJSON: js, SpecHash: hash, Submitter: p.Subject, SubmittedAt: now,
				OutputDir: func(jid int64) string { return s.jobDir(outputs, project, name, jid) },
				Actor:     p.Actor(), Code: in.Code, Held: held, Waits: ms.After}
		}
		return out, nil
	}
	stored, jobs, created, err := s.st.CreateSweep(ctx, row, newMembers, rec)
	if errors.Is(err, domain.ErrConflict) && in.IdempotencyKey != "" {
		// Another replica stored the same key at the same moment: a second
		// try finds its sweep and returns it.
		stored, jobs, created, err = s.st.CreateSweep(ctx, row, newMembers, rec)
	}
	if err != nil {
		return SweepResult{}, fmt.Errorf("store sweep: %w", err)
	}
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	if created {
		s.cfg.Wake()
	}
	return SweepResult{Sweep: stored, Jobs: ids, Created: created}, nil
}

func sweepLimitMessage(id int64, maxPar int) string {
	return fmt.Sprintf("waits for a place among the %d members of sweep %d that may be queued or run at once (max_parallel)", maxPar, id)
}

// memberSpec is the spec of member m of sweep id.
func memberSpec(base domain.Spec, m jobspec.Member, id int64) domain.Spec {
	ms := base
	ms.Params = maps.Clone(base.Params)
	if ms.Params == nil && len(m.Params) > 0 {
		ms.Params = make(map[string]string, len(m.Params))
	}
	maps.Copy(ms.Params, m.Params)
	ms.Labels = maps.Clone(base.Labels)
	if ms.Labels == nil {
		ms.Labels = make(map[string]string, 2)
	}
	ms.Labels[domain.SweepLabel] = strconv.FormatInt(id, 10)
	ms.Labels[domain.ArrayIndexLabel] = strconv.Itoa(m.Index)
	return ms
}

// SweepView is a sweep as shown: its members counted by state, and its
// best member by its objective.
type SweepView struct {
	domain.Sweep
	Counts map[domain.JobState]int
	State  domain.JobState // as its dependents see it (domain.SweepState)
	// Best is the member with the best value of the objective's metric
	// (each member's best reported value); nil without an objective or
	// before any member reported it.
	Best *SweepBest
}

// SweepBest is a sweep's best member.
type SweepBest struct {
	JobID  int64
	Index  int
	Params map[string]string
	Metric string
	Value  float64
	Step   int64
}

// maxBestScan bounds the members GetSweep reads metrics of.
const maxBestScan = 1000

// GetSweep returns the sweep with its members counted and its best
// member, when p may read it.
func (s *JobService) GetSweep(ctx context.Context, p Principal, id int64) (SweepView, error) {
	sw, err := s.visibleSweep(ctx, p, id)
	if err != nil {
		return SweepView{}, err
	}
	counts, err := s.st.SweepCounts(ctx, id)
	if err != nil {
		return SweepView{}, err
	}
	v := SweepView{Sweep: sw, Counts: counts, State: domain.SweepState(counts)}
	if sw.Objective == nil {
		return v, nil
	}
	members, err := s.st.ListJobs(ctx, store.JobFilter{Sweep: id, Limit: maxBestScan})
	if err != nil {
		return SweepView{}, err
	}
	obj := *sw.Objective
	for _, m := range members {
		if m.StartedAt.IsZero() {
			continue // never ran: nothing reported
		}
		// Downsampling keeps each series's lowest and highest point.
		series, err := s.st.QueryMetrics(ctx, m.ID, obj.Metric, 3)
		if err != nil {
			return SweepView{}, err
		}
		for _, pt := range series[obj.Metric] {
			if v.Best == nil || obj.Better(pt.Value, v.Best.Value) {
				v.Best = &SweepBest{JobID: m.ID, Metric: obj.Metric, Value: pt.Value, Step: pt.Step}
			}
		}
	}
	if v.Best != nil {
		job, err := s.st.GetJob(ctx, v.Best.JobID)
		if err != nil {
			return SweepView{}, jobErr(v.Best.JobID, err)
		}
		v.Best.Index, _ = strconv.Atoi(job.Spec.Labels[domain.ArrayIndexLabel])
		v.Best.Params = job.Spec.Params
	}
	return v, nil
}

// ListSweeps returns the sweeps p may see, newest first.
func (s *JobService) ListSweeps(ctx context.Context, p Principal, project string, limit int) ([]domain.Sweep, error) {
	if limit <= 0 || limit > 1000 {
		limit = 50
	}
	if err := s.authorize(ctx, p, authz.JobRead, authz.Resource{Kind: "job", Project: project}); err != nil {
		return nil, err
	}
	f := store.SweepFilter{Project: project, Limit: limit}
	if v := authz.VisibleJobs(p); !v.All {
		f.Restrict, f.Projects, f.Submitter = true, v.Projects, v.Submitter
	}
	return s.st.ListSweeps(ctx, f)
}

// CancelSweep cancels every member of the sweep that has not ended (a
// queued or held one at once, a running one through its executor) and
// records the sweep canceled, in one audit record. Canceling it again
// cancels what is left, if anything.
func (s *JobService) CancelSweep(ctx context.Context, p Principal, id int64, reason string) (SweepView, error) {
	if msg := domain.TextProblem(reason, false); msg != "" {
		return SweepView{}, domain.FieldErrors{{Path: "reason", Message: msg}}
	}
	sw, err := s.visibleSweep(ctx, p, id)
	if err != nil {
		return SweepView{}, err
	}
	if err := s.authorize(ctx, p, authz.JobCancel, sweepResource(sw)); err != nil {
		return SweepView{}, err
	}
	now := s.cfg.Clock.Now()
	msg := fmt.Sprintf("sweep %d canceled by %s", id, p.Subject)
	if reason != "" {
		msg += ": " + reason
	}
	if sw.CanceledAt.IsZero() {
		rec := s.audited(ctx, p, authz.JobCancel, "sweep/"+strconv.FormatInt(id, 10), nil, map[string]any{"canceled": true})
		if err := s.st.CancelSweep(ctx, id, p.Subject, now, rec); err != nil {
			return SweepView{}, fmt.Errorf("cancel sweep %d: %w", id, err)
		}
	}
	live := []domain.JobState{domain.JobQueued, domain.JobHeld, domain.JobStarting, domain.JobRunning}
	for range 3 { // members the loop moved meanwhile are read again
		members, err := s.st.ListJobs(ctx, store.JobFilter{Sweep: id, States: live})
		if err != nil {
			return SweepView{}, err
		}
		var changes []store.Change
		for _, m := range members {
			switch {
			case m.State == domain.JobQueued || m.State == domain.JobHeld:
				changes = append(changes, store.Change{JobID: m.ID, Move: domain.MoveCancel().Only(m.State),
					Reason: domain.ReasonCanceledByUser, Message: msg, Actor: p.Actor(), At: now})
			case !m.CancelRequested:
				changes = append(changes, store.Change{JobID: m.ID, In: []domain.JobState{m.State}, RequestCancel: true, SetReason: true,
					Reason: domain.ReasonCanceledByUser, Message: "cancel requested; " + msg, Actor: p.Actor(), At: now})
			}
		}
		if len(changes) == 0 {
			break
		}
		errs, err := s.st.Apply(ctx, changes)
		if err != nil {
			return SweepView{}, fmt.Errorf("cancel the members of sweep %d: %w", id, err)
		}
		s.cfg.Wake()
		if !slices.ContainsFunc(errs, func(e error) bool { return e != nil }) {
			break
		}
	}
	return s.GetSweep(ctx, p, id)
}

// SweepPoint is a sweep member's index and swept params, as the sweep's
// definition gives them (members are stored in this order).
type SweepPoint struct {
	Index  int
	Params map[string]string
}

// SweepPoints expands sw's definition into its members' indices and
// swept params, in the order the members were stored.
func SweepPoints(sw domain.Sweep) []SweepPoint {
	ms := jobspec.Members(sw.Spec)
	out := make([]SweepPoint, len(ms))
	for i, m := range ms {
		out[i] = SweepPoint{Index: m.Index, Params: m.Params}
	}
	return out
}
