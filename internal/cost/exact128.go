package cost

import (
	"math"
	"math/bits"
	"time"

	"trainyard/internal/domain"
)

// The same exact arithmetic as calc's, in 128 bits, for a list page
// prices every job on it: at 10 a GPU-hour, an attempt on a node of 8
// GPUs fits for about six weeks, a gang of 64 GPUs for about five days.
// A computation that would not fit, or has a negative term, is done
// again in big.Int, which gives the same answer (TestExact128MatchesBig).

// u128 is an unsigned 128-bit integer.
type u128 struct{ hi, lo uint64 }

func mul64(a, b uint64) u128 {
	hi, lo := bits.Mul64(a, b)
	return u128{hi, lo}
}

// mul is x·y, or false when it does not fit.
func (x u128) mul(y uint64) (u128, bool) {
	hi, lo := bits.Mul64(x.lo, y)
	over, mid := bits.Mul64(x.hi, y)
	hi, carry := bits.Add64(hi, mid, 0)
	return u128{hi, lo}, over == 0 && carry == 0
}

// add is x+y, or false when it does not fit.
func (x u128) add(y u128) (u128, bool) {
	lo, carry := bits.Add64(x.lo, y.lo, 0)
	hi, carry := bits.Add64(x.hi, y.hi, carry)
	return u128{hi, lo}, carry == 0
}

func (x u128) less(y u128) bool { return x.hi < y.hi || x.hi == y.hi && x.lo < y.lo }

// perHour128 is add's per-node rate times nodes, in 128 bits: false when
// a term is negative or it does not fit.
func perHour128(res domain.Resources, r domain.Rates) (u128, bool) {
	gpus, cpus, mem, nodes := int64(res.GPUs), cpuMicros(res.CPUs), int64(res.Memory), int64(max(res.Nodes, 1))
	if gpus < 0 || cpus < 0 || mem < 0 || r.GPUHour < 0 || r.CPUHour < 0 || r.MemoryGiBHour < 0 {
		return u128{}, false
	}
	g, ok1 := mul64(uint64(gpus), uint64(r.GPUHour)).mul(microCores * gib)
	c, ok2 := mul64(uint64(cpus), uint64(r.CPUHour)).mul(gib)
	m, ok3 := mul64(uint64(mem), uint64(r.MemoryGiBHour)).mul(microCores)
	per, ok4 := g.add(c)
	per, ok5 := per.add(m)
	per, ok6 := per.mul(uint64(nodes))
	return per, ok1 && ok2 && ok3 && ok4 && ok5 && ok6
}

// add128 adds res at r for d to acc, as add does.
func add128(acc u128, res domain.Resources, r domain.Rates, d time.Duration) (u128, bool) {
	if d <= 0 {
		return acc, true
	}
	per, ok := perHour128(res, r)
	if !ok {
		return acc, false
	}
	term, ok1 := per.mul(uint64(d))
	acc, ok2 := acc.add(term)
	return acc, ok1 && ok2
}

// hourScale is denominator / gib: nanoseconds per hour times micro cores.
const hourScale = uint64(nsPerHour) * microCores

// roundDiv128 is n/denominator rounded half away from zero, as roundDiv;
// false when the quotient is past Money's range (roundDiv saturates it).
// denominator is gib × hourScale, so n is divided by each in turn: the
// floor of a floor is the floor of the whole.
func roundDiv128(n u128) (domain.Money, bool) {
	const shift = 30 // gib = 1<<shift
	low := n.lo & (gib - 1)
	a := u128{n.hi >> shift, n.lo>>shift | n.hi<<(64-shift)}
	if a.hi >= hourScale {
		return 0, false
	}
	q, r := bits.Div64(a.hi, a.lo, hourScale)
	// The remainder is r·gib + low; round up when twice it reaches the
	// denominator.
	twice, _ := mul64(r, 2*gib).add(u128{0, 2 * low}) // r < hourScale < 2^62: fits
	if !twice.less(mul64(hourScale, gib)) {
		q++
	}
	if q > math.MaxInt64 {
		return 0, false
	}
	return domain.Money(q), true
}

// price128 is calc.price in 128 bits.
func price128(res domain.Resources, l Ledger, pool string, from, to time.Time) (domain.Money, bool) {
	var acc u128
	ok := true
	cs := l.pools[pool]
	for i := at(cs, from); i >= 0 && from.Before(to) && ok; i++ {
		end := to
		if i+1 < len(cs) && cs[i+1].from.Before(to) {
			end = cs[i+1].from
		}
		acc, ok = add128(acc, res, cs[i].rates, end.Sub(from))
		from = end
	}
	if !ok {
		return 0, false
	}
	return roundDiv128(acc)
}
