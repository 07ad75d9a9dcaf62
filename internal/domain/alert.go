package domain

import "time"

// AlertState is firing or resolved.
type AlertState string

// Alert states.
const (
	AlertFiring   AlertState = "firing"
	AlertResolved AlertState = "resolved"
)

// Alert is one occurrence of an alert rule's condition: it fires once and
// resolves once. While it fires, no other alert with the same Key exists.
type Alert struct {
	ID       int64
	Key      string // dedupe key, e.g. "stalled/job=42"
	Rule     string // queued_too_long, start_failure, interruption, stalled, idle_gpu, memory_near_limit, artifact_write_failure, preemption_thrash, log_truncated, budget_threshold, runaway
	Severity string // info, warning, critical
	State    AlertState
	Summary  string
	// Resolution says why it resolved (empty while firing).
	Resolution string
	JobID      int64 // 0: not about one job
	JobName    string
	Attempt    int
	Project    string
	Pool       string
	Owner      string
	FiredAt    time.Time
	// ResolvedAt is zero while the alert fires.
	ResolvedAt time.Time
	// AckedAt is when someone (AckedBy) acknowledged the firing alert,
	// with AckReason; zero when nobody did. An acknowledged alert is not
	// notified again; its resolution still is.
	AckedAt   time.Time
	AckedBy   string
	AckReason string
}

// AlertNotification is one delivery of an alert's firing or resolution to
// one channel.
type AlertNotification struct {
	ID        int64
	Alert     Alert
	Channel   string
	Status    AlertState // the transition delivered: firing or resolved
	CreatedAt time.Time
	SentAt    time.Time // zero until delivered
	Tries     int
	LastError string
	GaveUp    bool
}
