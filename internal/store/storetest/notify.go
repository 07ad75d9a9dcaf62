package storetest

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// notifyTests are the subtests of the Notifications contract.
var notifyTests = map[string]func(t *testing.T, s store.Store){
	"NotifyPrefs":       testNotifyPrefs,
	"NotifyJobEnds":     testNotifyJobEnds,
	"NotifyOutbox":      testNotifyOutbox,
	"NotifyBadTargets":  testNotifyBadTargets,
	"NotifyEndsOfJobs":  testNotifyEndsOfJobs,
	"NotifyResolveMany": testNotifyResolveMany,
}

func testNotifyPrefs(t *testing.T, s store.Store) {
	ctx := context.Background()
	if _, err := s.GetNotifyPref(ctx, "alice"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetNotifyPref of a user without one: %v, want ErrNotFound", err)
	}
	p := domain.NotifyPref{User: "alice", UpdatedAt: at(1), Notify: domain.Notify{
		On: []domain.JobState{domain.JobFailed}, Channels: []string{"team-slack"}, Email: []string{"alice@example.com"}}}
	if err := s.PutNotifyPref(ctx, p, setupAudit); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetNotifyPref(ctx, "alice")
	if err != nil || !reflect.DeepEqual(got, p) {
		t.Fatalf("GetNotifyPref = %+v, %v; want %+v", got, err, p)
	}
	p.Notify = domain.Notify{Email: []string{"a2@example.com"}}
	p.UpdatedAt = at(2)
	if err := s.PutNotifyPref(ctx, p, setupAudit); err != nil {
		t.Fatal(err)
	}
	if got, err := s.GetNotifyPref(ctx, "alice"); err != nil || !reflect.DeepEqual(got, p) {
		t.Fatalf("after replace: %+v, %v; want %+v", got, err, p)
	}
	if _, err := s.GetNotifyPref(ctx, "bob"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("bob has no default, got %v", err)
	}
	if err := s.DeleteNotifyPref(ctx, "alice", setupAudit); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteNotifyPref(ctx, "alice", setupAudit); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
	if _, err := s.GetNotifyPref(ctx, "alice"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after delete: %v, want ErrNotFound", err)
	}
}

