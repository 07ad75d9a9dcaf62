package domain

import (
	"fmt"
	"regexp"
)

// DefaultCurrency is the server's currency when its config names none.
const DefaultCurrency = "USD"

var currencyRule = regexp.MustCompile(`^[A-Z]{3}$`)

// CheckCurrency accepts an ISO 4217-style code: three uppercase letters.
// The code only labels amounts (no conversion happens), so any such code
// is allowed.
func CheckCurrency(code string) error {
	if !currencyRule.MatchString(code) {
		return fmt.Errorf("%q is not a currency code; use three uppercase letters such as USD or EUR: %w", code, ErrInvalid)
	}
	return nil
}
