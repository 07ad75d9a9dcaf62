package domain

import "fmt"

// DefaultCurrency is the server's currency when its config names none.
const DefaultCurrency = "USD"

// CheckCurrency accepts an ISO 4217-style code: three uppercase letters.
// The code only labels amounts (no conversion happens), so any such code
// is allowed.
func CheckCurrency(code string) error {
	if !isCurrencyCode(code) {
		return fmt.Errorf("%q is not a currency code; use three uppercase letters such as USD or EUR: %w", code, ErrInvalid)
	}
	return nil
}

// isCurrencyCode reports whether code is three uppercase ASCII letters
// (^[A-Z]{3}$). A loop, not a regexp: a package-level regexp is compiled
// by every program that links this package, at its start.
func isCurrencyCode(code string) bool {
	if len(code) != 3 {
		return false
	}
	for i := range len(code) {
		if code[i] < 'A' || code[i] > 'Z' {
			return false
		}
	}
	return true
}
