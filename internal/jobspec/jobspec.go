// Package jobspec parses, defaults and validates job specs.
package jobspec

import "trainyard/internal/domain"

// Load parses a YAML or JSON spec document, applies "key=value" overrides,
// fills defaults and validates. On failure the error is domain.FieldErrors
// holding every problem with its field path.
func Load(doc []byte, sets []string) (domain.Spec, error) { panic("not implemented") }

// Canonical returns the canonical JSON of s and its hash "sha256:<hex>".
func Canonical(s domain.Spec) ([]byte, string) { panic("not implemented") }

// Schema returns the JSON Schema of the spec document.
func Schema() []byte { panic("not implemented") }
