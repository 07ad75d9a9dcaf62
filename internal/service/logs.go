package service

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"regexp"
	"time"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/executor"
	"trainyard/internal/logs"
)

// LogRequest selects and formats one attempt's log.
type LogRequest struct {
	Attempt    int // 0: the latest attempt
	Follow     bool
	Tail       int
	Timestamps bool
	// Grep keeps only the lines whose text matches this regular
	// expression (RE2 syntax); "" keeps all.
	Grep string
	// Since keeps only the lines written at or after a time: a duration
	// before now ("10m", "2h", "1d") or an RFC 3339 time; "" keeps all.
	Since string
}

// maxGrepLen bounds the --grep expression.
const maxGrepLen = 1000

// filters validates and compiles the request's grep and since filters.
func (r LogRequest) filters(now time.Time) (*regexp.Regexp, time.Time, error) {
	var errs domain.FieldErrors
	var re *regexp.Regexp
	var since time.Time
	if r.Grep != "" {
		var err error
		if len(r.Grep) > maxGrepLen {
			errs.Add("grep", "must be at most %d characters", maxGrepLen)
		} else if re, err = regexp.Compile(r.Grep); err != nil {
			errs.Add("grep", "is not a regular expression (RE2 syntax): %v", err)
		}
	}
	if r.Since != "" {
		if t, err := time.Parse(time.RFC3339Nano, r.Since); err == nil {
			since = t
		} else if d, err := domain.ParseDuration(r.Since); err == nil && d >= 0 {
			since = now.Add(-d)
		} else {
			errs.Add("since", "%q is neither a duration (10m, 2h, 1d) nor an RFC 3339 time (2025-06-01T12:00:00Z)", r.Since)
		}
	}
	return re, since, errs.Err()
}

// LogStream is an opened log, ready to copy.
type LogStream struct {
	s       *JobService
	jobID   int64
	attempt int
	req     LogRequest
	grep    *regexp.Regexp
	since   time.Time
}

// Attempt is the attempt number being read.
func (l *LogStream) Attempt() int { return l.attempt }

// OpenLogs checks that the job and attempt exist. A job with no attempt yet
// is an error unless following, in which case the stream waits for attempt 1.
func (s *JobService) OpenLogs(ctx context.Context, p Principal, id int64, req LogRequest) (*LogStream, error) {
	job, err := s.st.GetJob(ctx, id)
	if err != nil {
		return nil, jobErr(id, err)
	}
	if err := s.authorize(ctx, p, authz.JobRead, jobResource(job)); err != nil {
		return nil, err
	}
	grep, since, err := req.filters(s.cfg.Clock.Now())
	if err != nil {
		return nil, err
	}
	if e, ok := s.cfg.Files.LogsExpired(ctx, id); ok {
		return nil, domain.Errorf(domain.ErrNotFound, "the logs of job %d expired under the server's log retention (%s)", id, logs.RetentionString(e.Retention))
	}
	n := req.Attempt
	switch {
	case n < 0:
		return nil, domain.FieldErrors{{Path: "attempt", Message: "must be 1 or more"}}
	case n == 0 && job.Attempts == 0 && !req.Follow:
		return nil, domain.Errorf(domain.ErrNotFound, "job %d has no attempt yet (state %s); follow it with: trainyard logs -f %d", id, job.State, id)
	case n == 0:
		n = max(job.Attempts, 1)
	case n > job.Attempts && (job.State.Terminal() || !req.Follow):
		return nil, domain.Errorf(domain.ErrNotFound, "job %d has %d attempt(s), not %d", id, job.Attempts, n)
	}
	return &LogStream{s: s, jobID: id, attempt: n, req: req, grep: grep, since: since}, nil
}

// Copy writes the log to w; when following, it returns once the attempt has
// ended and every line is written, or when ctx ends. The executor reads
// the log and knows when the attempt ends; an attempt that has not started
// yet is waited for here, in the store.
func (l *LogStream) Copy(ctx context.Context, w io.Writer, flush func()) error {
	q := executor.LogQuery{Tail: l.req.Tail, Follow: l.req.Follow, Timestamps: l.req.Timestamps,
		Flush: flush, Grep: l.grep, Since: l.since}
	if q.Follow {
		ran, err := l.waitStart(ctx)
		if err != nil {
			return err
		}
		q.Follow = ran // one that never ran has no more lines coming
	}
	err := l.s.cfg.Files.Logs(ctx, executor.Ref{JobID: l.jobID, Attempt: l.attempt}, q, w)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no log (yet): nothing to show
	}
	return err
}

// startPoll is how often a follower waiting for its attempt to start looks.
const startPoll = 100 * time.Millisecond

// waitStart waits until the attempt has started (true) or ended without
// running, or the job ended without it (false).
func (l *LogStream) waitStart(ctx context.Context) (bool, error) {
	t := time.NewTicker(startPoll)
	defer t.Stop()
	for {
		job, err := l.s.st.GetJob(ctx, l.jobID)
		if err != nil {
			return false, err
		}
		if job.Attempts >= l.attempt {
			atts, err := l.s.st.ListAttempts(ctx, l.jobID)
			if err != nil {
				return false, err
			}
			if a := atts[l.attempt-1]; a.State != domain.AttemptStarting || !a.StartedAt.IsZero() {
				return !a.StartedAt.IsZero(), nil
			}
		} else if job.State.Terminal() {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-t.C:
		}
	}
}
