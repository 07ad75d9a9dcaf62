package apitypes

import "time"

// NotifyPref is a user's default job-end notification: it applies to the
// user's jobs whose spec has no notify section. It is the body of PUT
// /api/v1/notify (user and updated_at, set by the server, are ignored).
type NotifyPref struct {
	User string `json:"user"`
	// On lists the end states that notify: succeeded, failed, canceled;
	// empty: all three.
	On []string `json:"on"`
	// Channels are names of channels in the server's alerts.channels.
	Channels []string `json:"channels"`
	// Email are addresses (the server needs alerts.smtp).
	Email     []string  `json:"email"`
	UpdatedAt time.Time `json:"updated_at"`
}
