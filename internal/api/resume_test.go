package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"trainyard/internal/api/apitypes"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// retry ends the running attempt n of job id as failed and starts attempt
// n+1, as a retry does, leaving it starting: the server has not recorded
// its start yet.
func (e *uploadEnv) retry(id int64, n int) {
	e.t.Helper()
	now := time.Now()
	ended := &store.AttemptChange{Number: n, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptFailed}
	e.apply(store.Change{JobID: id, Move: domain.MoveRequeue(), At: now, Attempt: ended},
		store.Change{JobID: id, Move: domain.MoveStart(), At: now, Attempt: &store.AttemptChange{Create: true, Number: n + 1, To: domain.AttemptStarting}})
}

// started records the start of attempt n of job id as the control loop
// does for an executor's Started event without a resume.
func (e *uploadEnv) started(id int64, n int) {
	e.t.Helper()
	e.apply(store.Change{JobID: id, Move: domain.MoveRun(), Reason: domain.ReasonStarted, Message: fmt.Sprintf("attempt %d started (pid 1)", n),
		At: time.Now(), Attempt: &store.AttemptChange{Number: n, From: []domain.AttemptState{domain.AttemptStarting}, To: domain.AttemptRunning}})
}

func (e *uploadEnv) apply(chs ...store.Change) {
	e.t.Helper()
	errs, err := e.st.Apply(context.Background(), chs)
	if err != nil {
		e.t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			e.t.Fatalf("change %d: %v", i, err)
		}
	}
}

// checkpoint uploads and registers the one-directory checkpoint name for
// attempt n of job id.
func (e *uploadEnv) checkpoint(id int64, n int, tok, name, data string) {
	e.t.Helper()
	for rel, b := range map[string]string{"checkpoints/" + name + "/model.pt": data, "checkpoints/" + name + "/" + domain.CheckpointMarker: ""} {
		if code, body := e.put(id, n, rel, tok, []byte(b), false); code != 201 {
			e.t.Fatalf("upload %s: %d %s", rel, code, body)
		}
	}
	if code, b := e.do("POST", fmt.Sprintf("/api/v1/jobs/%d/attempts/%d/checkpoints", id, n), tok, apitypes.CheckpointComplete{Name: name}); code != 200 {
		e.t.Fatalf("complete %s: %d %s", name, code, b)
	}
}

// errCode is the code of an error answer.
func errCode(b []byte) string {
	var e apitypes.Error
	_ = json.Unmarshal(b, &e)
	return e.Error.Code
}

