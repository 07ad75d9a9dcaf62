package domain

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors for expected outcomes. Adapters translate their own errors
// into these so callers can use errors.Is.
var (
	ErrNotFound     = errors.New("not found")
	ErrConflict     = errors.New("conflict") // a guarded update lost: state changed underneath
	ErrUnauthorized = errors.New("unauthorized")
	ErrForbidden    = errors.New("forbidden")
	ErrInvalid      = errors.New("invalid")
	// ErrUnavailable: a backing service (the metadata store) cannot be
	// reached or is not serving now; the same call may succeed later.
	ErrUnavailable = errors.New("unavailable")
)

// FieldError is one problem with one field of user input.
type FieldError struct {
	Path    string `json:"path"`           // e.g. "resources.memory", "entrypoint[0]"
	Message string `json:"message"`        // what is wrong and how to fix it
	Line    int    `json:"line,omitempty"` // 1-based line in the source document, when known
}

func (e FieldError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s (line %d): %s", e.Path, e.Line, e.Message)
	}
	return e.Path + ": " + e.Message
}

// FieldErrors aggregates every problem found in one piece of input. It
// matches ErrInvalid with errors.Is.
type FieldErrors []FieldError

func (es FieldErrors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return fmt.Sprintf("%d invalid field(s): %s", len(es), strings.Join(parts, "; "))
}

// Is makes errors.Is(err, ErrInvalid) true for FieldErrors.
func (es FieldErrors) Is(target error) bool { return target == ErrInvalid }

// Err returns nil when there are no errors, else es itself.
func (es FieldErrors) Err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

// Add appends an error at path.
func (es *FieldErrors) Add(path, format string, args ...any) {
	*es = append(*es, FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
}

// Errorf returns an error whose text is only the formatted message (built for
// users) and which matches kind with errors.Is — e.g. Errorf(ErrNotFound,
// "job %d does not exist", id). Use it where the class should decide the
// status code but must not clutter the message.
func Errorf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, err: fmt.Errorf(format, args...)}
}

type kindError struct {
	kind error
	err  error
}

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }
