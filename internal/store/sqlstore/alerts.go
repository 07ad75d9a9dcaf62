package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

const alertColumns = `a.id, a.key, a.rule, a.severity, a.state, a.summary, a.resolution, a.job_id, a.job_name, a.attempt, a.project, a.pool, a.owner, a.fired_at, a.resolved_at, a.acked_at, a.acked_by, a.ack_reason`

var (
	qAlertFire = Q(`INSERT INTO alerts (key, rule, severity, state, summary, job_id, job_name, attempt, project, pool, owner, fired_at)
		VALUES (?, ?, ?, 'firing', ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) WHERE state = 'firing' DO NOTHING
		RETURNING id`)
	qAlertResolve = Q(`UPDATE alerts SET state = 'resolved', resolved_at = ?, resolution = ?
		WHERE key = ? AND state = 'firing' RETURNING ` + strings.ReplaceAll(alertColumns, "a.", ""))
	qNotificationQueue = Q(`INSERT INTO alert_notifications (alert_id, channel, status, created_at)
		VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING`)
	qAlertList = Q(`SELECT ` + alertColumns + ` FROM alerts a
		WHERE (? = '' OR a.state = ?) AND (CAST(? AS BIGINT) = 0 OR a.job_id = ?) ORDER BY a.id DESC LIMIT ?`)
	qNotificationsPending = Q(`SELECT ` + alertColumns + `, n.id, n.channel, n.status, n.created_at, n.tries, n.last_error
		FROM alert_notifications n JOIN alerts a ON a.id = n.alert_id
		WHERE n.sent_at IS NULL AND n.gave_up = 0 ORDER BY n.id LIMIT ?`)
	qNotificationSent = Q(`UPDATE alert_notifications SET sent_at = ?, tries = tries + 1, last_error = ''
		WHERE alert_id = ? AND channel = ? AND status = ?`)
	qNotificationFailed = Q(`UPDATE alert_notifications SET tries = tries + 1, last_error = ?, gave_up = ?
		WHERE alert_id = ? AND channel = ? AND status = ?`)
	qAlertGet       = Q(`SELECT ` + alertColumns + ` FROM alerts a WHERE a.id = ?`)
	qAlertGetLock   = Q(`SELECT ` + alertColumns + ` FROM alerts a WHERE a.id = ?{FOR UPDATE}`)
	qAlertAck       = Q(`UPDATE alerts SET acked_at = ?, acked_by = ?, ack_reason = ? WHERE id = ?`)
	qAlertAckGiveUp = Q(`UPDATE alert_notifications SET gave_up = 1, last_error = 'acknowledged'
		WHERE alert_id = ? AND status = 'firing' AND sent_at IS NULL AND gave_up = 0`)
)

func scanAlert(row Row, extra ...any) (domain.Alert, error) {
	var (
		a               domain.Alert
		state           string
		fired           int64
		resolved, acked sql.NullInt64
	)
	dst := append([]any{&a.ID, &a.Key, &a.Rule, &a.Severity, &state, &a.Summary, &a.Resolution, &a.JobID, &a.JobName, &a.Attempt,
		&a.Project, &a.Pool, &a.Owner, &fired, &resolved, &acked, &a.AckedBy, &a.AckReason}, extra...)
	if err := row.Scan(dst...); err != nil {
		return a, err
	}
	a.State = domain.AlertState(state)
	a.FiredAt = time.Unix(0, fired).UTC()
	a.ResolvedAt = TimeOf(resolved)
	a.AckedAt = TimeOf(acked)
	return a, nil
}

