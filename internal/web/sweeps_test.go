package web_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/service"
	"trainyard/internal/store"
)

// TestSweepPages: the list shows the sweeps a viewer may see; a sweep's
// page shows its members in index order with their params, its state and
// counts, and its best member by the objective; another project's member
// gets the same answer as for a sweep that does not exist.
func TestSweepPages(t *testing.T) {
	e := newEnv(t)
	alice := e.user("alice", "member@vision")
	bob := e.user("bob", "member@audio")
	ctx := context.Background()
	ap, err := e.svc.Identity.Authenticate(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.svc.Jobs.SubmitSweep(ctx, ap, service.SweepInput{Doc: []byte(`name: lr-sweep
project: vision
entrypoint: [python3, train.py]
resources: {cpus: 1, memory: 1GiB}
sweep:
  params: {lr: [0.1, 0.01], bs: [16, 32]}
  max_parallel: 2
  objective: {metric: val_loss}
`)})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Sweep.ID
	// Member 1 (bs 16, lr 0.01) ran and reported the best val_loss.
	best := res.Jobs[1]
	now := time.Now()
	errs, err := e.st.Apply(ctx, []store.Change{
		{JobID: best, Move: domain.MoveStart(), At: now, Actor: "test",
			Attempt: &store.AttemptChange{Create: true, Number: 1, To: domain.AttemptStarting, Node: "n1"}},
		{JobID: best, Move: domain.MoveRun(), At: now, Actor: "test",
			Attempt: &store.AttemptChange{Number: 1, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}},
	})
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("start member: %v %v", errs, err)
	}
	if err := e.st.AppendPoints(ctx, []domain.MetricPoint{{JobID: best, Attempt: 1, Step: 7, Key: "val_loss", Value: 0.25, At: now}}); err != nil {
		t.Fatal(err)
	}

	b := e.signIn(alice)
	code, body := b.get("/sweeps")
	if code != http.StatusOK || !strings.Contains(body, fmt.Sprintf(`<a href="/sweeps/%d">%d</a>`, id, id)) || !strings.Contains(body, "lr-sweep") {
		t.Fatalf("/sweeps: %d\n%s", code, body)
	}
	code, body = b.get(fmt.Sprintf("/sweeps/%d", id))
	if code != http.StatusOK {
		t.Fatalf("sweep page: %d\n%s", code, body)
	}
	rows := []string{}
	for _, j := range res.Jobs {
		rows = append(rows, fmt.Sprintf(`id="member-%d"`, j))
	}
	if !inOrder(body, rows...) {
		t.Errorf("members are not in index order:\n%s", body)
	}
	for _, want := range []string{
		"bs=16 lr=0.1", "bs=32 lr=0.01", "at most 2 at once", "minimize val_loss",
		fmt.Sprintf(`<a href="/jobs/%d">job %d</a> (index 1): val_loss = 0.25 at step 7`, best, best),
		fmt.Sprintf(`id="member-%d" class="best"`, best), "SweepLimit", `aria-current="page"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the sweep page lacks %q", want)
		}
	}

	if _, body := b.get(fmt.Sprintf("/jobs/%d", best)); !strings.Contains(body, fmt.Sprintf(`<a href="/sweeps/%d">sweep %d</a> (index 1)`, id, id)) {
		t.Errorf("a member's page does not link its sweep:\n%s", body[:min(len(body), 1500)])
	}

	other := e.signIn(bob)
	if _, body := other.get("/sweeps"); strings.Contains(body, "lr-sweep") {
		t.Errorf("bob sees alice's sweep in the list")
	}
	c1, b1 := other.get(fmt.Sprintf("/sweeps/%d", id))
	c2, b2 := other.get("/sweeps/999999")
	if c1 != http.StatusNotFound || c2 != http.StatusNotFound || strings.Contains(b1, "lr-sweep") {
		t.Errorf("another project's sweep: %d, a missing one: %d; want 404 for both, without its name:\n%s\n%s", c1, c2, b1, b2)
	}
	if code, _ := b.get("/sweeps/x"); code != http.StatusNotFound {
		t.Errorf("/sweeps/x: %d, want 404", code)
	}
}
