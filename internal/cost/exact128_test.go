package cost

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"trainyard/internal/domain"
)

// The 128-bit path answers exactly as big.Int does wherever it answers,
// and hands back the rest: random sizes from tiny to absurd, rates from
// none to huge, rate changes inside the span, and the edges where the
// rounding or the width decides.
func TestExact128MatchesBig(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	// pick is a value of about 2^k bits for a random k up to bits.
	pick := func(bits int) int64 {
		k := r.IntN(bits + 1)
		if k == 0 {
			return 0
		}
		return r.Int64N(int64(1) << min(k, 62))
	}
	edges := []int64{0, 1, 2, math.MaxInt32, math.MaxInt64, math.MaxInt64 - 1, int64(hourScale), int64(hourScale) - 1}
	val := func(bits int) int64 {
		if r.IntN(8) == 0 {
			return edges[r.IntN(len(edges))]
		}
		return pick(bits)
	}
	var c calc
	fast, fellBack := 0, 0
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 200_000 {
		res := domain.Resources{GPUs: int(val(8)), CPUs: float64(val(12)) / 4, Memory: domain.ByteSize(val(50)), Nodes: int(val(8))}
		rates := func() domain.Rates {
			return domain.Rates{GPUHour: domain.Money(val(40)), CPUHour: domain.Money(val(36)), MemoryGiBHour: domain.Money(val(36))}
		}
		if i%50 == 0 { // a negative term: big.Int's alone
			res.GPUs = -res.GPUs - 1
		}
		d := time.Duration(val(62))
		r1 := rates()
		want := c.ofBig(res, r1, d)
		got, ok := func() (domain.Money, bool) {
			n, ok := add128(u128{}, res, r1, d)
			if !ok {
				return 0, false
			}
			return roundDiv128(n)
		}()
		if ok {
			fast++
			if got != want {
				t.Fatalf("of(%+v, %+v, %v): 128 bits %d, big.Int %d", res, r1, d, got, want)
			}
		} else {
			fellBack++
		}
		if c.of(res, r1, d) != want {
			t.Fatalf("of(%+v, %+v, %v) != %d", res, r1, d, want)
		}

		var l Ledger
		from := t0.Add(time.Duration(r.Int64N(int64(1000 * time.Hour))))
		to := from.Add(time.Duration(pick(56)))
		l.Add("p", t0, rates())
		for range r.IntN(4) {
			l.Add("p", from.Add(time.Duration(r.Int64N(int64(to.Sub(from))+1))), rates())
		}
		want = c.priceBig(res, l, "p", from, to)
		if got, ok := price128(res, l, "p", from, to); ok && got != want {
			t.Fatalf("price(%+v, %+v, %v…%v): 128 bits %d, big.Int %d", res, l, from, to, got, want)
		}
		if got := c.price(res, l, "p", from, to); got != want {
			t.Fatalf("price(%+v, %v…%v) = %d, want %d", res, from, to, got, want)
		}
	}
	if fast < 1000 || fellBack < 1000 {
		t.Fatalf("the cases should exercise both paths: %d in 128 bits, %d in big.Int", fast, fellBack)
	}
}

// Half a micro rounds away from zero in both paths.
func TestExact128RoundsHalfUp(t *testing.T) {
	var c calc
	// 1 CPU at 1 micro an hour for half an hour, and a nanosecond either side.
	res := domain.Resources{CPUs: 1}
	r := domain.Rates{CPUHour: 1}
	for d, want := range map[time.Duration]domain.Money{time.Hour / 2: 1, time.Hour/2 - 1: 0, time.Hour/2 + 1: 1, 3 * time.Hour / 2: 2} {
		if got := c.of(res, r, d); got != want {
			t.Errorf("of(1 CPU, 1/h, %v) = %d, want %d", d, got, want)
		}
		if got := c.ofBig(res, r, d); got != want {
			t.Errorf("ofBig(1 CPU, 1/h, %v) = %d, want %d", d, got, want)
		}
	}
}
