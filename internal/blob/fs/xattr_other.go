//go:build !linux

package fs

import (
	"errors"
	"os"
)

var errNoXattr = errors.New("extended attributes not supported")

func setSHA256(*os.File, string) error { return errNoXattr }

func getSHA256(*os.File) (string, error) { return "", errNoXattr }
