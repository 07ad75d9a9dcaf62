package domain

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// EnvNamePattern is the rule for environment names: 1–63 lowercase letters,
// digits, '.', '_' and '-', starting with a letter or digit (the name part of
// a spec's env, e.g. "pytorch-2.4").
const EnvNamePattern = `^[a-z0-9][a-z0-9._-]{0,62}$`

// HostEnv is the built-in environment: the machine's own software, with no
// PATH prefix, variables or check. Version 1 exists on every install.
const HostEnv = "host"

// ValidEnvName reports whether name follows EnvNamePattern. A loop, not a
// regexp: a package-level regexp is compiled by every program that links
// this package (the attempt supervisor too), at its start.
func ValidEnvName(name string) bool {
	if len(name) == 0 || len(name) > 63 {
		return false
	}
	for i := range len(name) {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case (c == '.' || c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// Environment is one immutable version of a named software environment that
// jobs run in (spec field env, "name@version"). Image is for executors that
// run containers; PathPrefix, Vars and Check are applied by every executor
// that runs processes on a host. Only Deprecated, DeprecatedReason and
// DeprecatedAt ever change, and only once, from not deprecated to deprecated.
type Environment struct {
	Name    string
	Version int // from 1, one more per registered definition
	// Image is a container image reference, e.g.
	// "registry.example.com/pytorch:2.4-cuda12"; "" for none.
	Image string
	// PathPrefix lists absolute directories put in front of PATH, in order.
	PathPrefix []string
	// Vars are environment variables the job gets; the job's own env_vars
	// override them.
	Vars map[string]string
	// Check is a command (argv) run before an attempt's entrypoint, in the
	// environment's own variables (none of the job's) in /; a failure ends
	// the attempt with reason EnvironmentCheckFailed. A pass is trusted on
	// a node for a while (docs/envs.md). Empty: no check.
	Check       []string
	Description string
	// Digest is "sha256:<hex>" of the definition's canonical JSON (see
	// EnvDigest): two versions with the same digest run jobs identically.
	Digest           string
	Deprecated       bool
	DeprecatedReason string
	DeprecatedAt     time.Time // zero while not deprecated
	CreatedBy        string    // e.g. "user:alice"
	CreatedAt        time.Time
}

// Ref is "name@version".
func (e Environment) Ref() string { return e.Name + "@" + strconv.Itoa(e.Version) }

// envDefinition is what EnvDigest hashes: what changes how a job runs. The
// description does not.
type envDefinition struct {
	Image      string            `json:"image,omitempty"`
	PathPrefix []string          `json:"path_prefix,omitempty"`
	Vars       map[string]string `json:"vars,omitempty"`
	Check      []string          `json:"check,omitempty"`
}

// EnvDigest returns "sha256:<hex>" of the canonical JSON of e's definition:
// Image, PathPrefix, Vars (keys sorted) and Check. Empty and absent lists
// and maps hash alike; Name, Version and Description are not part of it.
func EnvDigest(e Environment) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	// Unreachable error: strings, lists and maps of strings always encode.
	_ = enc.Encode(envDefinition{Image: e.Image, PathPrefix: e.PathPrefix, Vars: e.Vars, Check: e.Check})
	sum := sha256.Sum256(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// HostEnvironment is the built-in environment host@1.
func HostEnvironment(createdAt time.Time) Environment {
	e := Environment{Name: HostEnv, Version: 1, CreatedBy: "system:bootstrap", CreatedAt: createdAt,
		Description: "the machine's own software: no image, PATH prefix, variables or check"}
	e.Digest = EnvDigest(e)
	return e
}

// ParseEnvRef splits a spec's env into the environment's name and version:
// "name@N" gives N, "name" gives version 0 (the latest). A version that is
// not a whole number from 1 is an error that says so.
func ParseEnvRef(ref string) (name string, version int, err error) {
	name, v, pinned := strings.Cut(ref, "@")
	if !ValidEnvName(name) {
		return "", 0, Errorf(ErrInvalid, "environment name %q may use only lowercase letters, digits, '.', '_' and '-' (at most 63), starting with a letter or digit", name)
	}
	if !pinned {
		return name, 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || strconv.Itoa(n) != v {
		return "", 0, Errorf(ErrInvalid, "environment version %q of %s is not a version number; versions are whole numbers from 1, e.g. %s@1", v, name, name)
	}
	return name, n, nil
}
