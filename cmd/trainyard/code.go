package main

import (
	"fmt"

	"trainyard/internal/codepkg"
	"trainyard/internal/domain"
)

// codeConfig is the server config's code: section, what unpacking one
// attempt's code package may write (docs/code.md).
type codeConfig struct {
	// MaxUnpacked bounds the total size of the package's files (default
	// 2GiB).
	MaxUnpacked string `yaml:"max_unpacked"`
	// MaxFiles bounds its files, directories and links (default 100000).
	MaxFiles int `yaml:"max_files"`
}

// limits checks the section and returns the limits it sets; what it leaves
// out takes the defaults.
func (c codeConfig) limits() (codepkg.Limits, error) {
	lim := codepkg.Limits{MaxBytes: codepkg.DefaultMaxUnpacked, MaxFiles: codepkg.DefaultMaxFiles}
	if c.MaxUnpacked != "" {
		b, err := domain.ParseByteSize(c.MaxUnpacked)
		if err != nil || b <= 0 {
			return lim, fmt.Errorf("server config code.max_unpacked: %q is not a positive size; use e.g. 2GiB or 500MiB", c.MaxUnpacked)
		}
		lim.MaxBytes = int64(b)
	}
	if c.MaxFiles < 0 {
		return lim, fmt.Errorf("server config code.max_files: %d is negative; use a positive count such as 100000, or leave it out for the default", c.MaxFiles)
	}
	if c.MaxFiles > 0 {
		lim.MaxFiles = c.MaxFiles
	}
	return lim, nil
}
