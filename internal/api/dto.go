package api

import (
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/service"
)

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// timeAt is t, or nil when t is zero: a pointer into the job a DTO is
// made from, where timePtr allocates a copy.
func timeAt(t *time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return t
}

func jobDTO(j *domain.Job) apitypes.Job {
	out := jobFields(j)
	out.StartedAt, out.FinishedAt = timePtr(j.StartedAt), timePtr(j.FinishedAt)
	return out
}

// pageJobDTO is jobDTO for a job of a list page, which outlives its DTO:
// its times are pointed at rather than copied. (jobDTO copies them, so
// that a single job's DTO does not move the job to the heap.)
func pageJobDTO(j *domain.Job) apitypes.Job {
	out := jobFields(j)
	out.StartedAt, out.FinishedAt = timeAt(&j.StartedAt), timeAt(&j.FinishedAt)
	return out
}

// jobFields is a job's DTO but for its start and end.
func jobFields(j *domain.Job) apitypes.Job {
	r := j.Resources
	out := apitypes.Job{
		ID: j.ID, Name: j.Name, Project: j.Project, Pool: j.Pool, State: string(j.State),
		Reason: string(j.Reason), Message: j.Message, Priority: string(j.Priority),
		Submitter: j.Submitter, SubmittedAt: j.SubmittedAt, UpdatedAt: j.UpdatedAt,
		OutputDir: j.OutputDir, AttemptCount: j.Attempts, CancelRequested: j.CancelRequested, Preemptions: j.Preemptions,
		SpecHash: j.SpecHash, Code: codeDTO(j.Code), RerunOf: j.RerunOf,
	}
	out.Resources = apitypes.Resources{GPUs: r.GPUs, CPUs: r.CPUs, Memory: r.Memory.String(), Nodes: r.Nodes}
	return out
}

func detailDTO(d service.JobDetail) apitypes.Job {
	out := jobDTO(&d.Job)
	out.Spec = d.Job.SpecJSON
	out.Attempts = make([]apitypes.Attempt, len(d.Attempts))
	for i, a := range d.Attempts {
		out.Attempts[i] = apitypes.Attempt{Number: a.Number, State: string(a.State), Reason: string(a.Reason),
			Message: a.Message, ExitCode: a.ExitCode, Node: a.Node, GPUs: a.GPUs, CreatedAt: a.CreatedAt,
			StartedAt: timePtr(a.StartedAt), FinishedAt: timePtr(a.FinishedAt)}
		if a.Usage != (domain.Usage{}) {
			out.Attempts[i].Usage = &apitypes.Usage{CPUSeconds: a.Usage.CPUSeconds, MaxRSSBytes: int64(a.Usage.MaxRSS), GPUSeconds: a.Usage.GPUSeconds}
		}
	}
	out.Transitions = make([]apitypes.Transition, len(d.Events))
	for i, e := range d.Events {
		out.Transitions[i] = apitypes.Transition{At: e.At, From: string(e.From), To: string(e.To), Attempt: e.Attempt,
			Actor: e.Actor, Reason: string(e.Reason), Message: e.Message}
	}
	return out
}
