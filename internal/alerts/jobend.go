package alerts

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// JobEnd is what a job-end notification tells (a job's `notify:` section
// or its submitter's default; package alerting works out whom to tell):
// the job, how it ended, and a link to it.
type JobEnd struct {
	Job     int64  `json:"job"`
	Name    string `json:"job_name"`
	Project string `json:"project"`
	Pool    string `json:"pool"`
	Owner   string `json:"owner"`
	// State is succeeded, failed or canceled; Reason and Message say why.
	State   string `json:"state"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	// Attempts is how many attempts the job made.
	Attempts int `json:"attempts"`
	// RunTime is from the first attempt's start to the end; zero for a
	// job that never started.
	RunTime time.Duration `json:"-"`
	// Cost is what the job cost, formatted with the currency ("12.40
	// USD"); empty when its pool has no rates.
	Cost string `json:"cost,omitempty"`
	// URL is the job's page on the server.
	URL     string    `json:"url"`
	EndedAt time.Time `json:"ended_at"`
}

// JobEndPayloadKind marks a job-end body among a webhook's bodies.
const JobEndPayloadKind = "job_end"

// JobEndPayload is the generic JSON webhook body of a job end:
//
//	{"version":1,"kind":"job_end","summary":"job 42 (resnet) in project vision succeeded after 1h2m",
//	 "job":42,"job_name":"resnet","project":"vision","pool":"standard","owner":"alice",
//	 "state":"succeeded","attempts":1,"run_seconds":3720,"url":"https://trainyard.example/jobs/42",
//	 "ended_at":"2025-01-02T03:04:05Z"}
type JobEndPayload struct {
	Version int    `json:"version"`
	Kind    string `json:"kind"`
	Summary string `json:"summary"`
	JobEnd
	RunSeconds int64 `json:"run_seconds"`
}

// JobEndSender is a channel that can tell of a job end (Webhook, Log).
type JobEndSender interface {
	Name() string
	SendJobEnd(ctx context.Context, e JobEnd) error
}

// title is "job 42 (resnet)".
func (e JobEnd) title() string {
	if e.Name == "" {
		return fmt.Sprintf("job %d", e.Job)
	}
	return fmt.Sprintf("job %d (%s)", e.Job, e.Name)
}

// Subject is the e-mail subject: "[trainyard] job 42 (resnet) failed".
func (e JobEnd) Subject() string {
	return oneLine(fmt.Sprintf("[trainyard] %s %s", e.title(), e.State))
}

// Summary says in one line which job ended how, why, after how long, and
// where to see it.
func (e JobEnd) Summary() string {
	var b strings.Builder
	b.WriteString(e.title())
	if e.Project != "" {
		fmt.Fprintf(&b, " in project %s", e.Project)
	}
	b.WriteString(" " + e.State)
	if e.RunTime > 0 {
		fmt.Fprintf(&b, " after %s", fmtDur(e.RunTime))
	}
	if e.Reason != "" {
		fmt.Fprintf(&b, ": %s", e.Reason)
		if e.Message != "" {
			fmt.Fprintf(&b, " — %s", e.Message)
		}
	}
	if e.URL != "" {
		fmt.Fprintf(&b, " %s", e.URL)
	}
	return oneLine(b.String())
}

// Text is the plain-text body of the job end's e-mail.
func (e JobEnd) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Trainyard %s %s.\n\n", e.title(), e.State)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, "%-9s %s\n", k+":", v)
		}
	}
	row("Job", fmt.Sprint(e.Job))
	row("Name", e.Name)
	row("Project", e.Project)
	row("Pool", e.Pool)
	row("Owner", e.Owner)
	row("State", e.State)
	row("Reason", e.Reason)
	row("Message", strings.Join(strings.Fields(e.Message), " "))
	row("Attempts", fmt.Sprint(e.Attempts))
	if e.RunTime > 0 {
		row("Run time", fmtDur(e.RunTime))
	}
	row("Cost", e.Cost)
	if !e.EndedAt.IsZero() {
		row("Ended", e.EndedAt.UTC().Format(time.RFC3339))
	}
	if e.URL != "" {
		fmt.Fprintf(&b, "\n%s\n", e.URL)
	}
	b.WriteString("\nYou get this because the job's notify section, or its submitter's default\n(trainyard notify show), asks for it.\n")
	return b.String()
}

// slackText is the Slack message of a job end: an emoji for the state,
// then the summary.
func (e JobEnd) slackText() string {
	emoji := ":information_source:"
	switch e.State {
	case "succeeded":
		emoji = ":white_check_mark:"
	case "failed":
		emoji = ":x:"
	case "canceled":
		emoji = ":no_entry_sign:"
	}
	return emoji + " " + e.Summary()
}

// SendJobEnd posts the job end: a JobEndPayload, or for the slack format
// {"text": ...}. Errors never contain the URL's path or query, nor header
// values.
func (w *Webhook) SendJobEnd(ctx context.Context, e JobEnd) error {
	var body any = JobEndPayload{Version: PayloadVersion, Kind: JobEndPayloadKind, Summary: e.Summary(), JobEnd: e,
		RunSeconds: int64(e.RunTime / time.Second)}
	if w.format == FormatSlack {
		body = SlackPayload{Text: e.slackText()}
	}
	return w.post(ctx, body, "job end")
}

// SendJobEnd logs the job end at Info; it fails only if ctx is done.
func (l *Log) SendJobEnd(ctx context.Context, e JobEnd) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.logger.LogAttrs(ctx, slog.LevelInfo, "job ended", slog.String("channel", l.name), slog.Int64("job", e.Job),
		slog.String("state", e.State), slog.String("summary", e.Summary()))
	return nil
}
