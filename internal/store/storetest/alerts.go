package storetest

import (
	"context"
	"errors"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// alertTests are the subtests of the Alerts contract.
var alertTests = map[string]func(t *testing.T, s store.Store){
	"AlertsFireResolveOnce": testAlertsFireResolveOnce,
	"AlertsOutbox":          testAlertsOutbox,
	"AlertsInvalidRejected": testAlertsInvalid,
	"AlertsAcknowledge":     testAlertsAcknowledge,
}

func firing(key string, job int64, n int) domain.Alert {
	return domain.Alert{Key: key, Rule: "stalled", Severity: "critical", State: domain.AlertFiring,
		Summary: "job stalled", JobID: job, Attempt: 1, Project: "vision", Pool: "standard", Owner: "alice", FiredAt: at(n)}
}

func resolved(key string, n int) domain.Alert {
	return domain.Alert{Key: key, Rule: "stalled", State: domain.AlertResolved, ResolvedAt: at(n)}
}

func testAlertsFireResolveOnce(t *testing.T, s store.Store) {
	ctx := context.Background()
	got, err := s.RecordAlerts(ctx, []store.AlertTransition{{Alert: firing("stalled/job=1", 1, 1)}, {Alert: firing("stalled/job=1", 1, 2)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID == 0 || got[0].State != domain.AlertFiring || !got[0].FiredAt.Equal(at(1)) {
		t.Fatalf("firing twice under one key stored %+v, want one firing alert", got)
	}
	first := got[0]
	// Resolving a key that does not fire changes nothing.
	if got, err := s.RecordAlerts(ctx, []store.AlertTransition{{Alert: resolved("stalled/job=9", 3)}}); err != nil || len(got) != 0 {
		t.Fatalf("resolve of an unknown key: %+v, %v", got, err)
	}
	got, err = s.RecordAlerts(ctx, []store.AlertTransition{{Alert: resolved("stalled/job=1", 3)}, {Alert: resolved("stalled/job=1", 4)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != first.ID || got[0].State != domain.AlertResolved || !got[0].ResolvedAt.Equal(at(3)) ||
		got[0].Summary != first.Summary || got[0].Owner != "alice" {
		t.Fatalf("resolve stored %+v, want alert %d resolved at %v with its fields", got, first.ID, at(3))
	}
	// The key may fire again once resolved: a new alert.
	got, err = s.RecordAlerts(ctx, []store.AlertTransition{{Alert: firing("stalled/job=1", 1, 5)}})
	if err != nil || len(got) != 1 || got[0].ID == first.ID {
		t.Fatalf("refire: %+v, %v; want a new alert", got, err)
	}
	all, err := s.ListAlerts(ctx, store.AlertFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 || all[0].ID != got[0].ID || all[1].ID != first.ID || all[1].State != domain.AlertResolved {
		t.Fatalf("ListAlerts = %+v, want the new firing alert then the resolved one", all)
	}
	fir, err := s.ListAlerts(ctx, store.AlertFilter{State: domain.AlertFiring})
	if err != nil || len(fir) != 1 || fir[0].ID != got[0].ID {
		t.Fatalf("firing filter: %+v, %v", fir, err)
	}
	byJob, err := s.ListAlerts(ctx, store.AlertFilter{JobID: 2})
	if err != nil || len(byJob) != 0 {
		t.Fatalf("job filter: %+v, %v", byJob, err)
	}
}

func testAlertsOutbox(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.RecordAlerts(ctx, []store.AlertTransition{
		{Alert: firing("stalled/job=1", 1, 1), Notify: []string{"ops", "log"}},
		{Alert: firing("stalled/job=1", 1, 2), Notify: []string{"ops"}}, // deduplicated: no notification
	}); err != nil {
		t.Fatal(err)
	}
	pend, err := s.PendingNotifications(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(pend) != 2 || pend[0].Channel != "ops" || pend[1].Channel != "log" || pend[0].Status != domain.AlertFiring ||
		pend[0].Alert.Key != "stalled/job=1" || pend[0].Alert.Owner != "alice" {
		t.Fatalf("pending = %+v, want ops then log for the firing alert", pend)
	}
	if err := s.MarkNotification(ctx, pend[0].Alert.ID, pend[0].Channel, pend[0].Status, store.NotificationResult{At: at(2), Error: "webhook answered 500"}); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkNotification(ctx, pend[1].Alert.ID, pend[1].Channel, pend[1].Status, store.NotificationResult{At: at(2), Sent: true}); err != nil {
		t.Fatal(err)
	}
	pend, err = s.PendingNotifications(ctx, 0)
	if err != nil || len(pend) != 1 || pend[0].Channel != "ops" || pend[0].Tries != 1 || pend[0].LastError != "webhook answered 500" {
		t.Fatalf("after one failure and one delivery: %+v, %v", pend, err)
	}
	if err := s.MarkNotification(ctx, pend[0].Alert.ID, pend[0].Channel, pend[0].Status, store.NotificationResult{At: at(3), Error: "timeout", GiveUp: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RecordAlerts(ctx, []store.AlertTransition{{Alert: resolved("stalled/job=1", 4), Notify: []string{"ops"}}}); err != nil {
		t.Fatal(err)
	}
	pend, err = s.PendingNotifications(ctx, 10)
	if err != nil || len(pend) != 1 || pend[0].Status != domain.AlertResolved || pend[0].Alert.State != domain.AlertResolved {
		t.Fatalf("after giving up and resolving: %+v, %v; want only the resolution", pend, err)
	}
	if err := s.MarkNotification(ctx, 1<<40, "ops", domain.AlertFiring, store.NotificationResult{Sent: true}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("marking a missing notification: %v, want ErrNotFound", err)
	}
}

func testAlertsInvalid(t *testing.T, s store.Store) {
	ctx := context.Background()
	bad := firing("", 1, 1)
	if _, err := s.RecordAlerts(ctx, []store.AlertTransition{{Alert: firing("ok/1", 1, 1)}, {Alert: bad}}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("alert without key: %v, want ErrInvalid", err)
	}
	if all, err := s.ListAlerts(ctx, store.AlertFilter{}); err != nil || len(all) != 0 {
		t.Fatalf("a rejected batch stored %+v, %v", all, err)
	}
}

func testAlertsAcknowledge(t *testing.T, s store.Store) {
	ctx := context.Background()
	got, err := s.RecordAlerts(ctx, []store.AlertTransition{{Alert: firing("start_failure/job=1", 1, 1), Notify: []string{"ops", "log"}}})
	if err != nil || len(got) != 1 {
		t.Fatalf("fire: %+v, %v", got, err)
	}
	id := got[0].ID
	pend, err := s.PendingNotifications(ctx, 0)
	if err != nil || len(pend) != 2 {
		t.Fatalf("pending = %+v, %v", pend, err)
	}
	if err := s.MarkNotification(ctx, id, "log", domain.AlertFiring, store.NotificationResult{At: at(2), Sent: true}); err != nil {
		t.Fatal(err)
	}
	a, err := s.AckAlert(ctx, id, "alice", "known: fixing the image", at(3), setupAudit)
	if err != nil {
		t.Fatal(err)
	}
	if a.ID != id || a.State != domain.AlertFiring || !a.AckedAt.Equal(at(3)) || a.AckedBy != "alice" || a.AckReason != "known: fixing the image" {
		t.Fatalf("acknowledged alert = %+v", a)
	}
	if stored, err := s.GetAlert(ctx, id); err != nil || stored.AckedBy != "alice" || !stored.AckedAt.Equal(at(3)) || stored.Key != a.Key {
		t.Fatalf("GetAlert after the acknowledgement = %+v, %v", stored, err)
	}
	if list, err := s.ListAlerts(ctx, store.AlertFilter{}); err != nil || len(list) != 1 || list[0].AckedBy != "alice" {
		t.Fatalf("ListAlerts after the acknowledgement = %+v, %v", list, err)
	}
	// The firing notification still owed is not sent any more.
	if pend, err := s.PendingNotifications(ctx, 0); err != nil || len(pend) != 0 {
		t.Fatalf("pending after the acknowledgement = %+v, %v; want none", pend, err)
	}
	if _, err := s.AckAlert(ctx, id, "bob", "", at(4), setupAudit); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second acknowledgement: %v, want ErrConflict", err)
	}
	// Its resolution is still notified.
	if _, err := s.RecordAlerts(ctx, []store.AlertTransition{{Alert: resolved("start_failure/job=1", 5), Notify: []string{"ops"}}}); err != nil {
		t.Fatal(err)
	}
	if pend, err := s.PendingNotifications(ctx, 0); err != nil || len(pend) != 1 || pend[0].Status != domain.AlertResolved || pend[0].Alert.AckedBy != "alice" {
		t.Fatalf("pending after the resolution = %+v, %v; want the resolution", pend, err)
	}
	if _, err := s.AckAlert(ctx, id, "bob", "", at(6), setupAudit); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("acknowledging a resolved alert: %v, want ErrConflict", err)
	}
	if _, err := s.AckAlert(ctx, id+100, "bob", "", at(6), setupAudit); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("acknowledging a missing alert: %v, want ErrNotFound", err)
	}
	if _, err := s.GetAlert(ctx, id+100); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetAlert of a missing alert: %v, want ErrNotFound", err)
	}
}
