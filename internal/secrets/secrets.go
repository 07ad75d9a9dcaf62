// Package secrets seals and opens secret values with the server's master key.
//
// A value is sealed with AES-256-GCM under the 32-byte master key, with a
// fresh random nonce per value and the secret's project, name and version as
// additional data: a sealed value copied onto another secret, project or
// version does not open. Every sealed value records the id of the key that
// sealed it, so a server holding another key says which one it needs, and
// rotation (re-sealing everything under a new key) is possible.
//
// The master key comes from a file that only its owner may read (mode 0600 or
// stricter), or from the TRAINYARD_MASTER_KEY environment variable (base64).
//
// This package imports the standard library only. It never logs, and its
// errors never contain a value.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
)

// KeySize is the length of a master key in bytes (AES-256).
const KeySize = 32

// EnvMasterKey names the environment variable that may hold the master key,
// base64-encoded; it takes precedence over a key file.
const EnvMasterKey = "TRAINYARD_MASTER_KEY"

// Errors callers may test for with errors.Is.
var (
	// ErrWrongKey: the value was sealed with a different master key.
	ErrWrongKey = errors.New("sealed with a different master key")
	// ErrTampered: the sealed value does not authenticate: it was changed,
	// damaged, or moved to another secret, project or version.
	ErrTampered = errors.New("sealed value does not authenticate")
	// ErrKeyFileMode: the key file is readable or writable by group or others.
	ErrKeyFileMode = errors.New("master key file is accessible to group or others")
)

// Key is one master key. It is safe for concurrent use.
type Key struct {
	id   string
	aead cipher.AEAD
}

// NewKey returns the key made of raw, which must be KeySize bytes. raw is not
// retained.
func NewKey(raw []byte) (*Key, error) {
	if len(raw) != KeySize {
		return nil, fmt.Errorf("a master key is %d bytes, got %d; create one with: head -c 32 /dev/urandom > master.key && chmod 600 master.key", KeySize, len(raw))
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, fmt.Errorf("build AES cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("build AES-GCM: %w", err)
	}
	return &Key{id: keyID(raw), aead: aead}, nil
}

// keyID derives a short public name for the key: "k-" and 16 hex digits of a
// domain-separated SHA-256 of it. It identifies the key without revealing it.
func keyID(raw []byte) string {
	h := sha256.New()
	h.Write([]byte("trainyard master key id\x00"))
	h.Write(raw)
	return "k-" + hex.EncodeToString(h.Sum(nil))[:16]
}

// ID returns the key's id, e.g. "k-3f9a0c1d2e4b5a69".
func (k *Key) ID() string { return k.id }

// GenerateKey returns KeySize random bytes from the operating system.
func GenerateKey() ([]byte, error) {
	raw := make([]byte, KeySize)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("read random bytes for a master key: %w", err)
	}
	return raw, nil
}

// ParseKey decodes a key given as text: base64 (standard or URL alphabet,
// padded or not) of KeySize bytes, surrounding space ignored.
func ParseKey(text string) (*Key, error) {
	s := strings.TrimSpace(text)
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if raw, err := enc.DecodeString(s); err == nil {
			if len(raw) != KeySize {
				return nil, fmt.Errorf("the master key decodes to %d bytes, want %d; create one with: head -c 32 /dev/urandom | base64", len(raw), KeySize)
			}
			return NewKey(raw)
		}
	}
	return nil, fmt.Errorf("the master key is not base64 text; create one with: head -c 32 /dev/urandom | base64")
}

// LoadKeyFile reads the master key from path: either exactly KeySize raw
// bytes or the base64 text of them. The file must not be accessible to group
// or others (ErrKeyFileMode): a key anyone on the machine can read protects
// nothing.
func LoadKeyFile(path string) (*Key, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open master key file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat master key file %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("master key file %s is not a regular file", path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s has mode %04o; make it private with: chmod 600 %s", ErrKeyFileMode, path, perm, path)
	}
	if st.Size() > 4096 {
		return nil, fmt.Errorf("master key file %s holds %d bytes; a key is %d raw bytes or their base64 text", path, st.Size(), KeySize)
	}
	b := make([]byte, st.Size()+1)
	n, err := f.Read(b)
	if err != nil && n == 0 && st.Size() > 0 {
		return nil, fmt.Errorf("read master key file %s: %w", path, err)
	}
	b = b[:n]
	var k *Key
	if len(b) == KeySize {
		k, err = NewKey(b)
	} else {
		k, err = ParseKey(string(b))
	}
	clear(b)
	if err != nil {
		return nil, fmt.Errorf("master key file %s: %w", path, err)
	}
	return k, nil
}

// LoadOrCreateKeyFile loads the key at path, first creating the file (mode
// 0600, KeySize random bytes) when it does not exist. created reports
// whether it did.
func LoadOrCreateKeyFile(path string) (k *Key, created bool, err error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		raw, err := GenerateKey()
		if err != nil {
			return nil, false, err
		}
		defer clear(raw)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		switch {
		case errors.Is(err, fs.ErrExist):
			// Another process created it first: use theirs.
		case err != nil:
			return nil, false, fmt.Errorf("create master key file: %w", err)
		default:
			_, werr := f.Write(raw)
			if serr := f.Sync(); werr == nil {
				werr = serr
			}
			if cerr := f.Close(); werr == nil {
				werr = cerr
			}
			if werr != nil {
				os.Remove(path)
				return nil, false, fmt.Errorf("write master key file %s: %w", path, werr)
			}
			created = true
		}
	}
	k, err = LoadKeyFile(path)
	return k, created, err
}

