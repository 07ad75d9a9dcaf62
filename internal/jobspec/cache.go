package jobspec

import (
	"crypto/sha256"
	"encoding/binary"
	"maps"
	"slices"
	"sync"

	"trainyard/internal/domain"
)

// Load's results for documents it has read before: clients resubmit the
// same text (reruns, retries, scripts that submit one spec many times),
// and reading it again costs more than the rest of a submit's checks.
// Only specs that loaded without a problem are kept; each use gets its own
// copy (cloneSpec), so no caller sees another's changes.
const (
	loadCacheSize   = 256      // entries
	loadCacheMaxDoc = 16 << 10 // bytes; a larger document is read every time (specs are a few KiB)
)

type loadKey [sha256.Size]byte

var loadCache = struct {
	sync.Mutex
	specs map[loadKey]domain.Spec
}{specs: map[loadKey]domain.Spec{}}

// loadCacheKey identifies a Load call: the document and the overrides,
// each prefixed by its length, so no two calls share a key.
func loadCacheKey(doc []byte, sets []string) loadKey {
	h := sha256.New()
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(doc)))
	h.Write(n[:])
	h.Write(doc)
	for _, s := range sets {
		binary.LittleEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	var k loadKey
	h.Sum(k[:0])
	return k
}

// cachedLoad returns a copy of the spec Load returned for key, if kept.
func cachedLoad(k loadKey) (domain.Spec, bool) {
	loadCache.Lock()
	s, ok := loadCache.specs[k]
	loadCache.Unlock()
	if !ok {
		return domain.Spec{}, false
	}
	return cloneSpec(s), true
}

// keepLoad keeps a copy of s, a spec Load returned without problems, for
// key; when the cache is full, an arbitrary entry makes room.
func keepLoad(k loadKey, s domain.Spec) {
	s = cloneSpec(s)
	loadCache.Lock()
	defer loadCache.Unlock()
	if len(loadCache.specs) >= loadCacheSize {
		for old := range loadCache.specs {
			delete(loadCache.specs, old)
			break
		}
	}
	loadCache.specs[k] = s
}

// cloneSpec copies s so that it shares no slice, map or pointer with the
// original (nil stays nil, empty stays empty).
func cloneSpec(s domain.Spec) domain.Spec {
	s.Entrypoint = slices.Clone(s.Entrypoint)
	s.Inputs = slices.Clone(s.Inputs)
	s.Params = maps.Clone(s.Params)
	s.EnvVars = maps.Clone(s.EnvVars)
	s.Secrets = slices.Clone(s.Secrets)
	s.Labels = maps.Clone(s.Labels)
	if s.Policy.Warn != nil {
		w := *s.Policy.Warn
		s.Policy.Warn = &w
	}
	s.After = slices.Clone(s.After)
	if s.Sweep != nil {
		sw := *s.Sweep
		sw.Indices = slices.Clone(sw.Indices)
		sw.Params = maps.Clone(sw.Params) // values are read, never written
		if sw.Objective != nil {
			o := *sw.Objective
			sw.Objective = &o
		}
		if sw.EarlyStop != nil {
			e := *sw.EarlyStop
			sw.EarlyStop = &e
		}
		s.Sweep = &sw
	}
	if s.Notify != nil {
		n := domain.Notify{On: slices.Clone(s.Notify.On), Channels: slices.Clone(s.Notify.Channels), Email: slices.Clone(s.Notify.Email)}
		s.Notify = &n
	}
	if s.Resume != nil {
		r := *s.Resume
		s.Resume = &r
	}
	return s
}
