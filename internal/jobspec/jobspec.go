// Package jobspec reads job specs: it parses a YAML or JSON document, applies
// "--set key=value" overrides, fills defaults, validates every rule and
// produces the canonical JSON that is stored as the job's config snapshot.
//
// Problems are returned as domain.FieldErrors holding every problem at once,
// each with its field path, the source line when known, and a message that
// says how to fix it. The package is pure: it reads no files, environment or
// clock, so the API server and the CLI validate specs identically.
package jobspec

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"trainyard/internal/domain"
)

// Default values filled by Load for fields the document leaves out.
const (
	DefaultProject        = "default"
	DefaultPool           = "default"
	DefaultEnv            = "host"
	DefaultCPUs           = 1.0
	DefaultMemory         = domain.ByteSize(1 << 30) // 1GiB
	DefaultNodes          = 1
	DefaultTimeout        = 72 * time.Hour
	DefaultPriority       = domain.PriorityNormal
	DefaultCheckpointKeep = 3
)

// Defaults returns the spec that Load starts from before reading a
// document: every defaulted field set, everything else empty.
func Defaults() domain.Spec {
	return domain.Spec{
		Project:   DefaultProject,
		Pool:      DefaultPool,
		Env:       DefaultEnv,
		Resources: domain.Resources{CPUs: DefaultCPUs, Memory: DefaultMemory, Nodes: DefaultNodes},
		Policy: domain.Policy{
			Timeout:  domain.Duration(DefaultTimeout),
			Priority: DefaultPriority,
		},
		Checkpoint: domain.Checkpoint{Keep: DefaultCheckpointKeep},
	}
}

// Load parses a YAML or JSON spec document, applies "key=value" overrides,
// fills defaults and validates. On failure the error is domain.FieldErrors
// holding every problem with its field path (and source line when known).
//
// Defaults apply to fields that are absent from the document, so an
// explicit zero ("nodes: 0", "memory: 0") is reported rather than replaced.
func Load(doc []byte, sets []string) (domain.Spec, error) {
	if len(doc) > loadCacheMaxDoc {
		return load(doc, sets)
	}
	k := loadCacheKey(doc, sets)
	if s, ok := cachedLoad(k); ok {
		return s, nil
	}
	s, err := load(doc, sets)
	if err == nil {
		keepLoad(k, s)
	}
	return s, err
}

// load is Load without the cache (see cache.go).
func load(doc []byte, sets []string) (domain.Spec, error) {
	s, res := decode(doc, sets, Defaults())
	errs := res.errs
	if !res.fatal {
		for _, e := range Validate(s) {
			if res.covered(e.Path) {
				continue
			}
			if e.Line == 0 {
				e.Line = res.lineOf(e.Path)
			}
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		return domain.Spec{}, sortErrors(errs)
	}
	return s, nil
}

// sortErrors orders problems for reading: document problems, then override
// problems by index, then the rest by source line, then problems without a
// line. The sort is stable, so equal keys keep the order they were found in.
func sortErrors(es domain.FieldErrors) domain.FieldErrors {
	rank := func(e domain.FieldError) (int, int) {
		switch {
		case e.Path == docPath:
			return 0, e.Line
		case strings.HasPrefix(e.Path, "set["):
			i, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(e.Path, "set["), "]"))
			return 1, i
		case e.Line > 0:
			return 2, e.Line
		}
		return 3, 0
	}
	slices.SortStableFunc(es, func(a, b domain.FieldError) int {
		ga, ka := rank(a)
		gb, kb := rank(b)
		return cmp.Or(cmp.Compare(ga, gb), cmp.Compare(ka, kb))
	})
	return es
}

// Parse decodes a spec document without overrides, defaults or validation.
// It reports only problems of form: syntax, unknown fields, duplicate keys
// and values of the wrong type. Fields absent from the document stay zero.
func Parse(doc []byte) (domain.Spec, error) {
	s, res := decode(doc, nil, domain.Spec{})
	if len(res.errs) > 0 {
		return s, sortErrors(res.errs)
	}
	return s, nil
}

// ApplyDefaults fills the zero-valued fields of s with their defaults. It is
// for specs built in code; it cannot tell an explicit zero from a missing
// value, so a zero timeout becomes the default 72h and a zero checkpoint.keep
// becomes 3. Load, which sees the document, applies defaults by presence.
func ApplyDefaults(s *domain.Spec) {
	d := Defaults()
	if s.Project == "" {
		s.Project = d.Project
	}
	if s.Pool == "" {
		s.Pool = d.Pool
	}
	if s.Env == "" {
		s.Env = d.Env
	}
	if s.Resources.CPUs == 0 {
		s.Resources.CPUs = d.Resources.CPUs
	}
	if s.Resources.Memory == 0 {
		s.Resources.Memory = d.Resources.Memory
	}
	if s.Resources.Nodes == 0 {
		s.Resources.Nodes = d.Resources.Nodes
	}
	if s.Policy.Timeout == 0 {
		s.Policy.Timeout = d.Policy.Timeout
	}
	if s.Policy.Priority == "" {
		s.Policy.Priority = d.Policy.Priority
	}
	if s.Checkpoint.Keep == 0 {
		s.Checkpoint.Keep = d.Checkpoint.Keep
	}
}

// Canonical returns the canonical JSON of s (struct field order, sorted map
// keys, no insignificant whitespace, no HTML escaping) and "sha256:<hex>" of
// it. Loading the canonical JSON gives back a spec with the same canonical
// JSON. A non-finite resources.cpus, which Validate rejects and JSON cannot
// hold, is written as 0.
func Canonical(s domain.Spec) ([]byte, string) {
	if math.IsNaN(s.Resources.CPUs) || math.IsInf(s.Resources.CPUs, 0) {
		s.Resources.CPUs = 0
	}
	// Every submit encodes its spec: the encoder writes into a buffer
	// kept from an earlier call, and the result is one copy of exactly
	// the bytes, not the buffer's growth.
	buf := canonicalBufs.Get().(*bytes.Buffer)
	defer canonicalBufs.Put(buf)
	buf.Reset()
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		// Unreachable: every field of domain.Spec encodes once CPUs is finite.
		panic("jobspec: encoding a spec failed: " + err.Error())
	}
	b := bytes.Clone(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	if buf.Cap() > maxKeptCanonicalBuf {
		*buf = bytes.Buffer{} // an outsized spec's buffer is not kept
	}
	return b, specHash(b)
}

// specHash is "sha256:<hex>" of b, the hash Canonical returns with b.
func specHash(b []byte) string {
	sum := sha256.Sum256(b)
	var h [len("sha256:") + 2*sha256.Size]byte
	copy(h[:], "sha256:")
	hex.Encode(h[len("sha256:"):], sum[:])
	return string(h[:])
}

// canonicalBufs holds Canonical's encoding buffers, up to
// maxKeptCanonicalBuf bytes each.
var canonicalBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const maxKeptCanonicalBuf = 64 << 10
