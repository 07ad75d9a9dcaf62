package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// Resuming where the server cannot see the job's files (a cluster's
// containers): the executor hands the attempt's in-job agent the job's
// registered checkpoints to resume from, the agent downloads the first
// intact one with its job token (Checkpoints and OpenCheckpoint, allowed
// by authz.AttemptResume) and reports which one it resumed from
// (ReportResumed), so that the attempt's lineage is recorded as the
// control loop records it for an executor that hands the checkpoint over
// itself (its Started event's Resumed and ResumeNote): the checkpoint's
// ResumedBy, and the words in the attempt's start message.

// MaxResumeNote bounds the note of a resume report.
const MaxResumeNote = 4096

// ErrAttemptNotStarted reports a resume report for an attempt whose start
// the server has not recorded yet: the report is refused, nothing is
// recorded, and the agent reports again once it has (the API answers 409
// with code "not_started"). It matches domain.ErrConflict.
var ErrAttemptNotStarted = fmt.Errorf("attempt not started: %w", domain.ErrConflict)

// checkpointReader returns the job when p may read its checkpoints:
// whoever may read the job (authz.JobRead), or the job token of the job's
// latest attempt while that attempt is starting or running
// (authz.AttemptResume).
func (s *ArtifactService) checkpointReader(ctx context.Context, p Principal, id int64) (domain.Job, error) {
	if !p.IsJob() {
		return s.readableJob(ctx, p, id)
	}
	job, err := s.st.GetJob(ctx, id)
	if err != nil {
		return domain.Job{}, jobErr(id, err)
	}
	r := authz.Resource{Kind: "attempt", ID: domain.AttemptRef(id, p.Attempt), Project: job.Project, Owner: job.Submitter}
	if err := s.authorize(ctx, p, authz.AttemptResume, r); err != nil {
		return domain.Job{}, err
	}
	if _, err := s.attemptActive(ctx, job, p.Attempt, "reads the job's checkpoints"); err != nil {
		return domain.Job{}, err
	}
	return job, nil
}

// ResumeReport is what ReportResumed recorded.
type ResumeReport struct {
	Name string // the checkpoint resumed from; empty: none
	Note string
	// Words are what the attempt's start message says of it (see
	// store.RecordResume).
	Words string
}

// ReportResumed records, for the attempt's in-job agent, which of the
// job's registered checkpoints the attempt resumed from (name; empty:
// none) and why it skipped the ones before it (note): the checkpoint's
// ResumedBy becomes the attempt, and the job's message of the attempt's
// start gets the words the control loop gives a resumed start. Only the
// attempt's job token may (authz.AttemptReport), only while the attempt is
// the job's latest and running: one the server has not seen start yet is
// refused with an error matching ErrAttemptNotStarted, to report again.
// A name that is not a registered checkpoint of the job, or a note that
// is too long or holds control characters, is a field error. Reporting
// the same again changes nothing.
func (s *ArtifactService) ReportResumed(ctx context.Context, p Principal, id int64, attempt int, name, note string) (ResumeReport, error) {
	job, err := s.st.GetJob(ctx, id)
	if err != nil {
		return ResumeReport{}, jobErr(id, err)
	}
	r := authz.Resource{Kind: "attempt", ID: domain.AttemptRef(id, attempt), Project: job.Project, Owner: job.Submitter}
	if err := s.authorize(ctx, p, authz.AttemptReport, r); err != nil {
		return ResumeReport{}, err
	}
	if err := s.checkResumeReport(ctx, job.ID, name, note); err != nil {
		return ResumeReport{}, err
	}
	att, err := s.attemptActive(ctx, job, attempt, "reports what it resumed from")
	if err != nil {
		return ResumeReport{}, err
	}
	if att.State != domain.AttemptRunning {
		return ResumeReport{}, domain.Errorf(ErrAttemptNotStarted,
			"the server has not recorded the start of attempt %d of job %d yet (it is %s); report what it resumed from again once it runs", attempt, id, att.State)
	}
	words, err := store.RecordResume(ctx, s.st, id, attempt, name, note)
	if errors.Is(err, domain.ErrNotFound) {
		var errs domain.FieldErrors
		errs.Add("name", "checkpoint %q of job %d was deleted meanwhile; report the checkpoint the attempt resumed from", name, id)
		return ResumeReport{}, errs.Err()
	}
	if err != nil {
		return ResumeReport{}, fmt.Errorf("record that attempt %d of job %d resumed from checkpoint %q: %w", attempt, id, name, err)
	}
	if err := s.addStartWords(ctx, id, attempt, words); err != nil {
		return ResumeReport{}, err
	}
	return ResumeReport{Name: name, Note: note, Words: words}, nil
}

