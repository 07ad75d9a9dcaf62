package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

const alertColumns = `a.id, a.key, a.rule, a.severity, a.state, a.summary, a.resolution, a.job_id, a.job_name, a.attempt, a.project, a.pool, a.owner, a.fired_at, a.resolved_at, a.acked_at, a.acked_by, a.ack_reason`

func scanAlert(sc rowScanner, extra ...any) (domain.Alert, error) {
	var (
		a        domain.Alert
		state    string
		attempt  int32
		fired    int64
		resolved pgtype.Int8
		acked    pgtype.Int8
	)
	dst := append([]any{&a.ID, &a.Key, &a.Rule, &a.Severity, &state, &a.Summary, &a.Resolution, &a.JobID, &a.JobName, &attempt,
		&a.Project, &a.Pool, &a.Owner, &fired, &resolved, &acked, &a.AckedBy, &a.AckReason}, extra...)
	if err := sc.Scan(dst...); err != nil {
		return a, err
	}
	a.State, a.Attempt = domain.AlertState(state), int(attempt)
	a.FiredAt = unixNano(fired)
	a.ResolvedAt = timeOf(resolved)
	a.AckedAt = timeOf(acked)
	return a, nil
}

// RecordAlerts stores transitions and queues their notifications in one
// transaction.
func (s *Store) RecordAlerts(ctx context.Context, transitions []store.AlertTransition) ([]domain.Alert, error) {
	for _, t := range transitions {
		a := t.Alert
		if a.Key == "" || a.Rule == "" || (a.State != domain.AlertFiring && a.State != domain.AlertResolved) {
			return nil, fmt.Errorf("record alerts: an alert needs a key, a rule and the state firing or resolved (got key %q rule %q state %q): %w",
				a.Key, a.Rule, a.State, store.ErrInvalid)
		}
	}
	var out []domain.Alert
	err := s.write(ctx, func(w *writer) error {
		out = out[:0]
		for _, t := range transitions {
			a := t.Alert
			switch a.State {
			case domain.AlertFiring:
				err := w.queryRow(`INSERT INTO alerts (key, rule, severity, state, summary, job_id, job_name, attempt, project, pool, owner, fired_at)
					VALUES ($1, $2, $3, 'firing', $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT (key) WHERE state = 'firing' DO NOTHING
					RETURNING id`,
					a.Key, a.Rule, a.Severity, a.Summary, a.JobID, a.JobName, a.Attempt, a.Project, a.Pool, a.Owner,
					a.FiredAt.UnixNano()).Scan(&a.ID)
				if errors.Is(err, pgx.ErrNoRows) {
					continue // already firing
				}
				if err != nil {
					return interpretError("record alert", err)
				}
				a.ResolvedAt, a.Resolution = time.Time{}, ""
			case domain.AlertResolved:
				stored, err := scanAlert(w.queryRow(`UPDATE alerts SET state = 'resolved', resolved_at = $1, resolution = $2
					WHERE key = $3 AND state = 'firing' RETURNING `+strings.ReplaceAll(alertColumns, "a.", ""),
					a.ResolvedAt.UnixNano(), a.Resolution, a.Key))
				if errors.Is(err, pgx.ErrNoRows) {
					continue // nothing fires under that key
				}
				if err != nil {
					return interpretError("resolve alert", err)
				}
				a = stored
			}
			at := a.FiredAt
			if a.State == domain.AlertResolved {
				at = a.ResolvedAt
			}
			for _, ch := range t.Notify {
				w.queue("queue alert notification", `INSERT INTO alert_notifications (alert_id, channel, status, created_at)
					VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`, a.ID, ch, string(a.State), at.UnixNano())
			}
			out = append(out, a)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ListAlerts returns alerts, newest first.
func (s *Store) ListAlerts(ctx context.Context, f store.AlertFilter) ([]domain.Alert, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, `SELECT `+alertColumns+` FROM alerts a
		WHERE ($1 = '' OR a.state = $1) AND ($2::bigint = 0 OR a.job_id = $2) ORDER BY a.id DESC LIMIT $3`,
		string(f.State), f.JobID, limit)
	if err != nil {
		return nil, interpretError("list alerts", err)
	}
	defer rows.Close()
	var out []domain.Alert
	for rows.Next() {
		a, err := scanAlert(rows)
		if err != nil {
			return nil, interpretError("list alerts", err)
		}
		out = append(out, a)
	}
	return out, interpretError("list alerts", rows.Err())
}

// PendingNotifications returns undelivered notifications, oldest first.
func (s *Store) PendingNotifications(ctx context.Context, limit int) ([]domain.AlertNotification, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, `SELECT `+alertColumns+`, n.id, n.channel, n.status, n.created_at, n.tries, n.last_error
		FROM alert_notifications n JOIN alerts a ON a.id = n.alert_id
		WHERE n.sent_at IS NULL AND n.gave_up = 0 ORDER BY n.id LIMIT $1`, limit)
	if err != nil {
		return nil, interpretError("list alert notifications", err)
	}
	defer rows.Close()
	var out []domain.AlertNotification
	for rows.Next() {
		var (
			n       domain.AlertNotification
			status  string
			created int64
			tries   int32
		)
		a, err := scanAlert(rows, &n.ID, &n.Channel, &status, &created, &tries, &n.LastError)
		if err != nil {
			return nil, interpretError("list alert notifications", err)
		}
		n.Alert, n.Status, n.CreatedAt, n.Tries = a, domain.AlertState(status), unixNano(created), int(tries)
		out = append(out, n)
	}
	return out, interpretError("list alert notifications", rows.Err())
}

// MarkNotification records one delivery try.
func (s *Store) MarkNotification(ctx context.Context, alertID int64, channel string, status domain.AlertState, r store.NotificationResult) error {
	return s.write(ctx, func(w *writer) error {
		var (
			tag pgconn.CommandTag
			err error
		)
		if r.Sent {
			tag, err = w.exec(`UPDATE alert_notifications SET sent_at = $1, tries = tries + 1, last_error = ''
				WHERE alert_id = $2 AND channel = $3 AND status = $4`, r.At.UnixNano(), alertID, channel, string(status))
		} else {
			tag, err = w.exec(`UPDATE alert_notifications SET tries = tries + 1, last_error = $1, gave_up = $2
				WHERE alert_id = $3 AND channel = $4 AND status = $5`, r.Error, boolArg(r.GiveUp), alertID, channel, string(status))
		}
		if err != nil {
			return interpretError("mark alert notification", err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("mark alert notification: alert %d owes channel %q no %s notification: %w", alertID, channel, status, store.ErrNotFound)
		}
		return nil
	})
}

// GetAlert returns one alert.
func (s *Store) GetAlert(ctx context.Context, id int64) (domain.Alert, error) {
	a, err := scanAlert(s.pool.QueryRow(ctx, `SELECT `+alertColumns+` FROM alerts a WHERE a.id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return a, fmt.Errorf("get alert: no alert %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return a, interpretError("get alert", err)
	}
	return a, nil
}

// AckAlert acknowledges a firing alert and gives up its undelivered
// firing notifications.
func (s *Store) AckAlert(ctx context.Context, id int64, by, reason string, at time.Time, audit domain.AuditRecord) (domain.Alert, error) {
	var out domain.Alert
	err := s.write(ctx, func(w *writer) error {
		a, err := scanAlert(w.queryRow(`SELECT `+alertColumns+` FROM alerts a WHERE a.id = $1 FOR UPDATE`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("acknowledge alert: no alert %d: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return interpretError("acknowledge alert", err)
		}
		switch {
		case a.State != domain.AlertFiring:
			return fmt.Errorf("alert %d resolved at %s; only a firing alert can be acknowledged: %w", a.ID, a.ResolvedAt.Format(time.RFC3339), store.ErrConflict)
		case !a.AckedAt.IsZero():
			return fmt.Errorf("alert %d was already acknowledged by %s at %s: %w", a.ID, a.AckedBy, a.AckedAt.Format(time.RFC3339), store.ErrConflict)
		}
		if _, err := w.exec(`UPDATE alerts SET acked_at = $1, acked_by = $2, ack_reason = $3 WHERE id = $4`, at.UnixNano(), by, reason, id); err != nil {
			return interpretError("acknowledge alert", err)
		}
		if _, err := w.exec(`UPDATE alert_notifications SET gave_up = 1, last_error = 'acknowledged'
			WHERE alert_id = $1 AND status = 'firing' AND sent_at IS NULL AND gave_up = 0`, id); err != nil {
			return interpretError("acknowledge alert", err)
		}
		a.AckedAt, a.AckedBy, a.AckReason = at.UTC(), by, reason
		out = a
		return nil
	}, withAudit(audit))
	return out, err
}
