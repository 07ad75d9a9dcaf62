package cli

import (
	"io"
	"strings"
	"testing"
)

func TestReadSecretValue(t *testing.T) {
	tests := map[string]struct {
		in      string
		want    string
		wantErr string
	}{
		"trailing newline stripped": {in: "s3cret\n", want: "s3cret"},
		"CRLF stripped":             {in: "s3cret\r\n", want: "s3cret"},
		"only one newline stripped": {in: "s3cret\n\n", want: "s3cret\n"},
		"no newline":                {in: "s3cret", want: "s3cret"},
		"inner newlines kept":       {in: "line1\nline2\n", want: "line1\nline2"},
		"surrounding spaces kept":   {in: "  s3cret \n", want: "  s3cret "},
		"empty":                     {in: "", wantErr: "no value on stdin"},
		"just a newline":            {in: "\n", wantErr: "no value on stdin"},
		"not UTF-8":                 {in: "\xff\xfe\xfd\xfc", wantErr: "not UTF-8"},
		"too large":                 {in: strings.Repeat("x", maxSecretInput+1), wantErr: "larger than"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := readSecretValue(strings.NewReader(tc.in), io.Discard, "KEY")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || ExitCode(err) != ExitUsage {
					t.Fatalf("readSecretValue = %q, %v; want a usage error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("readSecretValue = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
