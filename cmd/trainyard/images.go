package main

import (
	"errors"
	"fmt"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/imagepin"
	"trainyard/internal/service"
)

// The server config's envs.pin_images modes (docs/envs.md).
const (
	pinImagesAuto     = "auto"     // pin when the registry answers; otherwise keep the tag, with a warning
	pinImagesRequired = "required" // refuse an image by tag that cannot be pinned
	pinImagesOff      = "off"      // store images as given; never ask a registry
)

// envsConfig is the server config's envs: section (docs/envs.md): whether
// environments' container images are pinned by digest when they are
// registered, and how their registries are reached.
type envsConfig struct {
	// PinImages is auto (the default), required or off.
	PinImages string `yaml:"pin_images"`
	// InsecureRegistries may be reached over plain HTTP: host or
	// host:port, as image references name them (e.g. localhost:5000).
	// Every other registry is reached over HTTPS only.
	InsecureRegistries []string `yaml:"insecure_registries"`
	// RegistryTimeout bounds asking a registry for one image (default 5s,
	// at most 1m).
	RegistryTimeout string `yaml:"registry_timeout"`
}

// maxRegistryTimeout bounds envs.registry_timeout: registering waits for it.
const maxRegistryTimeout = time.Minute

// check returns every problem of the section, each as "server config
// envs.FIELD: ...".
func (c envsConfig) check() []error {
	var errs []error
	switch c.PinImages {
	case "", pinImagesAuto, pinImagesRequired, pinImagesOff:
	default:
		errs = append(errs, fmt.Errorf("server config envs.pin_images: %q is not a mode; use auto (pin when the registry answers, else keep the tag with a warning), required or off", c.PinImages))
	}
	for i, r := range c.InsecureRegistries {
		if err := imagepin.CheckRegistry(r); err != nil {
			errs = append(errs, fmt.Errorf("server config envs.insecure_registries[%d]: %w", i, err))
		}
	}
	if _, err := c.timeout(); err != nil {
		errs = append(errs, err)
	}
	return errs
}

func (c envsConfig) timeout() (time.Duration, error) {
	if c.RegistryTimeout == "" {
		return imagepin.DefaultTimeout, nil
	}
	d, err := domain.ParseDuration(c.RegistryTimeout)
	if err != nil || d <= 0 || d > maxRegistryTimeout {
		return 0, fmt.Errorf("server config envs.registry_timeout: %q is not a duration from 1ms to %s; use e.g. 5s (the default)", c.RegistryTimeout, domain.FormatDuration(maxRegistryTimeout))
	}
	return d, nil
}

// pinner returns the image pinner the section sets (nil with pin_images:
// off) and whether pinning is required.
func (c envsConfig) pinner() (service.ImagePinner, bool, error) {
	if errs := c.check(); len(errs) > 0 {
		return nil, false, errors.Join(errs...)
	}
	if c.PinImages == pinImagesOff {
		return nil, false, nil
	}
	timeout, _ := c.timeout()
	p, err := imagepin.New(imagepin.Config{Insecure: c.InsecureRegistries, Timeout: timeout})
	if err != nil {
		return nil, false, fmt.Errorf("server config envs: %w", err)
	}
	return p, c.PinImages == pinImagesRequired, nil
}
