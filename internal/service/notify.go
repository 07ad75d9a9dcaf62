package service

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/jobspec"
)

// NotifyService keeps users' default job-end notifications: what applies
// to their jobs whose spec has no notify section.
type NotifyService struct {
	*core
	st NotifyStore
}

// NotifyStore is what the notification use cases read and write.
type NotifyStore interface {
	PutNotifyPref(ctx context.Context, p domain.NotifyPref, audit domain.AuditRecord) error
	GetNotifyPref(ctx context.Context, user string) (domain.NotifyPref, error)
	DeleteNotifyPref(ctx context.Context, user string, audit domain.AuditRecord) error
}

// NotifyTargets says where the server can send job-end notifications
// (package alerting's Notifier): its channels and whether it has a mail
// relay.
type NotifyTargets interface {
	Channels() []string
	Email() bool
}

// notifyUser returns whose default a call is about: user, or the caller
// when empty; and authorizes it (one's own; admins anyone's).
func (s *NotifyService) notifyUser(ctx context.Context, p Principal, user string) (string, error) {
	if user == "" {
		user = p.Subject
	}
	if user == "" {
		return "", domain.Errorf(domain.ErrInvalid, "this token names no user; notification defaults belong to users")
	}
	if err := s.authorize(ctx, p, authz.NotifyWrite, authz.Resource{Kind: "notify", ID: user, Owner: user}); err != nil {
		return "", err
	}
	return user, nil
}

// GetNotifyPref returns the default notification of user ("": the
// caller); ErrNotFound when there is none.
func (s *NotifyService) GetNotifyPref(ctx context.Context, p Principal, user string) (domain.NotifyPref, error) {
	user, err := s.notifyUser(ctx, p, user)
	if err != nil {
		return domain.NotifyPref{}, err
	}
	pref, err := s.st.GetNotifyPref(ctx, user)
	if errors.Is(err, domain.ErrNotFound) {
		return domain.NotifyPref{}, domain.Errorf(domain.ErrNotFound, "%s has no default notification; set one with: trainyard notify set --on failed --email ADDRESS", user)
	}
	return pref, err
}

// SetNotifyPref sets the default notification of user ("": the caller)
// after checking it as a spec's notify section is checked at submit. It
// is audited (notify.set).
func (s *NotifyService) SetNotifyPref(ctx context.Context, p Principal, user string, n domain.Notify) (domain.NotifyPref, error) {
	user, err := s.notifyUser(ctx, p, user)
	if err != nil {
		return domain.NotifyPref{}, err
	}
	errs := jobspec.NotifyErrors("", n)
	errs = append(errs, s.notifyTargetErrors("", n)...)
	if err := errs.Err(); err != nil {
		return domain.NotifyPref{}, err
	}
	pref := domain.NotifyPref{User: user, Notify: n, UpdatedAt: s.cfg.Clock.Now()}
	rec := domain.AuditRecord{At: pref.UpdatedAt, Actor: p.Actor(), Action: "notify.set", Target: "user/" + user,
		After: summary(n), Result: domain.AuditOK, Client: ClientFrom(ctx)}
	if err := s.st.PutNotifyPref(ctx, pref, rec); err != nil {
		return domain.NotifyPref{}, err
	}
	return pref, nil
}

// ClearNotifyPref removes the default notification of user ("": the
// caller); ErrNotFound when there is none. It is audited (notify.clear).
func (s *NotifyService) ClearNotifyPref(ctx context.Context, p Principal, user string) error {
	user, err := s.notifyUser(ctx, p, user)
	if err != nil {
		return err
	}
	rec := domain.AuditRecord{At: s.cfg.Clock.Now(), Actor: p.Actor(), Action: "notify.clear", Target: "user/" + user,
		Result: domain.AuditOK, Client: ClientFrom(ctx)}
	err = s.st.DeleteNotifyPref(ctx, user, rec)
	if errors.Is(err, domain.ErrNotFound) {
		return domain.Errorf(domain.ErrNotFound, "%s has no default notification to clear", user)
	}
	return err
}

// checkSpecNotify reports, as field errors, the channels a spec's notify
// section names that the server does not have, and addresses on a server
// without a mail relay.
func (c *core) checkSpecNotify(spec domain.Spec) error {
	if spec.Notify == nil {
		return nil
	}
	return c.notifyTargetErrors("notify", *spec.Notify).Err()
}

// notifyTargetErrors checks n's channels and addresses against what the
// server can send to; prefix is the field path of n ("" for none).
func (c *core) notifyTargetErrors(prefix string, n domain.Notify) domain.FieldErrors {
	var errs domain.FieldErrors
	at := func(f string, i int) string {
		if prefix == "" {
			return fmt.Sprintf("%s[%d]", f, i)
		}
		return fmt.Sprintf("%s.%s[%d]", prefix, f, i)
	}
	var channels []string
	email := false
	if c.cfg.Notify != nil {
		channels, email = c.cfg.Notify.Channels(), c.cfg.Notify.Email()
	}
	for i, ch := range n.Channels {
		if !slices.Contains(channels, ch) {
			known := "none is configured (an admin adds them under alerts.channels in the server config)"
			if len(channels) > 0 {
				known = "configured channels: " + strings.Join(channels, ", ")
			}
			errs.Add(at("channels", i), "no channel named %q; %s", ch, known)
		}
	}
	if len(n.Email) > 0 && !email {
		errs.Add(at("email", 0), "this server cannot send e-mail: it has no mail relay (an admin sets alerts.smtp in the server config); use channels instead")
	}
	return errs
}
