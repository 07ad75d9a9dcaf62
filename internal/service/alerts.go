package service

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// AlertService lists, acknowledges and tests alerts.
type AlertService struct {
	*core
	st AlertStore
}

// AlertStore is what the alert use cases read and write.
type AlertStore interface {
	AckAlert(ctx context.Context, id int64, by, reason string, at time.Time, audit domain.AuditRecord) (domain.Alert, error)
	GetAlert(ctx context.Context, id int64) (domain.Alert, error)
	ListAlerts(ctx context.Context, f store.AlertFilter) ([]domain.Alert, error)
}

var _ AlertStore = store.Store(nil)

// AlertChannels sends test notifications (package alerting's Alerter).
type AlertChannels interface {
	Channels() []string
	Test(ctx context.Context, channel string) error
}

// ErrDelivery marks a notification a channel did not accept.
var ErrDelivery = errors.New("alert delivery failed")

// AlertListOptions filters ListAlerts.
type AlertListOptions struct {
	State domain.AlertState // "": any
	JobID int64             // 0: any
	Limit int               // 1–1000; 0: 100
}

// ListAlerts returns alerts newest first: every alert for admins, auditors
// and resource admins; for others the alerts about jobs they may read.
func (s *AlertService) ListAlerts(ctx context.Context, p Principal, o AlertListOptions) ([]domain.Alert, error) {
	var errs domain.FieldErrors
	if o.State != "" && o.State != domain.AlertFiring && o.State != domain.AlertResolved {
		errs.Add("state", "unknown alert state %q; use firing or resolved", o.State)
	}
	if o.Limit < 0 || o.Limit > 1000 {
		errs.Add("limit", "must be between 1 and 1000")
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	if err := s.authorize(ctx, p, authz.JobRead, authz.Resource{Kind: "job"}); err != nil {
		return nil, err
	}
	if o.Limit == 0 {
		o.Limit = 100
	}
	v := authz.VisibleJobs(p)
	f := store.AlertFilter{State: o.State, JobID: o.JobID, Limit: o.Limit}
	if !v.All {
		f.Limit = 10 * o.Limit // filtered below; a page may come out short
	}
	all, err := s.st.ListAlerts(ctx, f)
	if err != nil {
		return nil, err
	}
	if v.All {
		return all, nil
	}
	out := all[:0]
	for _, a := range all {
		if (a.Owner != "" && a.Owner == v.Submitter) || slices.Contains(v.Projects, a.Project) {
			out = append(out, a)
		}
	}
	return out[:min(len(out), o.Limit)], nil
}

// TestAlertChannel sends a test notification to one channel (admins only).
func (s *AlertService) TestAlertChannel(ctx context.Context, p Principal, channel string) error {
	if err := s.authorize(ctx, p, authz.AlertTest, authz.Resource{Kind: "alert", ID: channel}); err != nil {
		return err
	}
	if s.cfg.Alerts == nil {
		return domain.Errorf(domain.ErrNotFound, "alerting is not running on this server, so channel %q cannot be tested", channel)
	}
	if !slices.Contains(s.cfg.Alerts.Channels(), channel) {
		var errs domain.FieldErrors
		errs.Add("channel", "no alert channel named %q; configured channels: %s", channel, joinOr(s.cfg.Alerts.Channels()))
		return errs.Err()
	}
	if err := s.cfg.Alerts.Test(ctx, channel); err != nil {
		return errors.Join(ErrDelivery, err)
	}
	return nil
}

// AlertAcknowledger is told about acknowledged alerts, so that their
// notifications still queued are dropped (package alerting's Alerter
// implements it alongside AlertChannels).
type AlertAcknowledger interface {
	Acknowledged(key string)
}

// maxAckReason bounds an acknowledgement's reason, in bytes.
const maxAckReason = 1000

// AckAlert acknowledges a firing alert: it is shown as acknowledged and
// not notified again (its resolution still is). Whoever may cancel the
// alert's job may acknowledge it (admins any alert); the acknowledgement
// is audited (alert.ack).
func (s *AlertService) AckAlert(ctx context.Context, p Principal, id int64, reason string) (domain.Alert, error) {
	reason = strings.TrimSpace(reason)
	var errs domain.FieldErrors
	if len(reason) > maxAckReason || !utf8.ValidString(reason) {
		errs.Add("reason", "must be valid UTF-8 of at most %d bytes", maxAckReason)
	}
	if err := errs.Err(); err != nil {
		return domain.Alert{}, err
	}
	missing := domain.Errorf(domain.ErrNotFound, "alert %d does not exist; list alerts with: trainyard alerts ls", id)
	a, err := s.st.GetAlert(ctx, id)
	if errors.Is(err, domain.ErrNotFound) {
		return domain.Alert{}, missing
	}
	if err != nil {
		return domain.Alert{}, err
	}
	if a.JobID != 0 {
		job := authz.Resource{Kind: "job", ID: strconv.FormatInt(a.JobID, 10), Project: a.Project, Owner: a.Owner}
		if !authz.Decide(p, authz.JobRead, job).Allow {
			return domain.Alert{}, missing // as ListAlerts: alerts about jobs one may not read are not shown
		}
		err = s.authorize(ctx, p, authz.JobCancel, job)
	} else {
		err = s.authorize(ctx, p, authz.AlertTest, authz.Resource{Kind: "alert", ID: strconv.FormatInt(id, 10)})
	}
	if err != nil {
		return domain.Alert{}, err
	}
	now := s.cfg.Clock.Now()
	rec := domain.AuditRecord{At: now, Actor: p.Actor(), Action: "alert.ack",
		Target: "alert/" + strconv.FormatInt(id, 10), Before: summary(map[string]string{"key": a.Key, "state": string(a.State)}),
		After: summary(map[string]string{"reason": reason}), Result: domain.AuditOK, Client: ClientFrom(ctx)}
	out, err := s.st.AckAlert(ctx, id, p.Actor(), reason, now, rec)
	if err != nil {
		return domain.Alert{}, err
	}
	if ack, ok := s.cfg.Alerts.(AlertAcknowledger); ok {
		ack.Acknowledged(out.Key)
	}
	return out, nil
}

func joinOr(names []string) string {
	if len(names) == 0 {
		return "none (add them under alerts.channels in the server config)"
	}
	return strings.Join(names, ", ")
}