// TestJobTokenReadsItsCheckpoints: the job token of a job's latest attempt
// lists and downloads the job's checkpoints while the attempt is starting
// or running, to resume from one; nothing else of its job, nothing of
// another job, and not once its attempt is no longer the latest or has
// ended.
func TestJobTokenReadsItsCheckpoints(t *testing.T) {
	e := newUploadEnv(t)
	j, tok1 := e.job()
	other, otherTok := e.job()
	e.checkpoint(j.ID, 1, tok1, "step-1", "weights-1")
	list := fmt.Sprintf("/api/v1/jobs/%d/checkpoints", j.ID)
	archive := list + "/step-1/archive"

	// Attempt 1, running, reads its job's checkpoints.
	code, b := e.do("GET", list, tok1, nil)
	mustStatus(t, code, b, 200)
	e.retry(j.ID, 1)
	tok2 := e.jobToken(j.ID, 2)
	// Attempt 2 is starting: its agent fetches the checkpoint before the
	// job's command starts.
	code, b = e.do("GET", list, tok2, nil)
	mustStatus(t, code, b, 200)
	var cl apitypes.CheckpointList
	if err := json.Unmarshal(b, &cl); err != nil {
		t.Fatal(err)
	}
	if len(cl.Checkpoints) != 1 || cl.Checkpoints[0].Name != "step-1" || cl.Checkpoints[0].SHA256 == "" {
		t.Errorf("listed %+v, want step-1 with its digest", cl.Checkpoints)
	}
	code, b = e.do("GET", archive, tok2, nil)
	mustStatus(t, code, b, 200)
	if got, want := fmt.Sprint(tarEntries(t, b)), "[step-1/.complete= step-1/model.pt=weights-1]"; got != want {
		t.Errorf("archive holds %s, want %s", got, want)
	}

	denied := countDenied(t, e.st)
	for _, c := range []struct {
		what, method, path, token string
		want                      int
		says                      string
	}{
		{"the ended attempt 1's list", "GET", list, tok1, 409, "not its latest"},
		{"the ended attempt 1's archive", "GET", archive, tok1, 409, "not its latest"},
		{"another job's token", "GET", list, otherTok, 404, "does not exist"},
		{"another job's token, archive", "GET", archive, otherTok, 404, "does not exist"},
		{"the other job's checkpoints with this one's token", "GET", fmt.Sprintf("/api/v1/jobs/%d/checkpoints", other.ID), tok2, 404, "does not exist"},
		{"its job", "GET", fmt.Sprintf("/api/v1/jobs/%d", j.ID), tok2, 403, "job token"},
		{"its job's outputs", "GET", fmt.Sprintf("/api/v1/jobs/%d/artifacts", j.ID), tok2, 403, "job token"},
		{"its job's logs", "GET", fmt.Sprintf("/api/v1/jobs/%d/logs", j.ID), tok2, 403, "job token"},
		{"checkpoint usage", "GET", "/api/v1/checkpoints/usage", tok2, 403, "job token"},
	} {
		code, b := e.do(c.method, c.path, c.token, nil)
		if code != c.want || !strings.Contains(string(b), c.says) {
			t.Errorf("%s: %d %s, want %d saying %q", c.what, code, b, c.want, c.says)
		}
	}
	if got := countDenied(t, e.st); got <= denied {
		t.Errorf("no refusal audited")
	}
	// Users read them as before: the admin does; attempt 2 ends, and its
	// token no longer reads them.
	code, b = e.do("GET", archive, e.token, nil)
	mustStatus(t, code, b, 200)
	e.started(j.ID, 2)
	e.apply(store.Change{JobID: j.ID, Move: domain.MoveFail(), At: time.Now(),
		Attempt: &store.AttemptChange{Number: 2, From: []domain.AttemptState{domain.AttemptRunning}, To: domain.AttemptFailed}})
	if code, b := e.do("GET", archive, tok2, nil); code != 409 || !strings.Contains(string(b), "has ended") {
		t.Errorf("after attempt 2 ended: %d %s, want 409", code, b)
	}
}

