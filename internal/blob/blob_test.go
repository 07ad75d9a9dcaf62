package blob_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"trainyard/internal/blob"
)

func TestValidateKeyReasons(t *testing.T) {
	tests := map[string]string{
		"":              "empty",
		"/a":            "starts with \"/\"",
		"a/":            "ends with \"/\"",
		"a//b":          "empty segment",
		"a/../b":        "\"..\" segment",
		"a\\b":          "backslash",
		"a\tb":          "control character",
		"x/.blob-tmp-1": "reserved prefix",
	}
	for key, want := range tests {
		err := blob.ValidateKey(key)
		if !errors.Is(err, blob.ErrInvalidKey) || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateKey(%q) = %v; want ErrInvalidKey saying %q", key, err, want)
		}
	}
	if err := blob.ValidateKey("proj/run-1/ckpt/step-100/model.safetensors"); err != nil {
		t.Errorf("ValidateKey of a typical key: %v", err)
	}
}

func TestVerifyingReader(t *testing.T) {
	const hello = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
	if b, err := io.ReadAll(blob.VerifyingReader("k", strings.NewReader("hello"), strings.ToUpper(hello))); err != nil || string(b) != "hello" {
		t.Errorf("intact content: %q, %v", b, err)
	}
	_, err := io.ReadAll(blob.VerifyingReader("k", strings.NewReader("hellO"), hello))
	want := "blob k is corrupt: sha256 "
	if !errors.Is(err, blob.ErrCorrupt) || !strings.HasPrefix(err.Error(), want) || !strings.HasSuffix(err.Error(), ", expected "+hello) {
		t.Errorf("corrupt content: err = %v; want %q... expected %s", err, want, hello)
	}
}

func TestHashingReaderSize(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		in       string
		size     int64
		mismatch bool
	}{{"abc", 3, false}, {"abc", -1, false}, {"abc", 2, true}, {"abc", 4, true}, {"", 0, false}, {"", 1, true}} {
		_, err := io.Copy(io.Discard, blob.NewHashingReader(ctx, "k", strings.NewReader(tc.in), tc.size))
		if got := errors.Is(err, blob.ErrSizeMismatch); got != tc.mismatch {
			t.Errorf("%q declared %d: err = %v; want mismatch %v", tc.in, tc.size, err, tc.mismatch)
		}
	}
}

func TestCheckRange(t *testing.T) {
	for _, tc := range []struct {
		size, off, length, want int64
		bad                     bool
	}{{10, 0, -1, 10, false}, {10, 8, 5, 2, false}, {10, 10, 1, 0, false}, {10, 11, 1, 0, true}, {10, -1, 1, 0, true}, {10, 0, -2, 0, true}} {
		n, err := blob.CheckRange("k", tc.size, tc.off, tc.length)
		if n != tc.want || errors.Is(err, blob.ErrInvalidRange) != tc.bad {
			t.Errorf("CheckRange(size %d, %d, %d) = %d, %v; want %d, invalid %v", tc.size, tc.off, tc.length, n, err, tc.want, tc.bad)
		}
	}
}
