package domain

import (
	"fmt"
	"strconv"
	"strings"
)

// Money is an amount of the server's currency in millionths of its unit
// (micros): exact integer arithmetic, so that spend adds up to the cent
// however many attempts it sums, and the same history always costs the
// same. It reads and writes as a decimal ("2.10", "0.000125").
type Money int64

// MoneyUnit is one unit of currency (1.00).
const MoneyUnit Money = 1_000_000

// ParseMoney reads a decimal amount with at most six decimal places, such
// as "2.10", "-0.5" or "1200".
func ParseMoney(s string) (Money, error) {
	t := strings.TrimSpace(s)
	neg := strings.HasPrefix(t, "-")
	t = strings.TrimPrefix(t, "-")
	whole, frac, dot := strings.Cut(t, ".")
	if whole == "" && (!dot || frac == "") {
		return 0, fmt.Errorf("%q is not an amount; write a decimal such as 2.10", s)
	}
	if len(frac) > 6 {
		return 0, fmt.Errorf("%q has more than 6 decimal places; amounts are kept to millionths", s)
	}
	for _, part := range []string{whole, frac} {
		for _, c := range part {
			if c < '0' || c > '9' {
				return 0, fmt.Errorf("%q is not an amount; write a decimal such as 2.10", s)
			}
		}
	}
	var w, f int64
	var err error
	if whole != "" {
		if w, err = strconv.ParseInt(whole, 10, 64); err != nil || w > int64(maxMoney/MoneyUnit) {
			return 0, fmt.Errorf("%q is too large an amount", s)
		}
	}
	if frac != "" {
		f, _ = strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
	}
	m := Money(w)*MoneyUnit + Money(f)
	if neg {
		m = -m
	}
	return m, nil
}

const maxMoney = Money(1<<63 - 1)

// String writes m with two decimal places, or as many more as it needs
// ("2.10", "0.000125", "-3.00").
func (m Money) String() string {
	var buf [32]byte
	return string(m.Append(buf[:0]))
}

// Append appends m as String writes it; list pages write a cost per
// job this way without a string each.
func (m Money) Append(b []byte) []byte {
	u := uint64(m)
	if m < 0 {
		b, u = append(b, '-'), -u
	}
	b = strconv.AppendUint(b, u/uint64(MoneyUnit), 10)
	var frac [7]byte // ".dddddd"
	frac[0] = '.'
	for i, f := 6, u%uint64(MoneyUnit); i > 0; i, f = i-1, f/10 {
		frac[i] = byte('0' + f%10)
	}
	n := 7
	for n > 3 && frac[n-1] == '0' {
		n--
	}
	return append(b, frac[:n]...)
}

// Cents writes m rounded to two decimal places, half away from zero, as
// reports show it ("2.10").
func (m Money) Cents() string {
	const cent = MoneyUnit / 100
	r := m
	if r >= 0 {
		r = (r + cent/2) / cent * cent
	} else {
		r = (r - cent/2) / cent * cent
	}
	sign := ""
	if r < 0 {
		sign, r = "-", -r
	}
	return fmt.Sprintf("%s%d.%02d", sign, r/MoneyUnit, r%MoneyUnit/cent)
}

func (m Money) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

func (m *Money) UnmarshalText(t []byte) error {
	v, err := ParseMoney(string(t))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Rates price a pool's capacity per hour of use and its stored outputs per
// GiB-month, in the server's currency. A zero rate is free.
type Rates struct {
	GPUHour       Money `json:"gpu_hour,omitempty" yaml:"gpu_hour,omitempty"`
	CPUHour       Money `json:"cpu_hour,omitempty" yaml:"cpu_hour,omitempty"`
	MemoryGiBHour Money `json:"memory_gib_hour,omitempty" yaml:"memory_gib_hour,omitempty"`
	// Stored outputs and checkpoints, per tier.
	LocalGiBMonth  Money `json:"local_gib_month,omitempty" yaml:"local_gib_month,omitempty"`
	ObjectGiBMonth Money `json:"object_gib_month,omitempty" yaml:"object_gib_month,omitempty"`
}

// IsZero reports whether nothing is priced.
func (r Rates) IsZero() bool { return r == Rates{} }

// Check names the first negative rate.
func (r Rates) Check() error {
	for _, f := range []struct {
		name string
		v    Money
	}{{"gpu_hour", r.GPUHour}, {"cpu_hour", r.CPUHour}, {"memory_gib_hour", r.MemoryGiBHour},
		{"local_gib_month", r.LocalGiBMonth}, {"object_gib_month", r.ObjectGiBMonth}} {
		if f.v < 0 {
			return fmt.Errorf("rates.%s is %s; a rate cannot be negative (use 0 for free): %w", f.name, f.v, ErrInvalid)
		}
	}
	return nil
}
