package service_test

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store"
	"trainyard/internal/store/sqlite"
)

// recordingAcks is the server's Alerter as the service sees it: it
// remembers the keys it was told were acknowledged.
type recordingAcks struct{ keys []string }

func (r *recordingAcks) Channels() []string                 { return nil }
func (r *recordingAcks) Test(context.Context, string) error { return nil }
func (r *recordingAcks) Acknowledged(key string)            { r.keys = append(r.keys, key) }

// Whoever may cancel the alert's job acknowledges it; others may not, and
// those who may not read the job do not learn the alert exists. The
// acknowledgement is audited and reaches the Alerter.
func TestAckAlert(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	acks := &recordingAcks{}
	svc := service.New(service.Config{Store: st, Alerts: acks})
	stored, err := st.RecordAlerts(ctx, []store.AlertTransition{{Alert: domain.Alert{Key: "start_failure/job=5", Rule: "start_failure",
		Severity: "critical", State: domain.AlertFiring, Summary: "job 5 failed to start", JobID: 5, Attempt: 1,
		Project: "vision", Owner: "alice", FiredAt: time.Now()}}})
	if err != nil || len(stored) != 1 {
		t.Fatalf("record: %+v, %v", stored, err)
	}
	id := stored[0].ID
	outsider := service.Principal{Subject: "eve", Projects: []domain.ProjectRole{{Project: "audio", Role: domain.RoleMember}}}
	if _, err := svc.Alerts.AckAlert(ctx, outsider, id, ""); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("ack by someone who may not read the job: %v, want not found", err)
	}
	viewer := service.Principal{Subject: "val", Projects: []domain.ProjectRole{{Project: "vision", Role: domain.RoleViewer}}}
	if _, err := svc.Alerts.AckAlert(ctx, viewer, id, ""); !errors.Is(err, domain.ErrForbidden) {
		t.Fatalf("ack by a viewer of the project: %v, want forbidden", err)
	}
	if _, err := svc.Alerts.AckAlert(ctx, admin, id+1, ""); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("ack of a missing alert: %v, want not found", err)
	}
	owner := service.Principal{Subject: "alice", Projects: []domain.ProjectRole{{Project: "vision", Role: domain.RoleMember}}}
	a, err := svc.Alerts.AckAlert(ctx, owner, id, "  fixing the image  ")
	if err != nil {
		t.Fatal(err)
	}
	if a.AckedBy != "user:alice" || a.AckReason != "fixing the image" || a.AckedAt.IsZero() {
		t.Fatalf("acknowledged = %+v", a)
	}
	if len(acks.keys) != 1 || acks.keys[0] != "start_failure/job=5" {
		t.Errorf("the Alerter was told %v, want the alert's key", acks.keys)
	}
	if _, err := svc.Alerts.AckAlert(ctx, admin, id, ""); !errors.Is(err, domain.ErrConflict) {
		t.Fatalf("second ack: %v, want conflict", err)
	}
	recs, err := st.ListAudit(ctx, store.AuditFilter{Action: "alert.ack"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Actor != "user:alice" || recs[0].Target != "alert/"+strconv.FormatInt(id, 10) || recs[0].Result != domain.AuditOK {
		t.Fatalf("audit records of alert.ack = %+v, want alice's one", recs)
	}
}
