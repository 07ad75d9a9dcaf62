package domain

import "time"

// StorageDay is what one job kept on one storage tier during one UTC day:
// the bytes held times the seconds they were held. Storage is priced from
// these (a GiB held a whole day is one GiB-day; a month is 30 days).
type StorageDay struct {
	Day       time.Time // the day's start, 00:00 UTC
	JobID     int64
	Tier      string // TierLocal or TierObject
	Project   string
	Pool      string
	Submitter string
	JobName   string
	// ByteSeconds is the integral of the bytes held over the day.
	ByteSeconds int64
}
