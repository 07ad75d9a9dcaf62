package cost

import (
	"slices"
	"time"

	"trainyard/internal/domain"
)

// Ledger is each pool's rates over time: the rates of a change are in
// force from its time until the pool's next change, so that time is
// priced at the rates of when it was held, however the rates change
// later. A pool's first rates also price any time before them (its
// history starts at its creation, or at the epoch for pools older than
// the history); a pool without changes is free. The zero Ledger prices
// everything at nothing.
type Ledger struct {
	pools map[string][]change
}

type change struct {
	from  time.Time
	rates domain.Rates
}

// Add records that rates are in force on pool from from on; a change at
// the same instant as an earlier one replaces it.
func (l *Ledger) Add(pool string, from time.Time, rates domain.Rates) {
	if l.pools == nil {
		l.pools = map[string][]change{}
	}
	cs := l.pools[pool]
	i, found := slices.BinarySearchFunc(cs, from, func(c change, t time.Time) int { return c.from.Compare(t) })
	if found {
		cs[i].rates = rates
		return
	}
	l.pools[pool] = slices.Insert(cs, i, change{from, rates})
}

// Flat is a Ledger whose rates never changed: each pool's rates in force
// at all times.
func Flat(rates map[string]domain.Rates) Ledger {
	var l Ledger
	for pool, r := range rates {
		l.Add(pool, time.Time{}, r)
	}
	return l
}

// at is the index of the change of cs in force at t (the first one before
// it); -1 when cs is empty.
func at(cs []change, t time.Time) int {
	i, found := slices.BinarySearchFunc(cs, t, func(c change, t time.Time) int { return c.from.Compare(t) })
	if found {
		return i
	}
	if i == 0 {
		return min(0, len(cs)-1)
	}
	return i - 1
}

// At is pool's rates in force at t.
func (l Ledger) At(pool string, t time.Time) domain.Rates {
	cs := l.pools[pool]
	if i := at(cs, t); i >= 0 {
		return cs[i].rates
	}
	return domain.Rates{}
}

// Priced reports whether pool had rates at any time: whether its spend
// means anything.
func (l Ledger) Priced(pool string) bool {
	for _, c := range l.pools[pool] {
		if !c.rates.IsZero() {
			return true
		}
	}
	return false
}

// Changes lists the times strictly inside (since, until) at which any
// pool's rates changed, ascending and without repeats: where a sum of
// held time must be split to be priced (see Totals.Pieces).
func (l Ledger) Changes(since, until time.Time) []time.Time {
	var out []time.Time
	for _, cs := range l.pools {
		for _, c := range cs {
			if c.from.After(since) && c.from.Before(until) {
				out = append(out, c.from)
			}
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return slices.CompactFunc(out, time.Time.Equal)
}
