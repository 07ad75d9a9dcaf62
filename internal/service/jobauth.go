package service

import (
	"slices"
	"sync"
	"sync/atomic"
)

// jobAuthIndex knows which cached authentications (core.auth, by token
// hash) belong to which attempt, so that attempts' ends forget theirs
// alone: in a busy pool attempts end many times a second, and emptying
// the whole cache at each end would make every user's next request read
// its token and roles again.
//
// ends counts the forgets. An authentication that read its token before
// an end deleted it may cache it after that end's forget ran; it loaded
// ends before its read and drops its entry again when ends has moved
// since (add), so an ended attempt's token never stays cached.
type jobAuthIndex struct {
	ends atomic.Uint64

	mu     sync.Mutex
	hashes map[AttemptRef][]string // attempt → hashes of its cached tokens
}

// add records that the token hashed hash, of attempt ref, was cached in
// auth by an authentication that loaded ends before reading the token.
func (x *jobAuthIndex) add(auth *sync.Map, ref AttemptRef, hash string, ends uint64) {
	x.mu.Lock()
	if x.hashes == nil {
		x.hashes = map[AttemptRef][]string{}
	}
	if !slices.Contains(x.hashes[ref], hash) {
		x.hashes[ref] = append(x.hashes[ref], hash)
	}
	x.mu.Unlock()
	if x.ends.Load() != ends {
		// An end may have come between the read and the cache: its
		// attempt is unknown here, so this entry goes (the next request
		// reads the token again).
		auth.Delete(hash)
	}
}

// forget drops the cached tokens of attempts refs from auth.
func (x *jobAuthIndex) forget(auth *sync.Map, refs []AttemptRef) {
	x.ends.Add(1)
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, ref := range refs {
		for _, h := range x.hashes[ref] {
			auth.Delete(h)
		}
		delete(x.hashes, ref)
	}
}

// forgetAll drops every cached job token from auth, and the index with
// them.
func (x *jobAuthIndex) forgetAll(auth *sync.Map) {
	x.ends.Add(1)
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, hs := range x.hashes {
		for _, h := range hs {
			auth.Delete(h)
		}
	}
	x.hashes = nil
}
