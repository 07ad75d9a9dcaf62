package service

import (
	"sync"
	"testing"
)

// An authentication that read its token before an end and caches it after
// the end's forget must not leave it cached: whichever attempt ended, the
// entry goes, and the next request reads the token again.
func TestJobAuthIndexDropsAnEntryCachedAcrossAnEnd(t *testing.T) {
	var auth sync.Map
	var x jobAuthIndex
	ref := AttemptRef{JobID: 1, Attempt: 1}

	ends := x.ends.Load() // before the token's read
	x.forget(&auth, []AttemptRef{ref})
	auth.Store("h1", authEntry{})
	x.add(&auth, ref, "h1", ends)
	if _, ok := auth.Load("h1"); ok {
		t.Error("an entry cached across an end stayed")
	}

	ends = x.ends.Load() // no end in between: the entry stays
	auth.Store("h2", authEntry{})
	x.add(&auth, AttemptRef{JobID: 2, Attempt: 1}, "h2", ends)
	x.add(&auth, AttemptRef{JobID: 2, Attempt: 1}, "h2", ends)
	if _, ok := auth.Load("h2"); !ok {
		t.Fatal("an entry cached between ends was dropped")
	}
	if got := x.hashes[AttemptRef{JobID: 2, Attempt: 1}]; len(got) != 1 {
		t.Errorf("index holds %v, want the hash once", got)
	}
	x.forgetAll(&auth)
	if _, ok := auth.Load("h2"); ok || x.hashes != nil {
		t.Error("forgetAll kept a job token's entry or the index")
	}
}
