package domain

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestParseMoney(t *testing.T) {
	for _, c := range []struct {
		in      string
		want    Money
		str     string
		cents   string
		invalid bool
	}{
		{in: "2.10", want: 2_100_000, str: "2.10", cents: "2.10"},
		{in: "2.1", want: 2_100_000, str: "2.10", cents: "2.10"},
		{in: "1200", want: 1_200_000_000, str: "1200.00", cents: "1200.00"},
		{in: "0.000125", want: 125, str: "0.000125", cents: "0.00"},
		{in: "0.005", want: 5000, str: "0.005", cents: "0.01"},
		{in: "-0.5", want: -500_000, str: "-0.50", cents: "-0.50"},
		{in: "-0.005", want: -5000, str: "-0.005", cents: "-0.01"},
		{in: ".5", want: 500_000, str: "0.50", cents: "0.50"},
		{in: "1.0000001", invalid: true},
		{in: "abc", invalid: true},
		{in: "1e3", invalid: true},
		{in: "", invalid: true},
		{in: ".", invalid: true},
		{in: "99999999999999", invalid: true},
	} {
		got, err := ParseMoney(c.in)
		if c.invalid {
			if err == nil {
				t.Errorf("ParseMoney(%q) = %d, want an error", c.in, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ParseMoney(%q) = %d, %v; want %d", c.in, got, err, c.want)
			continue
		}
		if s := got.String(); s != c.str {
			t.Errorf("Money(%d).String() = %q, want %q", got, s, c.str)
		}
		if s := got.Cents(); s != c.cents {
			t.Errorf("Money(%d).Cents() = %q, want %q", got, s, c.cents)
		}
		var back Money
		if err := back.UnmarshalText([]byte(got.String())); err != nil || back != got {
			t.Errorf("round trip of %q: %d, %v", got.String(), back, err)
		}
	}
}

func TestRatesCheck(t *testing.T) {
	if err := (Rates{GPUHour: 2 * MoneyUnit}).Check(); err != nil {
		t.Errorf("valid rates: %v", err)
	}
	err := Rates{CPUHour: -1}.Check()
	if !errors.Is(err, ErrInvalid) || err.Error() != "rates.cpu_hour is -0.000001; a rate cannot be negative (use 0 for free): invalid" {
		t.Errorf("negative rate: %v", err)
	}
}

func TestCheckCurrency(t *testing.T) {
	for _, ok := range []string{"USD", "EUR", DefaultCurrency} {
		if err := CheckCurrency(ok); err != nil {
			t.Errorf("CheckCurrency(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "usd", "US", "USDT", "U$D"} {
		if err := CheckCurrency(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckCurrency(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

// String writes what the plain definition does: the whole part, then the
// six decimals less their trailing zeros, at least two.
func TestMoneyStringMatchesDefinition(t *testing.T) {
	def := func(m Money) string {
		sign, u := "", uint64(m)
		if m < 0 {
			sign, u = "-", -u
		}
		frac := strings.TrimRight(fmt.Sprintf("%06d", u%uint64(MoneyUnit)), "0")
		for len(frac) < 2 {
			frac += "0"
		}
		return fmt.Sprintf("%s%d.%s", sign, u/uint64(MoneyUnit), frac)
	}
	r := rand.New(rand.NewPCG(3, 4))
	cases := []Money{0, 1, -1, 10, 100_000, 120_000, 999_999, MoneyUnit, -MoneyUnit, math.MaxInt64, math.MinInt64}
	for range 100_000 {
		cases = append(cases, Money(r.Int64()>>r.IntN(64)), -Money(r.Int64()>>r.IntN(64)))
	}
	for _, m := range cases {
		if got, want := m.String(), def(m); got != want {
			t.Fatalf("Money(%d).String() = %q, want %q", int64(m), got, want)
		}
	}
}
