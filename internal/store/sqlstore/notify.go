package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

var (
	qNotifyPrefPut = Q(`INSERT INTO notify_prefs (username, notify, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (username) DO UPDATE SET notify = excluded.notify, updated_at = excluded.updated_at`)
	qNotifyPrefGet    = Q(`SELECT username, notify, updated_at FROM notify_prefs WHERE username = ?`)
	qNotifyPrefDelete = Q(`DELETE FROM notify_prefs WHERE username = ?`)
	// qJobEndInsert records a job end with the job's move to an end state
	// (applyChange); a job ends once, and a second record changes nothing.
	qJobEndInsert = Q(`INSERT INTO job_ends (job_id, state, at) VALUES (?, ?, ?) ON CONFLICT (job_id) DO NOTHING`)
	// qJobEndsList reads the oldest job ends with what the notifier needs
	// of each job (job_ends references jobs; every job has its snapshot).
	qJobEndsList = Q(`SELECT e.job_id, e.state, e.at, jobs.submitter, snapshots.spec_json
		FROM job_ends e JOIN jobs ON jobs.id = e.job_id JOIN snapshots ON snapshots.hash = jobs.spec_hash
		ORDER BY e.at, e.job_id LIMIT ?`)
	qJobEndDelete  = Q(`DELETE FROM job_ends WHERE job_id = ?`)
	qJobNoteInsert = Q(`INSERT INTO job_notifications (job_id, state, target, created_at) VALUES (?, ?, ?, ?)
		ON CONFLICT (job_id, target) DO NOTHING`)
	jobNoteColumns   = `id, job_id, state, target, created_at, sent_at, tries, last_error, gave_up`
	qJobNotesPending = Q(`SELECT ` + jobNoteColumns + ` FROM job_notifications
		WHERE sent_at IS NULL AND gave_up = 0 ORDER BY id LIMIT ?`)
	qJobNotesOfJob = Q(`SELECT ` + jobNoteColumns + ` FROM job_notifications WHERE job_id = ? ORDER BY id`)
	qJobNoteSent   = Q(`UPDATE job_notifications SET sent_at = ?, tries = tries + 1, last_error = '' WHERE id = ?`)
	qJobNoteFailed = Q(`UPDATE job_notifications SET tries = tries + 1, last_error = ?, gave_up = ? WHERE id = ?`)
)

// maxNotifyTarget bounds a notification's target ("email:" and an
// address of at most 254 bytes).
const maxNotifyTarget = 300

// unixNanoOrZero is t in Unix nanoseconds, 0 for the zero time.
func unixNanoOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

// PutNotifyPref creates or replaces a user's default notification.
func (s Shared) PutNotifyPref(ctx context.Context, p domain.NotifyPref, audit domain.AuditRecord) error {
	if p.User == "" {
		return fmt.Errorf("put notification default: no user named: %w", store.ErrInvalid)
	}
	b, err := json.Marshal(p.Notify)
	if err != nil {
		return fmt.Errorf("put notification default of %s: encode: %w", p.User, err)
	}
	return s.b.Write(ctx, func(x Exec) error {
		if _, err := x.Exec(qNotifyPrefPut, p.User, string(b), p.UpdatedAt.UnixNano()); err != nil {
			return s.err("put notification default", err)
		}
		return nil
	}, audit)
}

// GetNotifyPref returns a user's default notification.
func (s Shared) GetNotifyPref(ctx context.Context, user string) (domain.NotifyPref, error) {
	r, err := s.b.Reader()
	if err != nil {
		return domain.NotifyPref{}, err
	}
	var (
		p       domain.NotifyPref
		raw     string
		updated int64
	)
	err = r.QueryRow(ctx, qNotifyPrefGet, user).Scan(&p.User, &raw, &updated)
	if s.b.IsNoRows(err) {
		return p, fmt.Errorf("get notification default: user %s has none: %w", user, store.ErrNotFound)
	}
	if err != nil {
		return p, s.err("get notification default", err)
	}
	if err := json.Unmarshal([]byte(raw), &p.Notify); err != nil {
		return p, fmt.Errorf("get notification default of %s: stored value is not valid JSON: %w", user, err)
	}
	p.UpdatedAt = time.Unix(0, updated).UTC()
	return p, nil
}

// DeleteNotifyPref removes a user's default notification.
func (s Shared) DeleteNotifyPref(ctx context.Context, user string, audit domain.AuditRecord) error {
	return s.b.Write(ctx, func(x Exec) error {
		n, err := x.Exec(qNotifyPrefDelete, user)
		if err != nil {
			return s.err("clear notification default", err)
		}
		if n == 0 {
			return fmt.Errorf("clear notification default: user %s has none: %w", user, store.ErrNotFound)
		}
		return nil
	}, audit)
}

