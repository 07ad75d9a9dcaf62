package service_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"trainyard/internal/clock"
	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite/sqlitetest"
)

// notifyTargets is the server's Notifier as the service sees it.
type notifyTargets struct {
	channels []string
	email    bool
}

func (n notifyTargets) Channels() []string { return n.channels }
func (n notifyTargets) Email() bool        { return n.email }

func newNotifyEnv(t *testing.T, targets service.NotifyTargets) (*service.Service, store.Store) {
	t.Helper()
	dir := t.TempDir()
	st := sqlitetest.Open(t, dir)
	svc := service.New(service.Config{Store: st, Notify: targets, ArtifactsRoot: filepath.Join(dir, "artifacts"),
		Clock: clock.NewFake(time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC))})
	pool := domain.Pool{Name: "default", Nodes: []domain.Node{{Name: "n1", CPUs: 8, Memory: 32 << 30}}}
	if _, _, err := svc.Pools.PutPool(context.Background(), admin, pool); err != nil {
		t.Fatal(err)
	}
	return svc, st
}

// A spec's notify section may name only the channels the server has, and
// addresses only when it has a mail relay; the errors name the field and
// the channels there are.
func TestSubmitChecksNotifyTargets(t *testing.T) {
	ctx := context.Background()
	spec := "name: n\nproject: vision\nentrypoint: [\"true\"]\nnotify: {channels: [team, nope], email: [me@example.com]}\n"
	svc, _ := newNotifyEnv(t, notifyTargets{channels: []string{"ops", "team"}})
	_, _, err := svc.Jobs.Submit(ctx, admin, service.SubmitInput{Doc: []byte(spec)})
	var fe domain.FieldErrors
	if !errors.As(err, &fe) || len(fe) != 2 || fe[0].Path != "notify.channels[1]" || !strings.Contains(fe[0].Message, "configured channels: ops, team") ||
		fe[1].Path != "notify.email[0]" || !strings.Contains(fe[1].Message, "alerts.smtp") {
		t.Fatalf("Submit = %v, want errors on notify.channels[1] naming ops and team, and on notify.email[0]", err)
	}
	svc, _ = newNotifyEnv(t, notifyTargets{channels: []string{"team", "nope"}, email: true})
	j, _, err := svc.Jobs.Submit(ctx, admin, service.SubmitInput{Doc: []byte(spec)})
	if err != nil {
		t.Fatal(err)
	}
	if j.Spec.Notify == nil || !slices.Equal(j.Spec.Notify.Channels, []string{"team", "nope"}) {
		t.Fatalf("stored notify = %+v", j.Spec.Notify)
	}
	// A server without a notifier refuses any notify section.
	svc, _ = newNotifyEnv(t, nil)
	if _, _, err := svc.Jobs.Submit(ctx, admin, service.SubmitInput{Doc: []byte(spec)}); !errors.As(err, &fe) ||
		!strings.Contains(fe[0].Message, "none is configured") {
		t.Fatalf("Submit without a notifier = %v", err)
	}
}

// Users set, show and clear their own default; admins anyone's; others
// not. Each change is audited.
func TestNotifyPrefs(t *testing.T) {
	ctx := context.Background()
	svc, st := newNotifyEnv(t, notifyTargets{channels: []string{"team"}, email: true})
	alice := service.Principal{Subject: "alice", Projects: []domain.ProjectRole{{Project: "vision", Role: domain.RoleMember}}}
	if _, err := svc.Notify.GetNotifyPref(ctx, alice, ""); !errors.Is(err, domain.ErrNotFound) || !strings.Contains(err.Error(), "trainyard notify set") {
		t.Fatalf("get before set: %v, want not found with the way to set one", err)
	}
	_, err := svc.Notify.SetNotifyPref(ctx, alice, "", domain.Notify{On: []domain.JobState{"done"}, Channels: []string{"gone"}, Email: []string{"x"}})
	if got := fieldPaths(t, err); !slices.Equal(got, []string{"on[0]", "email[0]", "channels[0]"}) {
		t.Fatalf("bad default: field errors %v (%v)", got, err)
	}
	want := domain.Notify{On: []domain.JobState{domain.JobFailed}, Channels: []string{"team"}, Email: []string{"alice@example.com"}}
	if _, err := svc.Notify.SetNotifyPref(ctx, alice, "", want); err != nil {
		t.Fatal(err)
	}
	got, err := svc.Notify.GetNotifyPref(ctx, alice, "alice")
	if err != nil || got.User != "alice" || !slices.Equal(got.Notify.Email, want.Email) || got.UpdatedAt.IsZero() {
		t.Fatalf("get = %+v, %v", got, err)
	}
	bob := service.Principal{Subject: "bob", Projects: []domain.ProjectRole{{Project: "vision", Role: domain.RoleLead}}}
	if _, err := svc.Notify.GetNotifyPref(ctx, bob, "alice"); !errors.Is(err, domain.ErrForbidden) {
		t.Fatalf("bob reads alice's default: %v, want forbidden", err)
	}
	if err := svc.Notify.ClearNotifyPref(ctx, bob, "alice"); !errors.Is(err, domain.ErrForbidden) {
		t.Fatalf("bob clears alice's default: %v, want forbidden", err)
	}
	if err := svc.Notify.ClearNotifyPref(ctx, admin, "alice"); err != nil {
		t.Fatal(err)
	}
	if err := svc.Notify.ClearNotifyPref(ctx, alice, ""); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("second clear: %v, want not found", err)
	}
	recs, err := st.ListAudit(ctx, store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, r := range recs {
		if strings.HasPrefix(r.Action, "notify.") && r.Result == domain.AuditOK {
			actions = append(actions, r.Action+" "+r.Actor+" "+r.Target)
		}
	}
	if w := []string{"notify.set user:alice user/alice", "notify.clear user:admin user/alice"}; !slices.Equal(actions, w) {
		t.Fatalf("audited %v, want %v", actions, w)
	}
}
