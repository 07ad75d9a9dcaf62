package domain

import (
	"slices"
	"strings"
	"time"
)

// Notify says whom to tell when a job ends: the spec's `notify:` section,
// or a user's default (NotifyPref) for jobs whose spec has none. It names
// only channels the admin configured (alerts.channels) and e-mail
// addresses, never a URL, so a job cannot make the server call an address
// of its choosing.
type Notify struct {
	// On lists the end states that notify: succeeded, failed, canceled.
	// Empty (after defaults): all three.
	On []JobState `json:"on,omitempty"`
	// Channels are names of channels in the server's alerts.channels.
	Channels []string `json:"channels,omitempty"`
	// Email are addresses sent an e-mail (the server's alerts.smtp).
	Email []string `json:"email,omitempty"`
}

// NotifyStates are the job states a notification may be about, in order.
func NotifyStates() []JobState { return []JobState{JobSucceeded, JobFailed, JobCanceled} }

// Wants reports whether a job that ended in s notifies.
func (n Notify) Wants(s JobState) bool {
	if !s.Terminal() {
		return false
	}
	return len(n.On) == 0 || slices.Contains(n.On, s)
}

// Targets are where a notification goes, as NotifyTarget strings:
// "channel:NAME" for each channel, then "email:ADDRESS" for each address,
// without repeats.
func (n Notify) Targets() []string {
	out := make([]string, 0, len(n.Channels)+len(n.Email))
	for _, c := range n.Channels {
		out = append(out, NotifyChannelPrefix+c)
	}
	for _, e := range n.Email {
		out = append(out, NotifyEmailPrefix+e)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Prefixes of a notification's target.
const (
	NotifyChannelPrefix = "channel:"
	NotifyEmailPrefix   = "email:"
)

// SplitNotifyTarget returns the kind ("channel" or "email") and the name or
// address of a target; ok is false for a malformed one.
func SplitNotifyTarget(t string) (kind, name string, ok bool) {
	switch {
	case strings.HasPrefix(t, NotifyChannelPrefix):
		return "channel", t[len(NotifyChannelPrefix):], len(t) > len(NotifyChannelPrefix)
	case strings.HasPrefix(t, NotifyEmailPrefix):
		return "email", t[len(NotifyEmailPrefix):], len(t) > len(NotifyEmailPrefix)
	}
	return "", "", false
}

// NotifyPref is a user's default notification: it applies to the user's
// jobs whose spec has no `notify:` section.
type NotifyPref struct {
	User      string
	Notify    Notify
	UpdatedAt time.Time
}

// JobEnd is a job that reached an end state and whose notifications are
// not yet worked out: the store records one in the same transaction as the
// job's move to succeeded, failed or canceled, at most one per job.
type JobEnd struct {
	JobID int64
	State JobState
	At    time.Time

	// What the notifier needs of the job, read with the end: who
	// submitted it, its spec's notify section (nil: none) and whether it
	// is a sweep's member.
	Submitter string
	Notify    *Notify
	Sweep     bool
}

// JobEndResolution is what one job end owes: its notifications, one per
// target (none: the end tells no one).
type JobEndResolution struct {
	JobID int64
	Notes []JobNotification
}

// JobNotification is one notification owed about one job end to one
// target (Notify.Targets): at most one per job and target, delivered at
// least once, retried until sent or given up.
type JobNotification struct {
	ID        int64
	JobID     int64
	State     JobState // the end state it tells of
	Target    string   // "channel:NAME" or "email:ADDRESS"
	CreatedAt time.Time
	SentAt    time.Time // zero until delivered
	Tries     int
	LastError string
	GaveUp    bool
}