// Each move to an end state records one job end with it; a repeated move
// (a guard that no longer holds) records nothing more, and other moves
// none.
func testNotifyJobEnds(t *testing.T, s store.Store) {
	ctx := context.Background()
	jobs := createN(t, s, "vision", 4)
	mustApply(t, s, store.Change{JobID: jobs[0].ID, Move: domain.MoveCancel(), At: at(10)})
	mustApply(t, s, store.Change{JobID: jobs[1].ID, Move: domain.MoveStart(), At: at(10)})
	mustApply(t, s, store.Change{JobID: jobs[1].ID, Move: domain.MoveRun(), At: at(11)})
	mustApply(t, s, store.Change{JobID: jobs[1].ID, Move: domain.MoveSucceed(), At: at(12)})
	mustApply(t, s, store.Change{JobID: jobs[2].ID, Move: domain.MoveStart(), At: at(13)})
	mustApply(t, s, store.Change{JobID: jobs[2].ID, Move: domain.MoveFail(), At: at(14)})
	mustApply(t, s, store.Change{JobID: jobs[3].ID, Move: domain.MoveHold(), At: at(15)})
	// Replayed ends lose their guard.
	errs, err := s.Apply(ctx, []store.Change{{JobID: jobs[1].ID, Move: domain.MoveSucceed(), At: at(20)}, {JobID: jobs[0].ID, Move: domain.MoveCancel(), At: at(20)}})
	if err != nil || !errors.Is(errs[0], store.ErrConflict) || !errors.Is(errs[1], store.ErrConflict) {
		t.Fatalf("replayed ends: %v, %v; want two conflicts", errs, err)
	}
	got, err := s.PendingJobEnds(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []domain.JobEnd{{JobID: jobs[0].ID, State: domain.JobCanceled, At: at(10), Submitter: "alice"},
		{JobID: jobs[1].ID, State: domain.JobSucceeded, At: at(12), Submitter: "alice"}, {JobID: jobs[2].ID, State: domain.JobFailed, At: at(14), Submitter: "alice"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("PendingJobEnds = %+v, want %+v", got, want)
	}
	if got, err := s.PendingJobEnds(ctx, 2); err != nil || len(got) != 2 || got[1].JobID != jobs[1].ID {
		t.Fatalf("PendingJobEnds(limit 2) = %+v, %v", got, err)
	}
	// Resolving without notifications removes the end.
	if err := s.ResolveJobEnd(ctx, jobs[0].ID, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := s.PendingJobEnds(ctx, 0); err != nil || len(got) != 2 || got[0].JobID != jobs[1].ID {
		t.Fatalf("after resolving job %d: %+v, %v", jobs[0].ID, got, err)
	}
}

func testNotifyOutbox(t *testing.T, s store.Store) {
	ctx := context.Background()
	j := createN(t, s, "vision", 1)[0]
	mustApply(t, s, store.Change{JobID: j.ID, Move: domain.MoveCancel(), At: at(10)})
	notes := []domain.JobNotification{
		{JobID: j.ID, State: domain.JobCanceled, Target: "channel:team-slack", CreatedAt: at(11)},
		{JobID: j.ID, State: domain.JobCanceled, Target: "email:alice@example.com", CreatedAt: at(11)},
	}
	if err := s.ResolveJobEnd(ctx, j.ID, notes); err != nil {
		t.Fatal(err)
	}
	// A second resolve (a notifier that crashed before it knew the
	// first committed) queues nothing new.
	if err := s.ResolveJobEnd(ctx, j.ID, notes); err != nil {
		t.Fatal(err)
	}
	if ends, err := s.PendingJobEnds(ctx, 0); err != nil || len(ends) != 0 {
		t.Fatalf("job ends after resolve: %+v, %v; want none", ends, err)
	}
	pend, err := s.PendingJobNotifications(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(pend) != 2 || pend[0].ID == 0 || pend[0].Target != notes[0].Target || pend[1].Target != notes[1].Target ||
		pend[0].JobID != j.ID || pend[0].State != domain.JobCanceled || !pend[0].CreatedAt.Equal(at(11)) || !pend[0].SentAt.IsZero() {
		t.Fatalf("PendingJobNotifications = %+v, want the two queued", pend)
	}
	if err := s.MarkJobNotification(ctx, pend[0].ID, store.NotificationResult{At: at(12), Sent: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkJobNotification(ctx, pend[1].ID, store.NotificationResult{At: at(12), Error: "connection refused"}); err != nil {
		t.Fatal(err)
	}
	left, err := s.PendingJobNotifications(ctx, 0)
	if err != nil || len(left) != 1 || left[0].ID != pend[1].ID || left[0].Tries != 1 || left[0].LastError != "connection refused" {
		t.Fatalf("after one sent, one failed: %+v, %v", left, err)
	}
	if err := s.MarkJobNotification(ctx, pend[1].ID, store.NotificationResult{At: at(13), Error: "still refused", GiveUp: true}); err != nil {
		t.Fatal(err)
	}
	if left, err := s.PendingJobNotifications(ctx, 0); err != nil || len(left) != 0 {
		t.Fatalf("after give-up: %+v, %v; want none pending", left, err)
	}
	all, err := s.JobNotifications(ctx, j.ID)
	if err != nil || len(all) != 2 || !all[0].SentAt.Equal(at(12)) || all[0].Tries != 1 ||
		!all[1].GaveUp || all[1].Tries != 2 || all[1].LastError != "still refused" {
		t.Fatalf("JobNotifications = %+v, %v", all, err)
	}
	if err := s.MarkJobNotification(ctx, 999999, store.NotificationResult{At: at(14), Sent: true}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("marking no notification: %v, want ErrNotFound", err)
	}
}

func testNotifyBadTargets(t *testing.T, s store.Store) {
	ctx := context.Background()
	j := createN(t, s, "vision", 1)[0]
	mustApply(t, s, store.Change{JobID: j.ID, Move: domain.MoveCancel(), At: at(10)})
	for _, n := range []domain.JobNotification{
		{JobID: j.ID, State: domain.JobCanceled, Target: "https://example.com/hook"},
		{JobID: j.ID, State: domain.JobCanceled, Target: "email:"},
		{JobID: j.ID, State: domain.JobRunning, Target: "channel:ops"},
		{JobID: j.ID + 1, State: domain.JobCanceled, Target: "channel:ops"},
	} {
		if err := s.ResolveJobEnd(ctx, j.ID, []domain.JobNotification{n}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("ResolveJobEnd(%+v): %v, want ErrInvalid", n, err)
		}
	}
	if ends, err := s.PendingJobEnds(ctx, 0); err != nil || len(ends) != 1 {
		t.Fatalf("a refused resolve must keep the job end: %+v, %v", ends, err)
	}
}

// A job end comes with what the notifier needs of its job: its
// submitter, its spec's notify section and whether a sweep owns it.
func testNotifyEndsOfJobs(t *testing.T, s store.Store) {
	ctx := context.Background()
	notify := &domain.Notify{On: []domain.JobState{domain.JobFailed}, Channels: []string{"team-slack"}}
	withNotify := testSpec("told", "vision")
	withNotify.Notify = notify
	member := testSpec("member", "vision")
	member.Labels = map[string]string{domain.SweepLabel: "7"}
	a := create(t, s, newJob(t, withNotify, "bob", at(1)))
	b := create(t, s, newJob(t, member, "carol", at(2)))
	mustApply(t, s, store.Change{JobID: a.ID, Move: domain.MoveCancel(), At: at(10)})
	mustApply(t, s, store.Change{JobID: b.ID, Move: domain.MoveCancel(), At: at(11)})
	got, err := s.PendingJobEnds(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []domain.JobEnd{
		{JobID: a.ID, State: domain.JobCanceled, At: at(10), Submitter: "bob", Notify: notify},
		{JobID: b.ID, State: domain.JobCanceled, At: at(11), Submitter: "carol", Sweep: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("PendingJobEnds = %+v, want %+v", got, want)
	}
}

// ResolveJobEnds resolves each end as ResolveJobEnd would, in one write;
// one refused keeps its end and does not hold back the others.
func testNotifyResolveMany(t *testing.T, s store.Store) {
	ctx := context.Background()
	jobs := createN(t, s, "vision", 3)
	for i, j := range jobs {
		mustApply(t, s, store.Change{JobID: j.ID, Move: domain.MoveCancel(), At: at(10 + i)})
	}
	note := func(id int64, target string) []domain.JobNotification {
		return []domain.JobNotification{{JobID: id, State: domain.JobCanceled, Target: target, CreatedAt: at(20)}}
	}
	errs, err := s.ResolveJobEnds(ctx, []domain.JobEndResolution{
		{JobID: jobs[0].ID, Notes: note(jobs[0].ID, "channel:ops")},
		{JobID: jobs[1].ID, Notes: note(jobs[1].ID, "pager:ops")},
		{JobID: jobs[2].ID},
	})
	if err != nil || len(errs) != 3 || errs[0] != nil || !errors.Is(errs[1], store.ErrInvalid) || errs[2] != nil {
		t.Fatalf("ResolveJobEnds = %v, %v; want nil, ErrInvalid, nil", errs, err)
	}
	if ends, err := s.PendingJobEnds(ctx, 0); err != nil || len(ends) != 1 || ends[0].JobID != jobs[1].ID {
		t.Fatalf("job ends left: %+v, %v; want only the refused one's", ends, err)
	}
	pend, err := s.PendingJobNotifications(ctx, 0)
	if err != nil || len(pend) != 1 || pend[0].JobID != jobs[0].ID || pend[0].Target != "channel:ops" {
		t.Fatalf("queued notifications: %+v, %v; want job %d's to channel:ops", pend, err, jobs[0].ID)
	}
	// Only refused ends: nothing is written, and the end stays.
	if errs, err := s.ResolveJobEnds(ctx, []domain.JobEndResolution{{JobID: jobs[1].ID, Notes: note(jobs[1].ID, "pager:ops")}}); err != nil || !errors.Is(errs[0], store.ErrInvalid) {
		t.Fatalf("ResolveJobEnds of a refused end = %v, %v", errs, err)
	}
	if ends, err := s.PendingJobEnds(ctx, 0); err != nil || len(ends) != 1 {
		t.Fatalf("a refused resolve must keep the job end: %+v, %v", ends, err)
	}
}
