package blob

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxKeyLen is the longest key accepted, in bytes. It leaves room in S3's
// 1024-byte object names for a store prefix.
const MaxKeyLen = 896

// MaxSegmentLen is the longest segment (the text between slashes) accepted,
// in bytes: the file-name limit of common file systems.
const MaxSegmentLen = 255

// ReservedPrefix starts the names that backends use for their own files
// (such as in-flight uploads); no key segment may start with it.
const ReservedPrefix = ".blob-tmp-"

// ErrInvalidKey reports a key that breaks the key rules; errors of type
// *KeyError match it.
var ErrInvalidKey = errors.New("invalid blob key")

// KeyError reports why a key is invalid.
type KeyError struct {
	Key    string
	Reason string
}

func (e *KeyError) Error() string {
	return fmt.Sprintf("invalid blob key %q: %s", e.Key, e.Reason)
}

// Is makes a *KeyError match ErrInvalidKey.
func (e *KeyError) Is(target error) bool { return target == ErrInvalidKey }

// ValidateKey checks a key against the rules every backend shares: 1 to
// MaxKeyLen bytes of valid UTF-8 without control characters or backslashes;
// segments of at most MaxSegmentLen bytes separated by single "/", with no
// leading or trailing "/" and no empty, "." or ".." segment; no segment starting with ReservedPrefix.
// It returns a *KeyError naming the broken rule.
func ValidateKey(key string) error {
	bad := func(reason string) error { return &KeyError{Key: key, Reason: reason} }
	switch {
	case key == "":
		return bad("key is empty; use a slash-separated path such as \"project/run/model.bin\"")
	case len(key) > MaxKeyLen:
		return bad(fmt.Sprintf("key is %d bytes long; the limit is %d", len(key), MaxKeyLen))
	case !utf8.ValidString(key):
		return bad("key is not valid UTF-8")
	case strings.HasPrefix(key, "/"):
		return bad("key starts with \"/\"; keys are relative, drop the leading slash")
	case strings.HasSuffix(key, "/"):
		return bad("key ends with \"/\"; a key names an object, not a directory")
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return bad(fmt.Sprintf("key contains control character %U", r))
		}
		if r == '\\' {
			return bad("key contains a backslash; separate segments with \"/\"")
		}
	}
	for seg := range strings.SplitSeq(key, "/") {
		switch {
		case seg == "":
			return bad("key has an empty segment (\"//\")")
		case seg == "." || seg == "..":
			return bad(fmt.Sprintf("key has a %q segment; relative path segments are not allowed", seg))
		case len(seg) > MaxSegmentLen:
			return bad(fmt.Sprintf("key segment %.20q... is %d bytes long; the limit is %d", seg, len(seg), MaxSegmentLen))
		case strings.HasPrefix(seg, ReservedPrefix):
			return bad(fmt.Sprintf("key segment %q starts with the reserved prefix %q", seg, ReservedPrefix))
		}
	}
	return nil
}

// ValidatePrefix checks a List prefix: "" or a string whose part up to its
// last "/" is a valid key (the rest is a partial segment and may be
// anything). It returns a *KeyError otherwise.
func ValidatePrefix(prefix string) error {
	i := strings.LastIndex(prefix, "/")
	if i < 0 {
		return nil
	}
	if err := ValidateKey(prefix[:i]); err != nil {
		return &KeyError{Key: prefix, Reason: "list prefix: " + err.(*KeyError).Reason}
	}
	return nil
}
