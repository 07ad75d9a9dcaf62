package scheduler

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"trainyard/internal/domain"
)

func testT0() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

// sortKeys must give the one order of (submit time, nanoseconds, id) on
// any input: random, sorted, reversed, with many equal times, small and
// large.
func TestSortKeys(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 300 {
		size := n
		if n > 250 {
			size = 1000 + r.IntN(5000)
		}
		for pattern := range 5 {
			k := make([]qkey, size)
			for i := range k {
				k[i] = qkey{sec: int64(r.IntN(50)), nsec: int32(r.IntN(3)), id: int64(i), i: int32(i)}
				switch pattern {
				case 1:
					k[i].sec = int64(i)
				case 2:
					k[i].sec = int64(size - i)
				case 3:
					k[i].sec, k[i].nsec = 7, 0
				case 4:
					k[i].sec = int64(i % 17)
				}
			}
			r.Shuffle(len(k), func(i, j int) { k[i].id, k[j].id = k[j].id, k[i].id })
			want := slices.Clone(k)
			slices.SortFunc(want, func(a, b qkey) int {
				if a.less(&b) {
					return -1
				}
				if b.less(&a) {
					return 1
				}
				return 0
			})
			sortKeys(k, 2*64)
			if !slices.Equal(k, want) {
				t.Fatalf("size %d pattern %d: order differs", size, pattern)
			}
			k2 := slices.Clone(want)
			r.Shuffle(len(k2), func(i, j int) { k2[i], k2[j] = k2[j], k2[i] })
			sortKeys(k2, 1) // the library's sort takes over early
			if !slices.Equal(k2, want) {
				t.Fatalf("size %d pattern %d, shallow: order differs", size, pattern)
			}
		}
	}
}

// buildQueue's records must be those record makes, each pending job once,
// in the queue's order (compare), whatever the input order.
func TestBuildQueueOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	projects := []string{"b", "a", "zeta", "c", "aa"}
	for n := range 200 {
		size := n * 7
		pending := make([]*Pending, size)
		for i := range pending {
			pd := &Pending{JobID: int64(r.IntN(1 << 30)), Project: projects[r.IntN(len(projects))], Pool: "p",
				Priority:    []domain.Priority{"low", "normal", "high", "urgent", ""}[r.IntN(5)],
				SubmittedAt: testT0().Add(time.Duration(r.IntN(1000)) * time.Second * time.Duration(1+r.IntN(2))),
				Resources:   domain.Resources{GPUs: r.IntN(3)}, Preemptions: r.IntN(2)}
			if r.IntN(3) == 0 {
				pd.SubmittedAt = pd.SubmittedAt.Add(time.Duration(r.IntN(3)))
			}
			if n%10 == 9 {
				pd.SubmittedAt = testT0().Add(time.Duration(i) * time.Minute) // sorted within groups
			}
			pd.JobID = int64(i)*1000 + pd.JobID%1000
			pending[i] = pd
		}
		q := buildQueue(pending)
		if len(q.jobs) != size {
			t.Fatalf("size %d: %d records", size, len(q.jobs))
		}
		seen := map[int32]bool{}
		last := int32(-1)
		for x := range q.jobs {
			j := &q.jobs[x]
			if seen[j.slot] {
				t.Fatalf("size %d: slot %d twice", size, j.slot)
			}
			seen[j.slot] = true
			if want, _ := q.record(pending[j.slot], j.slot, &last); want != *j {
				t.Fatalf("size %d: record %+v, want %+v", size, *j, want)
			}
			if x > 0 && q.compare(&q.jobs[x-1], j) >= 0 {
				t.Fatalf("size %d: records %d and %d out of order", size, x-1, x)
			}
		}
	}
}