// TestReportResumed: the agent of a running attempt reports the
// checkpoint it resumed from: the checkpoint's ResumedBy and the job's
// start message say so, as the control loop records a resumed start;
// bad names and notes are field errors, and an attempt the server has
// not seen start is told to report again.
func TestReportResumed(t *testing.T) {
	e := newUploadEnv(t)
	j, tok1 := e.job()
	_, otherTok := e.job()
	e.checkpoint(j.ID, 1, tok1, "step-1", "weights-1")
	e.checkpoint(j.ID, 1, tok1, "step-2", "weights-2")
	e.retry(j.ID, 1)
	tok2 := e.jobToken(j.ID, 2)
	path := fmt.Sprintf("/api/v1/jobs/%d/attempts/2/resumed", j.ID)
	report := apitypes.ResumeReport{Name: "step-1", Note: "step-2: its files changed since it was registered"}

	// Not started yet, as the server sees it: refused, nothing recorded.
	code, b := e.do("POST", path, tok2, report)
	if code != 409 || errCode(b) != "not_started" {
		t.Fatalf("before the start is recorded: %d %s, want 409 not_started", code, b)
	}
	e.started(j.ID, 2)

	for _, c := range []struct {
		what  string
		body  any
		field string
	}{
		{"unknown checkpoint", apitypes.ResumeReport{Name: "step-9"}, "name"},
		{"not a checkpoint name", apitypes.ResumeReport{Name: "../step-1"}, "name"},
		{"empty", apitypes.ResumeReport{}, "name"},
		{"multi-line note", apitypes.ResumeReport{Name: "step-1", Note: "a\nb"}, "note"},
		{"long note", apitypes.ResumeReport{Name: "step-1", Note: strings.Repeat("x", 5000)}, "note"},
		{"unknown field", `{"checkpoint": "step-1"}`, ""},
	} {
		code, b := e.do("POST", path, tok2, c.body)
		var er apitypes.Error
		_ = json.Unmarshal(b, &er)
		if code != 400 || (c.field != "" && (len(er.Error.Fields) != 1 || er.Error.Fields[0].Path != c.field)) {
			t.Errorf("%s: %d %s, want 400 naming %q", c.what, code, b, c.field)
		}
	}
	for _, c := range []struct {
		what, path, token string
		want              int
	}{
		{"attempt 1's token", fmt.Sprintf("/api/v1/jobs/%d/attempts/1/resumed", j.ID), tok1, 409},
		{"attempt 1's token for attempt 2", path, tok1, 403},
		{"another job's token", path, otherTok, 404},
	} {
		if code, b := e.do("POST", c.path, c.token, report); code != c.want {
			t.Errorf("%s: %d %s, want %d", c.what, code, b, c.want)
		}
	}
	recs, err := e.st.ListCheckpoints(context.Background(), j.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.ResumedBy != 0 {
			t.Errorf("refused reports recorded a resume: %+v", r)
		}
	}

	// The agent's report, twice (an answer lost on the way).
	want := "attempt 2 started (pid 1); resuming from checkpoint step-1 (skipped step-2: its files changed since it was registered)"
	for range 2 {
		code, b := e.do("POST", path, tok2, report)
		mustStatus(t, code, b, 200)
		var got apitypes.ResumeRecorded
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if got.Name != "step-1" || !strings.HasSuffix(want, got.Message) {
			t.Errorf("answer %+v", got)
		}
		job, err := e.st.GetJob(context.Background(), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		if job.Message != want || job.Reason != domain.ReasonStarted {
			t.Errorf("job message %q (%s), want %q", job.Message, job.Reason, want)
		}
	}
	recs, err = e.st.ListCheckpoints(context.Background(), j.ID, false)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(recs, func(r domain.CheckpointRecord) bool { return r.Name == "step-1" })
	if i < 0 || recs[i].ResumedBy != 2 {
		t.Errorf("checkpoints %+v, want step-1 resumed by attempt 2", recs)
	}
	// trainyard why says so.
	code, b = e.do("GET", fmt.Sprintf("/api/v1/jobs/%d/why", j.ID), e.token, nil)
	mustStatus(t, code, b, 200)
	if !strings.Contains(string(b), "attempt 2 resumed from checkpoint step-1 (written by attempt 1)") {
		t.Errorf("why: %s", b)
	}
}

// TestReportResumedFromNone: an agent that could use none of the
// candidates says why; the start message says so, and no checkpoint is
// marked.
func TestReportResumedFromNone(t *testing.T) {
	e := newUploadEnv(t)
	j, tok1 := e.job()
	e.checkpoint(j.ID, 1, tok1, "step-1", "weights-1")
	e.retry(j.ID, 1)
	e.started(j.ID, 2)
	tok2 := e.jobToken(j.ID, 2)
	code, b := e.do("POST", fmt.Sprintf("/api/v1/jobs/%d/attempts/2/resumed", j.ID), tok2,
		apitypes.ResumeReport{Note: "step-1: the archive could not be downloaded (HTTP 404)"})
	mustStatus(t, code, b, 200)
	job, err := e.st.GetJob(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if want := "attempt 2 started (pid 1); no intact checkpoint to resume from (step-1: the archive could not be downloaded (HTTP 404))"; job.Message != want {
		t.Errorf("message %q, want %q", job.Message, want)
	}
	recs, _ := e.st.ListCheckpoints(context.Background(), j.ID, false)
	if len(recs) != 1 || recs[0].ResumedBy != 0 {
		t.Errorf("checkpoints %+v, want none resumed", recs)
	}
}
