package cost

import (
	"cmp"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"

	"trainyard/internal/domain"
)

// Storage: what jobs keep on each tier, accrued per UTC day as
// byte-seconds (domain.StorageDay) and priced at the pool's
// LocalGiBMonth or ObjectGiBMonth, a month being 30 days.

// Holding is bytes one job kept on one tier from From until To (zero: it
// still does).
type Holding struct {
	JobID     int64
	JobName   string
	Project   string
	Pool      string
	Submitter string
	Tier      string // domain.TierLocal or domain.TierObject
	Bytes     int64
	From, To  time.Time
}

// Day is the UTC day t falls on, as the time it starts.
func Day(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// AccrueDay sums the holdings over the UTC day starting at day: per job
// and tier, the bytes held times the whole seconds they were held within
// the day. Pairs that held nothing that day are left out; the rest come
// by job, then tier.
func AccrueDay(hs []Holding, day time.Time) []domain.StorageDay {
	start, end := day, day.Add(24*time.Hour)
	type key struct {
		job  int64
		tier string
	}
	idx := map[key]int{}
	var out []domain.StorageDay
	for _, h := range hs {
		from, to := h.From, h.To
		if to.IsZero() || to.After(end) {
			to = end
		}
		if from.Before(start) {
			from = start
		}
		secs := int64(to.Sub(from) / time.Second)
		if h.Bytes <= 0 || secs <= 0 {
			continue
		}
		k := key{h.JobID, h.Tier}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, domain.StorageDay{Day: day, JobID: h.JobID, JobName: h.JobName, Tier: h.Tier,
				Project: h.Project, Pool: h.Pool, Submitter: h.Submitter})
		}
		out[i].ByteSeconds += h.Bytes * secs
	}
	slices.SortFunc(out, func(a, b domain.StorageDay) int {
		return cmp.Or(cmp.Compare(a.JobID, b.JobID), strings.Compare(a.Tier, b.Tier))
	})
	return out
}

// secondsPerMonth is a storage month: 30 days.
const secondsPerMonth = 30 * 24 * 60 * 60

// gibMonth is one GiB held for a month, in byte-seconds.
var gibMonth = new(big.Int).Mul(big.NewInt(gib), big.NewInt(secondsPerMonth))

// StorageCost prices byteSeconds at rate per GiB-month: byteSeconds ×
// rate / (2^30 × 30 days), rounded once to a micro, half away from zero.
func StorageCost(byteSeconds int64, rate domain.Money) domain.Money {
	if byteSeconds <= 0 || rate == 0 {
		return 0
	}
	x := new(big.Int).Mul(big.NewInt(byteSeconds), big.NewInt(int64(rate)))
	q, r := new(big.Int).QuoRem(x, gibMonth, new(big.Int))
	if r.Add(r, r).CmpAbs(gibMonth) >= 0 {
		if x.Sign() < 0 {
			q.Sub(q, big.NewInt(1))
		} else {
			q.Add(q, big.NewInt(1))
		}
	}
	return domain.Money(q.Int64())
}

// GiBDays is byteSeconds in GiB-days.
func GiBDays(byteSeconds int64) float64 { return float64(byteSeconds) / float64(gib) / 86400 }

// StorageLine is one group's storage: GiB-days and cost per tier.
type StorageLine struct {
	Group                       string
	LocalGiBDays, ObjectGiBDays float64
	LocalCost, ObjectCost, Cost domain.Money
	local, object               int64 // byte-seconds
}

// StorageSummary is storage over whole days, by group.
type StorageSummary struct {
	By    string
	Since time.Time     // the first day counted
	Until time.Time     // the end of the last day counted
	Lines []StorageLine // by Cost, highest first, then by Group (by day: in date order)
	Total StorageLine
}

// StorageReport prices accrued days at their pool's rates in force as
// each day began (l; a pool without rates is free) and groups them by by
// (see Groupings). Each day
// of each job and tier is priced once and rounded to a micro; lines add
// those amounts, so they sum to the total.
func StorageReport(days []domain.StorageDay, l Ledger, since, until time.Time, by string) StorageSummary {
	rep := StorageSummary{By: by, Since: since, Until: until, Total: StorageLine{Group: "total"}}
	idx := map[string]int{}
	for _, d := range days {
		g := storageGroup(d, by)
		i, ok := idx[g]
		if !ok {
			i = len(rep.Lines)
			idx[g] = i
			rep.Lines = append(rep.Lines, StorageLine{Group: g})
		}
		r := l.At(d.Pool, d.Day) // the rates in force as the day began
		for _, l := range []*StorageLine{&rep.Lines[i], &rep.Total} {
			switch d.Tier {
			case domain.TierObject:
				c := StorageCost(d.ByteSeconds, r.ObjectGiBMonth)
				l.object += d.ByteSeconds
				l.ObjectCost += c
				l.Cost += c
			default:
				c := StorageCost(d.ByteSeconds, r.LocalGiBMonth)
				l.local += d.ByteSeconds
				l.LocalCost += c
				l.Cost += c
			}
		}
	}
	for _, l := range append([]*StorageLine{&rep.Total}, ptrs(rep.Lines)...) {
		l.LocalGiBDays, l.ObjectGiBDays = GiBDays(l.local), GiBDays(l.object)
	}
	slices.SortStableFunc(rep.Lines, func(a, b StorageLine) int {
		if by == "day" {
			return strings.Compare(a.Group, b.Group)
		}
		return cmp.Or(cmp.Compare(b.Cost, a.Cost), strings.Compare(a.Group, b.Group))
	})
	return rep
}

func ptrs(ls []StorageLine) []*StorageLine {
	out := make([]*StorageLine, len(ls))
	for i := range ls {
		out[i] = &ls[i]
	}
	return out
}

func storageGroup(d domain.StorageDay, by string) string {
	switch by {
	case "pool":
		return d.Pool
	case "user":
		return d.Submitter
	case "job":
		if d.JobName == "" {
			return fmt.Sprintf("%d", d.JobID)
		}
		return fmt.Sprintf("%d %s", d.JobID, d.JobName)
	case "day":
		return d.Day.UTC().Format(time.DateOnly)
	}
	return d.Project
}
