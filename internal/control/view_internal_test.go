package control

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestEditIDs checks the view's id list edits, in place and merged,
// against a rebuild from a set.
func TestEditIDs(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 500 {
		in := map[int64]bool{}
		var ids []int64
		for id := int64(1); id <= 200; id++ {
			if rng.IntN(2) == 0 {
				in[id] = true
				ids = append(ids, id)
			}
		}
		n := rng.IntN(40) // both sides of the in-place limit
		var added, removed []int64
		want := map[int64]bool{}
		for id := range in {
			want[id] = true
		}
		for _, id := range rng.Perm(200)[:n] {
			id := int64(id + 1)
			if in[id] {
				removed = append(removed, id)
				delete(want, id)
			} else {
				added = append(added, id)
				want[id] = true
			}
		}
		if round%2 == 0 { // reads come in id order; a check's two rounds may not
			slices.Sort(added)
			slices.Sort(removed)
		}
		got := editIDs(slices.Clone(ids), added, removed)
		var exp []int64
		for id := range want {
			exp = append(exp, id)
		}
		slices.Sort(exp)
		if !slices.Equal(got, exp) {
			t.Fatalf("round %d: editIDs(%v, +%v, -%v) = %v, want %v", round, ids, added, removed, got, exp)
		}
	}
}