// checkResumeReport checks the fields of a resume report: name empty or
// one of the job's registered checkpoints, note bounded and printable,
// and not both empty.
func (s *ArtifactService) checkResumeReport(ctx context.Context, jobID int64, name, note string) error {
	var errs domain.FieldErrors
	switch {
	case name == "" && note == "":
		errs.Add("name", "is empty and so is note: give the checkpoint the attempt resumed from, or, in note, why it resumed from none")
	case name == "":
	case !domain.IsCheckpointName(name):
		errs.Add("name", "%q is not a checkpoint name: give the name of one of the job's registered checkpoints (see: trainyard checkpoints ls %d)", name, jobID)
	default:
		recs, err := s.st.ListCheckpoints(ctx, jobID, false)
		if err != nil {
			return fmt.Errorf("list the checkpoints of job %d: %w", jobID, err)
		}
		if !slices.ContainsFunc(recs, func(c domain.CheckpointRecord) bool { return c.Name == name }) {
			names := make([]string, 0, len(recs))
			for _, c := range recs {
				names = append(names, c.Name)
			}
			have := "it has none"
			if len(names) > 0 {
				have = "it has " + strings.Join(names, ", ")
			}
			errs.Add("name", "%q is not a registered checkpoint of job %d (%s); report the name of the one the attempt resumed from", name, jobID, have)
		}
	}
	switch {
	case len(note) > MaxResumeNote:
		errs.Add("note", "is %d bytes long; at most %d", len(note), MaxResumeNote)
	case !utf8.ValidString(note):
		errs.Add("note", "is not valid UTF-8")
	case strings.ContainsFunc(note, unicode.IsControl):
		errs.Add("note", "holds a control character (a newline, a tab…); write it on one line")
	}
	return errs.Err()
}

// addStartWords adds words to the job's message while it is still the
// message of the attempt's start (reason Started, the job running that
// attempt), once. Otherwise the message has moved on and stays as it is:
// the checkpoint's ResumedBy still says it (trainyard why).
func (s *ArtifactService) addStartWords(ctx context.Context, id int64, attempt int, words string) error {
	if words == "" {
		return nil
	}
	job, err := s.st.GetJob(ctx, id)
	if err != nil {
		return jobErr(id, err)
	}
	if job.State != domain.JobRunning || job.Attempts != attempt || job.Reason != domain.ReasonStarted || strings.Contains(job.Message, words) {
		return nil
	}
	errs, err := s.st.Apply(ctx, []store.Change{{JobID: id, In: []domain.JobState{domain.JobRunning}, SetReason: true,
		Reason: domain.ReasonStarted, Message: job.Message + words, At: s.cfg.Clock.Now()}})
	if err != nil {
		return fmt.Errorf("add to the message of job %d that attempt %d resumed: %w", id, attempt, err)
	}
	if errs[0] != nil && !errors.Is(errs[0], store.ErrConflict) && !errors.Is(errs[0], store.ErrNotFound) {
		return fmt.Errorf("add to the message of job %d that attempt %d resumed: %w", id, attempt, errs[0])
	}
	return nil
}
