package apitypes

import "time"

// Env is one version of a software environment (docs/envs.md).
type Env struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
	Ref     string `json:"ref"` // "name@version", as a spec's env names it
	// Image is the container image executors that run containers use,
	// as stored: pinned by digest (name:tag@sha256:...) when its registry
	// answered at registration (docs/envs.md).
	Image string `json:"image,omitempty"`
	// PathPrefix lists directories put in front of PATH, in order.
	PathPrefix []string          `json:"path_prefix,omitempty"`
	Vars       map[string]string `json:"vars,omitempty"`
	// Check is the command that must pass before a job's entrypoint; a pass is trusted per node for the server's env_check_ttl.
	Check            []string   `json:"check,omitempty"`
	Description      string     `json:"description,omitempty"`
	Digest           string     `json:"digest"` // "sha256:<hex>" of the definition
	Deprecated       bool       `json:"deprecated"`
	DeprecatedReason string     `json:"deprecated_reason,omitempty"`
	DeprecatedAt     *time.Time `json:"deprecated_at,omitempty"`
	CreatedBy        string     `json:"created_by"`
	CreatedAt        time.Time  `json:"created_at"`
	// Created answers POST /api/v1/envs: false when a stored version has
	// the same definition; that version is returned and none is added.
	Created *bool `json:"created,omitempty"`
	// Warnings, in POST /api/v1/envs's answer, tell the one registering
	// what to check (an image kept by its tag: its registry could not be
	// asked).
	Warnings []string `json:"warnings,omitempty"`
}

// EnvList is the answer of GET /api/v1/envs, GET /api/v1/envs/{name} and
// POST /api/v1/envs/{name}/{version}/deprecate: versions ordered by name,
// then version.
type EnvList struct {
	Envs []Env `json:"envs"`
}

// RegisterEnv is the body of POST /api/v1/envs.
type RegisterEnv struct {
	Name        string            `json:"name" yaml:"name"`
	Image       string            `json:"image,omitempty" yaml:"image,omitempty"`
	PathPrefix  []string          `json:"path_prefix,omitempty" yaml:"path_prefix,omitempty"`
	Vars        map[string]string `json:"vars,omitempty" yaml:"vars,omitempty"`
	Check       []string          `json:"check,omitempty" yaml:"check,omitempty"`
	Description string            `json:"description,omitempty" yaml:"description,omitempty"`
}

// DeprecateEnv is the body of POST /api/v1/envs/{name}/{version}/deprecate.
type DeprecateEnv struct {
	Reason string `json:"reason,omitempty"`
}
