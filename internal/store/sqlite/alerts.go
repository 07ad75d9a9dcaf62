package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

var _ store.Alerts = (*Store)(nil)

const alertColumns = `a.id, a.key, a.rule, a.severity, a.state, a.summary, a.resolution, a.job_id, a.job_name, a.attempt, a.project, a.pool, a.owner, a.fired_at, a.resolved_at, a.acked_at, a.acked_by, a.ack_reason`

func scanAlert(sc interface{ Scan(...any) error }, extra ...any) (domain.Alert, error) {
	var a domain.Alert
	var state string
	var fired int64
	var resolved, acked sql.NullInt64
	dst := append([]any{&a.ID, &a.Key, &a.Rule, &a.Severity, &state, &a.Summary, &a.Resolution, &a.JobID, &a.JobName, &a.Attempt, &a.Project, &a.Pool, &a.Owner, &fired, &resolved,
		&acked, &a.AckedBy, &a.AckReason}, extra...)
	if err := sc.Scan(dst...); err != nil {
		return a, err
	}
	a.State = domain.AlertState(state)
	a.FiredAt = time.Unix(0, fired).UTC()
	if resolved.Valid {
		a.ResolvedAt = time.Unix(0, resolved.Int64).UTC()
	}
	if acked.Valid {
		a.AckedAt = time.Unix(0, acked.Int64).UTC()
	}
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
				res, err := w.exec(`INSERT INTO alerts (key, rule, severity, state, summary, job_id, job_name, attempt, project, pool, owner, fired_at)
					VALUES (?, ?, ?, 'firing', ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) WHERE state = 'firing' DO NOTHING`,
					a.Key, a.Rule, a.Severity, a.Summary, a.JobID, a.JobName, a.Attempt, a.Project, a.Pool, a.Owner, a.FiredAt.UnixNano())
				if err != nil {
					return interpretError("record alert", err)
				}
				if n, _ := res.RowsAffected(); n == 0 {
					continue // already firing
				}
				if a.ID, err = res.LastInsertId(); err != nil {
					return interpretError("record alert", err)
				}
				a.ResolvedAt, a.Resolution = time.Time{}, ""
			case domain.AlertResolved:
				row := w.queryRow(`UPDATE alerts SET state = 'resolved', resolved_at = ?, resolution = ? WHERE key = ? AND state = 'firing' RETURNING `+
					strings.ReplaceAll(alertColumns, "a.", ""), a.ResolvedAt.UnixNano(), a.Resolution, a.Key)
				stored, err := scanAlert(row)
				if errors.Is(err, sql.ErrNoRows) {
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
				if _, err := w.exec(`INSERT OR IGNORE INTO alert_notifications (alert_id, channel, status, created_at) VALUES (?, ?, ?, ?)`,
					a.ID, ch, string(a.State), at.UnixNano()); err != nil {
					return interpretError("queue alert notification", err)
				}
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
	rows, err := s.readDB.QueryContext(ctx, `SELECT `+alertColumns+` FROM alerts a
		WHERE (? = '' OR a.state = ?) AND (? = 0 OR a.job_id = ?) ORDER BY a.id DESC LIMIT ?`,
		string(f.State), string(f.State), f.JobID, f.JobID, limit)
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
	if err := rows.Err(); err != nil {
		return nil, interpretError("list alerts", err)
	}
	return out, nil
}

// PendingNotifications returns undelivered notifications, oldest first.
func (s *Store) PendingNotifications(ctx context.Context, limit int) ([]domain.AlertNotification, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.readDB.QueryContext(ctx, `SELECT `+alertColumns+`, n.id, n.channel, n.status, n.created_at, n.tries, n.last_error
		FROM alert_notifications n JOIN alerts a ON a.id = n.alert_id
		WHERE n.sent_at IS NULL AND n.gave_up = 0 ORDER BY n.id LIMIT ?`, limit)
	if err != nil {
		return nil, interpretError("list alert notifications", err)
	}
	defer rows.Close()
	var out []domain.AlertNotification
	for rows.Next() {
		var n domain.AlertNotification
		var status string
		var created int64
		a, err := scanAlert(rows, &n.ID, &n.Channel, &status, &created, &n.Tries, &n.LastError)
		if err != nil {
			return nil, interpretError("list alert notifications", err)
		}
		n.Alert, n.Status, n.CreatedAt = a, domain.AlertState(status), time.Unix(0, created).UTC()
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		return nil, interpretError("list alert notifications", err)
	}
	return out, nil
}

// MarkNotification records one delivery try.
func (s *Store) MarkNotification(ctx context.Context, alertID int64, channel string, status domain.AlertState, r store.NotificationResult) error {
	return s.write(ctx, func(w *writer) error {
		var res sql.Result
		var err error
		if r.Sent {
			res, err = w.exec(`UPDATE alert_notifications SET sent_at = ?, tries = tries + 1, last_error = '' WHERE alert_id = ? AND channel = ? AND status = ?`, r.At.UnixNano(), alertID, channel, string(status))
		} else {
			res, err = w.exec(`UPDATE alert_notifications SET tries = tries + 1, last_error = ?, gave_up = ? WHERE alert_id = ? AND channel = ? AND status = ?`, r.Error, r.GiveUp, alertID, channel, string(status))
		}
		if err != nil {
			return interpretError("mark alert notification", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("mark alert notification: alert %d owes channel %q no %s notification: %w", alertID, channel, status, store.ErrNotFound)
		}
		return nil
	})
}

// GetAlert returns one alert.
func (s *Store) GetAlert(ctx context.Context, id int64) (domain.Alert, error) {
	if err := s.checkOpen(); err != nil {
		return domain.Alert{}, err
	}
	a, err := scanAlert(s.readDB.QueryRowContext(ctx, `SELECT `+alertColumns+` FROM alerts a WHERE a.id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
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
		a, err := scanAlert(w.queryRow(`SELECT `+alertColumns+` FROM alerts a WHERE a.id = ?`, id))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("acknowledge alert: no alert %d: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return interpretError("acknowledge alert", err)
		}
		if err := ackable(a); err != nil {
			return err
		}
		if _, err := w.exec(`UPDATE alerts SET acked_at = ?, acked_by = ?, ack_reason = ? WHERE id = ?`, at.UnixNano(), by, reason, id); err != nil {
			return interpretError("acknowledge alert", err)
		}
		if _, err := w.exec(`UPDATE alert_notifications SET gave_up = 1, last_error = 'acknowledged'
			WHERE alert_id = ? AND status = 'firing' AND sent_at IS NULL AND gave_up = 0`, id); err != nil {
			return interpretError("acknowledge alert", err)
		}
		a.AckedAt, a.AckedBy, a.AckReason = at.UTC(), by, reason
		out = a
		return nil
	}, withAudit(audit))
	return out, err
}

// ackable refuses to acknowledge an alert that is resolved or already
// acknowledged.
func ackable(a domain.Alert) error {
	switch {
	case a.State != domain.AlertFiring:
		return fmt.Errorf("alert %d resolved at %s; only a firing alert can be acknowledged: %w", a.ID, a.ResolvedAt.Format(time.RFC3339), store.ErrConflict)
	case !a.AckedAt.IsZero():
		return fmt.Errorf("alert %d was already acknowledged by %s at %s: %w", a.ID, a.AckedBy, a.AckedAt.Format(time.RFC3339), store.ErrConflict)
	}
	return nil
}
