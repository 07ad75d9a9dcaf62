package cost

import (
	"slices"
	"testing"
	"time"

	"trainyard/internal/domain"
)

func TestAccrueDayClipsToTheDay(t *testing.T) {
	day := time.Date(2026, 3, 2, 0, 0, 0, 0, time.UTC)
	hs := []Holding{
		{JobID: 1, Tier: domain.TierLocal, Bytes: 10, From: day.Add(-time.Hour), To: day.Add(6 * time.Hour)},       // 6h
		{JobID: 1, Tier: domain.TierObject, Bytes: 10, From: day.Add(6 * time.Hour)},                               // 18h, still held
		{JobID: 1, Tier: domain.TierLocal, Bytes: 5, From: day.Add(23 * time.Hour), To: day.Add(30 * time.Hour)},   // 1h
		{JobID: 2, Tier: domain.TierLocal, Bytes: 7, From: day.Add(-48 * time.Hour), To: day.Add(-24 * time.Hour)}, // before the day
		{JobID: 3, Tier: domain.TierLocal, Bytes: 7, From: day.Add(time.Hour), To: day.Add(time.Hour + 999*time.Millisecond)},
	}
	got := AccrueDay(hs, day)
	want := []domain.StorageDay{
		{Day: day, JobID: 1, Tier: domain.TierLocal, ByteSeconds: 10*6*3600 + 5*3600},
		{Day: day, JobID: 1, Tier: domain.TierObject, ByteSeconds: 10 * 18 * 3600},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("AccrueDay = %+v\nwant %+v", got, want)
	}
}

func TestStorageCost(t *testing.T) {
	const gibDay = int64(1<<30) * 86400
	for _, c := range []struct {
		bs   int64
		rate domain.Money
		want domain.Money
	}{
		{30 * gibDay, 3 * domain.MoneyUnit, 3 * domain.MoneyUnit}, // a GiB for a month
		{gibDay, 3 * domain.MoneyUnit, 100_000},                   // a GiB-day: a thirtieth
		{gibDay, 1, 0},                                            // 1/30 of a micro rounds to 0
		{gibDay * 15, 1, 1},                                       // half a micro rounds up
		{0, 5, 0},
	} {
		if got := StorageCost(c.bs, c.rate); got != c.want {
			t.Errorf("StorageCost(%d, %s) = %s, want %s", c.bs, c.rate, got, c.want)
		}
	}
}

// A day is priced at the rates in force as it began: a rate raised during
// a day applies from the next.
func TestStorageReportFollowsTheRateHistory(t *testing.T) {
	d1 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var l Ledger
	l.Add("gpu", time.Unix(0, 0), domain.Rates{LocalGiBMonth: 3 * domain.MoneyUnit})      // 0.10 a GiB-day
	l.Add("gpu", d1.Add(36*time.Hour), domain.Rates{LocalGiBMonth: 6 * domain.MoneyUnit}) // from noon of day 2
	gibDay := int64(1<<30) * 86400
	days := []domain.StorageDay{
		{Day: d1, JobID: 1, Tier: domain.TierLocal, Project: "p", Pool: "gpu", ByteSeconds: gibDay},
		{Day: d1.AddDate(0, 0, 1), JobID: 1, Tier: domain.TierLocal, Project: "p", Pool: "gpu", ByteSeconds: gibDay},
		{Day: d1.AddDate(0, 0, 2), JobID: 1, Tier: domain.TierLocal, Project: "p", Pool: "gpu", ByteSeconds: gibDay},
	}
	rep := StorageReport(days, l, d1, d1.AddDate(0, 0, 3), "day")
	var got []string
	for _, line := range rep.Lines {
		got = append(got, line.Group+" "+line.Cost.String())
	}
	if want := []string{"2026-03-01 0.10", "2026-03-02 0.10", "2026-03-03 0.20"}; !slices.Equal(got, want) || rep.Total.Cost.String() != "0.40" {
		t.Errorf("by day = %q, total %s; want %q, 0.40", got, rep.Total.Cost, want)
	}
}
