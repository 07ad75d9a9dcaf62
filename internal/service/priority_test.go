package service_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store"
)

const prioSpec = "name: prio\nentrypoint: [\"true\"]\nresources: {cpus: 1, memory: 1GiB}\n"

// A waiting job's priority changes within the project's ceiling, audited
// with before and after and recorded in its events; the spec keeps the
// submitted class.
func TestSetPriority(t *testing.T) {
	ctx := context.Background()
	e := newAuditEnv(t)
	if _, err := e.svc.Pools.SetQuota(ctx, admin, domain.Quota{Project: "default", Pool: "default",
		Guaranteed: domain.Limits{CPUs: 8}, MaxPriority: domain.PriorityHigh}); err != nil {
		t.Fatal(err)
	}
	alice := service.Principal{Subject: "alice", Projects: []domain.ProjectRole{{Project: "default", Role: domain.RoleMember}}}
	val := service.Principal{Subject: "val", Projects: []domain.ProjectRole{{Project: "default", Role: domain.RoleViewer}}}
	job := submitJob(t, e.svc, alice, prioSpec)

	got, err := e.svc.Jobs.SetPriority(ctx, alice, job.ID, domain.PriorityHigh)
	if err != nil {
		t.Fatalf("SetPriority(high): %v", err)
	}
	if got.Priority != domain.PriorityHigh || got.Spec.Policy.Priority != domain.PriorityNormal {
		t.Errorf("after the change: job priority %s, spec priority %s; want high, normal (the snapshot keeps it)", got.Priority, got.Spec.Policy.Priority)
	}
	recs := e.records(t, "job.priority")
	if len(recs) != 1 || recs[0].Actor != "user:alice" || !strings.Contains(recs[0].Before, `"normal"`) || !strings.Contains(recs[0].After, `"high"`) {
		t.Fatalf("audit of the change = %+v; want one by alice from normal to high", recs)
	}
	d, err := e.st.JobDetail(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	last := d.Events[len(d.Events)-1]
	if last.Reason != domain.ReasonPriorityChanged || last.Message != "priority normal → high by alice" || last.From != domain.JobQueued || last.To != domain.JobQueued {
		t.Errorf("last event = %+v; want queued → queued PriorityChanged \"priority normal → high by alice\"", last)
	}

	// The same class again changes nothing and audits nothing.
	if _, err := e.svc.Jobs.SetPriority(ctx, alice, job.ID, domain.PriorityHigh); err != nil {
		t.Fatal(err)
	}
	if n := len(e.records(t, "job.priority")); n != 1 {
		t.Errorf("setting the same class audited: %d records", n)
	}

	// Beyond the ceiling, an unknown class, a viewer: refused,
	// and nothing changes.
	_, err = e.svc.Jobs.SetPriority(ctx, alice, job.ID, domain.PriorityUrgent)
	var fe domain.FieldErrors
	if !errors.As(err, &fe) || fe[0].Path != "priority" || !strings.Contains(fe[0].Message, "at most high") {
		t.Errorf("urgent above the quota's max priority high: %v; want a field error on priority naming the ceiling", err)
	}
	if _, err := e.svc.Jobs.SetPriority(ctx, alice, job.ID, "top"); !errors.As(err, &fe) || fe[0].Path != "priority" {
		t.Errorf("unknown class: %v; want a field error on priority", err)
	}
	if _, err := e.svc.Jobs.SetPriority(ctx, val, job.ID, domain.PriorityLow); !errors.Is(err, domain.ErrForbidden) {
		t.Errorf("a viewer changes alice's job: %v; want forbidden", err)
	}
	if j, _ := e.st.GetJob(ctx, job.ID); j.Priority != domain.PriorityHigh {
		t.Errorf("refused changes left priority %s, want high", j.Priority)
	}

	// A held job changes; a started one does not, and says why.
	if _, err := e.svc.Jobs.Hold(ctx, alice, job.ID, ""); err != nil {
		t.Fatal(err)
	}
	if got, err := e.svc.Jobs.SetPriority(ctx, alice, job.ID, domain.PriorityLow); err != nil || got.Priority != domain.PriorityLow || got.State != domain.JobHeld {
		t.Errorf("SetPriority of a held job: %v, %v; want low and still held", got.Priority, err)
	}
	if _, err := e.svc.Jobs.Release(ctx, alice, job.ID); err != nil {
		t.Fatal(err)
	}
	errs, err := e.st.Apply(ctx, []store.Change{{JobID: job.ID, Move: domain.MoveStart(), At: e.clk.Now(),
		Attempt: &store.AttemptChange{Number: 1, Create: true, To: domain.AttemptStarting, Node: "n1"}}})
	if err != nil || errs[0] != nil {
		t.Fatalf("start: %v %v", err, errs)
	}
	_, err = e.svc.Jobs.SetPriority(ctx, alice, job.ID, domain.PriorityHigh)
	if !errors.Is(err, domain.ErrConflict) || !strings.Contains(err.Error(), "only affects the scheduling of waiting") {
		t.Errorf("SetPriority of a starting job: %v; want a conflict saying it only affects waiting jobs", err)
	}
}
