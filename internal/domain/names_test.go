package domain

import (
	"regexp"
	"strings"
	"testing"
)

// The hand-written checks accept exactly what their patterns do.
func TestNameChecksMatchTheirPatterns(t *testing.T) {
	env := regexp.MustCompile(EnvNamePattern)
	currency := regexp.MustCompile(`^[A-Z]{3}$`)
	cases := []string{"", "a", "A", "0", ".", "-a", "_a", "a.b", "a_b-c.9", "pytorch-2.4", "Py", "a b", "a/b", "é", "aé",
		"USD", "usd", "US", "USDX", "U2D", "EUR", "ÀBC", "AB\n", "a\n",
		strings.Repeat("a", 63), strings.Repeat("a", 64), "a" + strings.Repeat(".", 62), "a" + strings.Repeat(".", 63)}
	for c := 0; c < 256; c++ {
		cases = append(cases, string(rune(c)), "a"+string(byte(c)), string(byte(c))+"BC")
	}
	for _, s := range cases {
		if got, want := ValidEnvName(s), env.MatchString(s); got != want {
			t.Errorf("ValidEnvName(%q) = %v, want %v (as %s)", s, got, want, EnvNamePattern)
		}
		if got, want := CheckCurrency(s) == nil, currency.MatchString(s); got != want {
			t.Errorf("CheckCurrency(%q) accepts: %v, want %v", s, got, want)
		}
	}
}
