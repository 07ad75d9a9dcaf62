package blob

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"strings"
)

// Verify reads the whole object at key and checks that its SHA-256 is
// wantSHA256 (hex, either case). On a mismatch it returns a *CorruptError
// ("blob KEY is corrupt: sha256 X, expected Y"), which matches ErrCorrupt.
func Verify(ctx context.Context, s Store, key, wantSHA256 string) (Info, error) {
	rc, info, err := s.Get(ctx, key)
	if err != nil {
		return Info{}, err
	}
	defer rc.Close()
	if _, err := io.Copy(io.Discard, VerifyingReader(key, rc, wantSHA256)); err != nil {
		return info, err
	}
	return info, nil
}

// VerifyingReader passes r through and hashes it; at the end of r it returns
// a *CorruptError instead of io.EOF when the content's SHA-256 is not
// wantSHA256 (hex, either case). Use it to check a download while streaming it.
func VerifyingReader(key string, r io.Reader, wantSHA256 string) io.Reader {
	return &verifyingReader{key: key, r: r, want: strings.ToLower(wantSHA256), h: sha256.New()}
}

type verifyingReader struct {
	key  string
	r    io.Reader
	want string
	h    hash.Hash
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	if err == io.EOF {
		if got := hex.EncodeToString(v.h.Sum(nil)); got != v.want {
			return n, &CorruptError{Key: v.key, Got: got, Want: v.want}
		}
	}
	return n, err
}

// PutFile stores the file at path under key. Backends that can use the
// file's size and seekability (such as s3, which then uploads without
// spooling) do so.
func PutFile(ctx context.Context, s Store, key, path string) (Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return Info{}, fmt.Errorf("put blob %q from file: %w", key, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Info{}, fmt.Errorf("put blob %q from file: %w", key, err)
	}
	if !st.Mode().IsRegular() {
		return Info{}, fmt.Errorf("put blob %q from file %s: not a regular file", key, path)
	}
	return s.Put(ctx, key, f, st.Size())
}

// HashingReader counts and hashes what passes through it, and checks a
// declared size: it fails with ErrSizeMismatch as soon as r yields more than
// size bytes, and at the end when it yielded fewer. size -1 disables the
// check. It also stops with ctx's error once ctx is done. Backends build
// their Put on it.
type HashingReader struct {
	ctx  context.Context
	key  string
	r    io.Reader
	size int64
	n    int64
	h    hash.Hash
}

// NewHashingReader returns a HashingReader over r for the object at key.
func NewHashingReader(ctx context.Context, key string, r io.Reader, size int64) *HashingReader {
	return &HashingReader{ctx: ctx, key: key, r: r, size: size, h: sha256.New()}
}

// Read implements io.Reader.
func (h *HashingReader) Read(p []byte) (int, error) {
	if err := h.ctx.Err(); err != nil {
		return 0, err
	}
	if h.size >= 0 {
		if rest := h.size - h.n; int64(len(p)) > rest {
			p = p[:rest]
		}
		if len(p) == 0 {
			// All declared bytes are read: make sure there are no more.
			var one [1]byte
			for {
				n, err := h.r.Read(one[:])
				if n > 0 {
					return 0, fmt.Errorf("blob %q: reader has more than the declared %d bytes: %w", h.key, h.size, ErrSizeMismatch)
				}
				if err == io.EOF {
					return 0, io.EOF
				}
				if err != nil {
					return 0, err
				}
			}
		}
	}
	n, err := h.r.Read(p)
	h.n += int64(n)
	h.h.Write(p[:n])
	if err == io.EOF && h.size >= 0 && h.n < h.size {
		return n, fmt.Errorf("blob %q: reader ended after %d of the declared %d bytes: %w", h.key, h.n, h.size, ErrSizeMismatch)
	}
	return n, err
}

// N returns the number of bytes read so far.
func (h *HashingReader) N() int64 { return h.n }

// SHA256 returns the hex SHA-256 of the bytes read so far.
func (h *HashingReader) SHA256() string { return hex.EncodeToString(h.h.Sum(nil)) }
