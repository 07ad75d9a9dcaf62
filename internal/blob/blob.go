// Package blob defines the object store that holds artifacts and checkpoints:
// a flat namespace of slash-separated keys mapped to immutable byte strings,
// each written atomically and described by its size and SHA-256.
//
// Backends live in subpackages (fs for a local directory, s3 for an
// S3-compatible service) and all pass the conformance suite in blobtest.
// The package itself holds the interface, key rules, errors and the integrity
// helpers (Verify, VerifyingReader, PutFile) that work over any Store.
package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"time"
)

// Store is an object store. Implementations are safe for concurrent use.
//
// Every method validates its key with ValidateKey first and returns an error
// matching ErrInvalidKey when it fails. A missing object yields an error
// matching ErrNotFound.
type Store interface {
	// Put stores the bytes read from r under key, replacing any object there.
	// size is the exact number of bytes r yields, or -1 when unknown; when it
	// is not -1 and r yields a different count, Put fails and stores nothing.
	// The write is atomic: readers see the old object or the whole new one,
	// never a part. Put returns the stored object's Info, SHA256 included.
	Put(ctx context.Context, key string, r io.Reader, size int64) (Info, error)

	// Get opens the object at key. The caller must close the reader.
	Get(ctx context.Context, key string) (io.ReadCloser, Info, error)

	// GetRange opens length bytes of the object at key starting at offset;
	// length -1 means "to the end". A range reaching past the end is cut
	// short at the end (a short read, not an error); offset == size yields an
	// empty reader; offset > size fails with an error matching ErrInvalidRange.
	// Info describes the whole object.
	GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, Info, error)

	// Stat describes the object at key without reading it.
	Stat(ctx context.Context, key string) (Info, error)

	// Delete removes the object at key. Deleting a missing object succeeds.
	Delete(ctx context.Context, key string) error

	// List yields the objects whose keys start with prefix (a plain string
	// prefix, not only whole segments: "ckpt/step-1" matches
	// "ckpt/step-10/model"), in ascending byte order of key. It fills Key,
	// Size and ModTime; SHA256 is left empty (use Stat). On failure it yields
	// one non-nil error and stops. Objects written or deleted while listing
	// may or may not appear.
	List(ctx context.Context, prefix string) iter.Seq2[Info, error]
}

// Info describes a stored object.
type Info struct {
	// Key is the object's key.
	Key string
	// Size is the object's length in bytes.
	Size int64
	// SHA256 is the lowercase hex SHA-256 of the content recorded when the
	// object was written, or "" when the backend could not record it (and in
	// List results).
	SHA256 string
	// ModTime is when the object was last written.
	ModTime time.Time
}

// ErrNotFound reports that no object exists at the key.
var ErrNotFound = errors.New("blob not found")

// ErrInvalidRange reports a ranged read that starts past the end of the
// object or has a negative offset or length.
var ErrInvalidRange = errors.New("invalid blob range")

// ErrSizeMismatch reports that Put read a different number of bytes than the
// size it was given; nothing was stored.
var ErrSizeMismatch = errors.New("blob size mismatch")

// ErrCorrupt reports content that does not match its expected SHA-256.
// Errors of type *CorruptError match it.
var ErrCorrupt = errors.New("blob is corrupt")

// NotFound returns an error for a missing key that matches ErrNotFound.
func NotFound(key string) error {
	return fmt.Errorf("blob %q: %w", key, ErrNotFound)
}

// CorruptError reports that the content of a blob hashed to Got instead of
// Want.
type CorruptError struct {
	Key  string
	Got  string // hex SHA-256 of the content read
	Want string // hex SHA-256 expected
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("blob %s is corrupt: sha256 %s, expected %s", e.Key, e.Got, e.Want)
}

// Is makes a *CorruptError match ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// CheckRange validates a ranged read of an object of the given size and
// returns the number of bytes it covers. Backends use it so that all of them
// agree on the rules documented on Store.GetRange.
func CheckRange(key string, size, offset, length int64) (int64, error) {
	if offset < 0 || length < -1 {
		return 0, fmt.Errorf("blob %q: range offset %d length %d: offset must be >= 0 and length >= -1: %w", key, offset, length, ErrInvalidRange)
	}
	if offset > size {
		return 0, fmt.Errorf("blob %q: range offset %d is past the end of the object (size %d); ask for offset <= size: %w", key, offset, size, ErrInvalidRange)
	}
	n := size - offset
	if length >= 0 && length < n {
		n = length
	}
	return n, nil
}