// RecordAlerts stores transitions and queues their notifications in one
// transaction.
func (s Shared) RecordAlerts(ctx context.Context, transitions []store.AlertTransition) ([]domain.Alert, error) {
	for _, t := range transitions {
		a := t.Alert
		if a.Key == "" || a.Rule == "" || (a.State != domain.AlertFiring && a.State != domain.AlertResolved) {
			return nil, fmt.Errorf("record alerts: an alert needs a key, a rule and the state firing or resolved (got key %q rule %q state %q): %w",
				a.Key, a.Rule, a.State, store.ErrInvalid)
		}
	}
	var out []domain.Alert
	err := s.b.Write(ctx, func(x Exec) error {
		out = out[:0]
		for _, t := range transitions {
			a := t.Alert
			switch a.State {
			case domain.AlertFiring:
				err := x.QueryRow(qAlertFire, a.Key, a.Rule, a.Severity, a.Summary, a.JobID, a.JobName, a.Attempt, a.Project, a.Pool, a.Owner,
					a.FiredAt.UnixNano()).Scan(&a.ID)
				if s.b.IsNoRows(err) {
					continue // already firing
				}
				if err != nil {
					return s.err("record alert", err)
				}
				a.ResolvedAt, a.Resolution = time.Time{}, ""
			case domain.AlertResolved:
				stored, err := scanAlert(x.QueryRow(qAlertResolve, a.ResolvedAt.UnixNano(), a.Resolution, a.Key))
				if s.b.IsNoRows(err) {
					continue // nothing fires under that key
				}
				if err != nil {
					return s.err("resolve alert", err)
				}
				a = stored
			}
			at := a.FiredAt
			if a.State == domain.AlertResolved {
				at = a.ResolvedAt
			}
			for _, ch := range t.Notify {
				if err := x.Queue("queue alert notification", qNotificationQueue, a.ID, ch, string(a.State), at.UnixNano()); err != nil {
					return err
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
func (s Shared) ListAlerts(ctx context.Context, f store.AlertFilter) ([]domain.Alert, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	return queryAll(ctx, s, "list alerts", func(row Row) (domain.Alert, error) { return scanAlert(row) }, qAlertList, string(f.State), string(f.State), f.JobID, f.JobID, limit)
}

// PendingNotifications returns undelivered notifications, oldest first.
func (s Shared) PendingNotifications(ctx context.Context, limit int) ([]domain.AlertNotification, error) {
	r, err := s.b.Reader()
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 100
	}
	var out []domain.AlertNotification
	if err := r.Query(ctx, func(row Row) error {
		var (
			n       domain.AlertNotification
			status  string
			created int64
		)
		a, err := scanAlert(row, &n.ID, &n.Channel, &status, &created, &n.Tries, &n.LastError)
		if err != nil {
			return err
		}
		n.Alert, n.Status, n.CreatedAt = a, domain.AlertState(status), time.Unix(0, created).UTC()
		out = append(out, n)
		return nil
	}, qNotificationsPending, limit); err != nil {
		return nil, s.err("list alert notifications", err)
	}
	return out, nil
}

// MarkNotification records one delivery try.
func (s Shared) MarkNotification(ctx context.Context, alertID int64, channel string, status domain.AlertState, r store.NotificationResult) error {
	return s.b.Write(ctx, func(x Exec) error {
		var (
			n   int64
			err error
		)
		if r.Sent {
			n, err = x.Exec(qNotificationSent, r.At.UnixNano(), alertID, channel, string(status))
		} else {
			n, err = x.Exec(qNotificationFailed, r.Error, BoolArg(r.GiveUp), alertID, channel, string(status))
		}
		if err != nil {
			return s.err("mark alert notification", err)
		}
		if n == 0 {
			return fmt.Errorf("mark alert notification: alert %d owes channel %q no %s notification: %w", alertID, channel, status, store.ErrNotFound)
		}
		return nil
	})
}

// GetAlert returns one alert.
func (s Shared) GetAlert(ctx context.Context, id int64) (domain.Alert, error) {
	r, err := s.b.Reader()
	if err != nil {
		return domain.Alert{}, err
	}
	a, err := scanAlert(r.QueryRow(ctx, qAlertGet, id))
	if s.b.IsNoRows(err) {
		return a, fmt.Errorf("get alert: no alert %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return a, s.err("get alert", err)
	}
	return a, nil
}

// AckAlert acknowledges a firing alert and gives up its undelivered
// firing notifications.
func (s Shared) AckAlert(ctx context.Context, id int64, by, reason string, at time.Time, audit domain.AuditRecord) (domain.Alert, error) {
	var out domain.Alert
	err := s.b.Write(ctx, func(x Exec) error {
		a, err := scanAlert(x.QueryRow(qAlertGetLock, id))
		if s.b.IsNoRows(err) {
			return fmt.Errorf("acknowledge alert: no alert %d: %w", id, store.ErrNotFound)
		}
		if err != nil {
			return s.err("acknowledge alert", err)
		}
		if err := ackable(a); err != nil {
			return err
		}
		if _, err := x.Exec(qAlertAck, at.UnixNano(), by, reason, id); err != nil {
			return s.err("acknowledge alert", err)
		}
		if _, err := x.Exec(qAlertAckGiveUp, id); err != nil {
			return s.err("acknowledge alert", err)
		}
		a.AckedAt, a.AckedBy, a.AckReason = at.UTC(), by, reason
		out = a
		return nil
	}, audit)
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
