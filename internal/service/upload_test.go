package service_test

import (
	"errors"
	"strings"
	"testing"

	"trainyard/internal/domain"
	"trainyard/internal/service"
)

// An upload's path is relative and clean, and bounded: anything else is
// a field error on path that says what is wrong.
func TestCheckUploadPath(t *testing.T) {
	for _, ok := range []string{"model.bin", "checkpoints/step-100/model.pt", "checkpoints/step-100/.complete",
		"a b/ü.txt", "..x/x..", strings.Repeat("a", 255), strings.Repeat("abcdefg/", 511) + "abcdefg"} {
		if err := service.CheckUploadPath(ok); err != nil {
			t.Errorf("%.40q: %v, want accepted", ok, err)
		}
	}
	for bad, says := range map[string]string{
		"":                                    "empty",
		"/etc/x":                              "absolute",
		"../x":                                `".."`,
		"a/../../x":                           `".."`,
		"..":                                  `".."`,
		"a//b":                                "empty component",
		"a/":                                  "empty component",
		"./a":                                 `"."`,
		"a/./b":                               `"."`,
		"a\x00b":                              "NUL",
		strings.Repeat("a", 256):              "256 bytes",
		strings.Repeat("abcdefg/", 512) + "a": "4097 bytes",
	} {
		err := service.CheckUploadPath(bad)
		var fe domain.FieldErrors
		if !errors.As(err, &fe) || len(fe) != 1 || fe[0].Path != "path" || !strings.Contains(fe[0].Message, says) {
			t.Errorf("%.40q: %v, want a field error on path saying %q", bad, err, says)
		}
	}
}