// Scope is what a sealed value is bound to. Opening with any other scope
// fails.
type Scope struct {
	Project string // "" for a global secret
	Name    string
	Version int
}

func (s Scope) String() string {
	if s.Project == "" {
		return s.Name + " v" + strconv.Itoa(s.Version)
	}
	return s.Project + "/" + s.Name + " v" + strconv.Itoa(s.Version)
}

// additionalData is the GCM additional data of a scope. The parts are
// length-prefixed, so no two scopes share an encoding.
func (s Scope) additionalData() []byte {
	var b []byte
	b = append(b, "trainyard-secret-v1"...)
	for _, part := range []string{s.Project, s.Name, strconv.Itoa(s.Version)} {
		b = strconv.AppendInt(append(b, 0), int64(len(part)), 10)
		b = append(append(b, ':'), part...)
	}
	return b
}

// Sealed is an encrypted value and the id of the key that sealed it.
type Sealed struct {
	KeyID      string
	Nonce      []byte
	Ciphertext []byte // includes the GCM tag
}

// Seal encrypts plaintext for scope under k with a fresh random nonce.
func (k *Key) Seal(scope Scope, plaintext []byte) (Sealed, error) {
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return Sealed{}, fmt.Errorf("seal secret %s: read random nonce: %w", scope, err)
	}
	ct := k.aead.Seal(nil, nonce, plaintext, scope.additionalData())
	return Sealed{KeyID: k.id, Nonce: nonce, Ciphertext: ct}, nil
}

// Open decrypts s for scope. It fails with ErrWrongKey (naming both key
// ids) when another key sealed s, and with ErrTampered when s does not
// authenticate.
func (k *Key) Open(scope Scope, s Sealed) ([]byte, error) {
	if s.KeyID != k.id {
		return nil, fmt.Errorf("open secret %s: %w: it was sealed with master key %s, but this server holds %s; start the server with the key that sealed it (see docs/secrets.md)", scope, ErrWrongKey, s.KeyID, k.id)
	}
	if len(s.Nonce) != k.aead.NonceSize() {
		return nil, fmt.Errorf("open secret %s: %w: the nonce is %d bytes, want %d", scope, ErrTampered, len(s.Nonce), k.aead.NonceSize())
	}
	pt, err := k.aead.Open(nil, s.Nonce, s.Ciphertext, scope.additionalData())
	if err != nil {
		return nil, fmt.Errorf("open secret %s: %w: it was changed, damaged, or copied from another secret; set it again with: trainyard secret set", scope, ErrTampered)
	}
	return pt, nil
}

// Keyring holds the server's current master key and coordinates rotation:
// work that seals or opens values runs under With, and Rotate swaps the key
// only while no such work runs, so nothing is ever sealed with a key that
// is being retired. It is safe for concurrent use.
type Keyring struct {
	mu  sync.RWMutex // held for reading by With, for writing by Rotate
	cur *Key
}

// NewKeyring returns a keyring holding k.
func NewKeyring(k *Key) *Keyring { return &Keyring{cur: k} }

// LoadKeyring loads the master key the way the server does: from the
// environment variable EnvMasterKey when getenv returns it non-empty, else
// from keyFile, created (0600, random) when absent. source says where the key
// came from, for the server's log; created reports a new key file.
func LoadKeyring(keyFile string, getenv func(string) string) (r *Keyring, source string, created bool, err error) {
	if v := getenv(EnvMasterKey); v != "" {
		k, err := ParseKey(v)
		if err != nil {
			return nil, "", false, fmt.Errorf("%s: %w", EnvMasterKey, err)
		}
		return NewKeyring(k), "environment variable " + EnvMasterKey, false, nil
	}
	if keyFile == "" {
		return nil, "", false, fmt.Errorf("no master key: set %s or give a master key file", EnvMasterKey)
	}
	k, created, err := LoadOrCreateKeyFile(keyFile)
	if err != nil {
		return nil, "", false, err
	}
	return NewKeyring(k), keyFile, created, nil
}

// Current returns the key new values are sealed with.
func (r *Keyring) Current() *Key {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.cur
}

// With runs fn with the current key; a rotation waits until fn returns.
func (r *Keyring) With(fn func(k *Key) error) error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return fn(r.cur)
}

// Rotate runs fn with the current key while nothing else uses the keyring;
// when fn succeeds, next becomes the current key. fn typically reseals every
// stored value from the current key to next in one transaction.
func (r *Keyring) Rotate(next *Key, fn func(cur *Key) error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := fn(r.cur); err != nil {
		return err
	}
	r.cur = next
	return nil
}

// Reseal opens s with from and seals the value again under to, for the same
// scope, with a fresh nonce.
func Reseal(from, to *Key, scope Scope, s Sealed) (Sealed, error) {
	pt, err := from.Open(scope, s)
	if err != nil {
		return Sealed{}, err
	}
	defer clear(pt)
	return to.Seal(scope, pt)
}