// PendingJobEnds returns the job ends not yet resolved, oldest first.
func (s Shared) PendingJobEnds(ctx context.Context, limit int) ([]domain.JobEnd, error) {
	if limit <= 0 {
		limit = 100
	}
	return queryAll(ctx, s, "list job ends", func(row Row) (domain.JobEnd, error) {
		var (
			e     domain.JobEnd
			state string
			at    int64
			spec  []byte
		)
		if err := row.Scan(&e.JobID, &state, &at, &e.Submitter, &spec); err != nil {
			return e, err
		}
		e.State, e.At = domain.JobState(state), time.Unix(0, at).UTC()
		// Only the two fields the notifier reads, not the whole spec.
		var part struct {
			Notify *domain.Notify    `json:"notify"`
			Labels map[string]string `json:"labels"`
		}
		if err := json.Unmarshal(spec, &part); err != nil {
			return e, fmt.Errorf("decode the config snapshot of job %d: %w", e.JobID, err)
		}
		e.Notify, e.Sweep = part.Notify, part.Labels[domain.SweepLabel] != ""
		return e, nil
	}, qJobEndsList, limit)
}

// ResolveJobEnds resolves several job ends in one transaction.
func (s Shared) ResolveJobEnds(ctx context.Context, rs []domain.JobEndResolution) ([]error, error) {
	errs := make([]error, len(rs))
	valid := 0
	for i, r := range rs {
		if errs[i] = checkJobNotes(r.JobID, r.Notes); errs[i] == nil {
			valid++
		}
	}
	if valid == 0 {
		return errs, nil
	}
	return errs, s.b.Write(ctx, func(x Exec) error {
		for i, r := range rs {
			if errs[i] == nil {
				if err := queueJobNotes(x, r.JobID, r.Notes); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// ResolveJobEnd queues notes and removes the job end in one transaction.
func (s Shared) ResolveJobEnd(ctx context.Context, jobID int64, notes []domain.JobNotification) error {
	if err := checkJobNotes(jobID, notes); err != nil {
		return err
	}
	return s.b.Write(ctx, func(x Exec) error { return queueJobNotes(x, jobID, notes) })
}

// checkJobNotes refuses a note that is not about job jobID's end or has
// no valid target.
func checkJobNotes(jobID int64, notes []domain.JobNotification) error {
	for _, n := range notes {
		if _, _, ok := domain.SplitNotifyTarget(n.Target); !ok || len(n.Target) > maxNotifyTarget || n.JobID != jobID || !n.State.Terminal() {
			return fmt.Errorf("resolve end of job %d: a notification needs the job's id, an end state and a target channel:NAME or email:ADDRESS (got job %d, state %q, target %q): %w",
				jobID, n.JobID, n.State, n.Target, store.ErrInvalid)
		}
	}
	return nil
}

// queueJobNotes queues a job end's notes and removes the end.
func queueJobNotes(x Exec, jobID int64, notes []domain.JobNotification) error {
	for _, n := range notes {
		if err := x.Queue("queue job notification", qJobNoteInsert, n.JobID, string(n.State), n.Target, n.CreatedAt.UnixNano()); err != nil {
			return err
		}
	}
	return x.Queue("remove job end", qJobEndDelete, jobID)
}

func scanJobNote(row Row) (domain.JobNotification, error) {
	var (
		n       domain.JobNotification
		state   string
		created int64
		sent    sql.NullInt64
		gaveUp  int
	)
	err := row.Scan(&n.ID, &n.JobID, &state, &n.Target, &created, &sent, &n.Tries, &n.LastError, &gaveUp)
	n.State, n.CreatedAt, n.SentAt, n.GaveUp = domain.JobState(state), time.Unix(0, created).UTC(), TimeOf(sent), gaveUp != 0
	return n, err
}

// PendingJobNotifications returns undelivered notifications, oldest first.
func (s Shared) PendingJobNotifications(ctx context.Context, limit int) ([]domain.JobNotification, error) {
	if limit <= 0 {
		limit = 100
	}
	return queryAll(ctx, s, "list job notifications", scanJobNote, qJobNotesPending, limit)
}

// JobNotifications returns a job's notifications.
func (s Shared) JobNotifications(ctx context.Context, jobID int64) ([]domain.JobNotification, error) {
	return queryAll(ctx, s, "list job notifications", scanJobNote, qJobNotesOfJob, jobID)
}

// MarkJobNotification records one delivery try.
func (s Shared) MarkJobNotification(ctx context.Context, id int64, r store.NotificationResult) error {
	return s.b.Write(ctx, func(x Exec) error {
		var (
			n   int64
			err error
		)
		if r.Sent {
			n, err = x.Exec(qJobNoteSent, r.At.UnixNano(), id)
		} else {
			n, err = x.Exec(qJobNoteFailed, r.Error, BoolArg(r.GiveUp), id)
		}
		if err != nil {
			return s.err("mark job notification", err)
		}
		if n == 0 {
			return fmt.Errorf("mark job notification: no notification %d: %w", id, store.ErrNotFound)
		}
		return nil
	})
}
