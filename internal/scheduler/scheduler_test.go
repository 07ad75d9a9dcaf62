package scheduler

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func node(name string, cpus float64, mem domain.ByteSize, gpus int) Node {
	n := Node{Name: name, CPUs: cpus, Memory: mem}
	for i := range gpus {
		n.GPUs = append(n.GPUs, i)
	}
	return n
}

func job(id int64, cpus float64, gpus int) Pending {
	return Pending{JobID: id, Priority: domain.PriorityNormal, SubmittedAt: t0.Add(time.Duration(id) * time.Second),
		Resources: domain.Resources{CPUs: cpus, Memory: domain.ByteSize(1 << 30), GPUs: gpus, Nodes: 1}}
}

func started(p Plan) []int64 {
	var ids []int64
	for _, s := range p.Start {
		ids = append(ids, s.JobID)
	}
	return ids
}

func TestSchedule(t *testing.T) {
	cases := map[string]struct {
		snap      Snapshot
		wantStart []int64
		wantWait  map[int64]domain.Reason
	}{
		"fills CPUs in submit order": {
			snap:      Snapshot{Nodes: []Node{node("n1", 2, 8<<30, 0)}, Pending: []Pending{job(3, 1, 0), job(1, 1, 0), job(2, 1, 0)}},
			wantStart: []int64{1, 2},
			wantWait:  map[int64]domain.Reason{3: domain.ReasonWaitingForCapacity},
		},
		"running allocations take capacity": {
			snap: Snapshot{Nodes: []Node{node("n1", 2, 8<<30, 0)}, Pending: []Pending{job(2, 1, 0)},
				Running: []Allocation{{JobID: 1, Node: "n1", Resources: domain.Resources{CPUs: 2, Memory: 1 << 30}}}},
			wantWait: map[int64]domain.Reason{2: domain.ReasonWaitingForCapacity},
		},
		"priority before submit order": {
			snap: Snapshot{Nodes: []Node{node("n1", 1, 8<<30, 0)}, Pending: []Pending{job(1, 1, 0), func() Pending {
				j := job(2, 1, 0)
				j.Priority = domain.PriorityHigh
				return j
			}()}},
			wantStart: []int64{2},
			wantWait:  map[int64]domain.Reason{1: domain.ReasonWaitingForCapacity},
		},
		"oversized request never fits": {
			snap:     Snapshot{Nodes: []Node{node("n1", 4, 8<<30, 2)}, Pending: []Pending{job(1, 1, 8)}},
			wantWait: map[int64]domain.Reason{1: domain.ReasonNoCapacity},
		},
		"blocked big job is not starved by small ones": {
			snap: Snapshot{Nodes: []Node{node("n1", 4, 8<<30, 0)}, Pending: []Pending{job(1, 4, 0), job(2, 1, 0)},
				Running: []Allocation{{JobID: 9, Node: "n1", Resources: domain.Resources{CPUs: 1, Memory: 1 << 30}}}},
			wantWait: map[int64]domain.Reason{1: domain.ReasonWaitingForCapacity, 2: domain.ReasonWaitingForCapacity},
		},
		"backoff waits": {
			snap: Snapshot{Now: t0, Nodes: []Node{node("n1", 4, 8<<30, 0)}, Pending: []Pending{func() Pending {
				j := job(1, 1, 0)
				j.NotBefore = t0.Add(5 * time.Second)
				return j
			}()}},
			wantWait: map[int64]domain.Reason{1: domain.ReasonBackoff},
		},
		"GPUs by lowest free index": {
			snap: Snapshot{Nodes: []Node{node("n1", 8, 64<<30, 4)}, Pending: []Pending{job(2, 1, 2)},
				Running: []Allocation{{JobID: 1, Node: "n1", Resources: domain.Resources{CPUs: 1, Memory: 1 << 30, GPUs: 1}, GPUs: []int{1}}}},
			wantStart: []int64{2},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			p := Schedule(tc.snap)
			if got := started(p); !reflect.DeepEqual(got, tc.wantStart) {
				t.Errorf("started = %v, want %v", got, tc.wantStart)
			}
			gotWait := map[int64]domain.Reason{}
			for _, w := range p.Waiting {
				gotWait[w.JobID] = w.Reason
				if w.Message == "" {
					t.Errorf("job %d waits without a message", w.JobID)
				}
			}
			if len(tc.wantWait) == 0 {
				tc.wantWait = map[int64]domain.Reason{}
			}
			if !reflect.DeepEqual(gotWait, tc.wantWait) {
				t.Errorf("waiting = %v, want %v", gotWait, tc.wantWait)
			}
		})
	}
}

func TestScheduleAssignsDistinctGPUs(t *testing.T) {
	p := Schedule(Snapshot{Nodes: []Node{node("n1", 8, 64<<30, 4)}, Pending: []Pending{job(1, 1, 1), job(2, 1, 2), job(3, 1, 1), job(4, 1, 1)},
		Running: []Allocation{{JobID: 9, Node: "n1", GPUs: []int{2}, Resources: domain.Resources{GPUs: 1}}}})
	got := fmt.Sprint(p.Start)
	want := "[{1 n1 [0]} {2 n1 [1 3]}]"
	if got != want {
		t.Fatalf("placements = %s, want %s", got, want)
	}
}

func TestScheduleMessagesHaveNumbers(t *testing.T) {
	p := Schedule(Snapshot{Nodes: []Node{node("n1", 2, 4<<30, 0)}, Pending: []Pending{job(1, 3, 0), job(2, 2, 0), job(3, 2, 0)}})
	msgs := map[int64]string{}
	for _, w := range p.Waiting {
		msgs[w.JobID] = w.Message
	}
	if !strings.Contains(msgs[1], "3 CPUs (largest node has 2)") {
		t.Errorf("oversized message = %q", msgs[1])
	}
	if !strings.Contains(msgs[3], "needs 2 CPUs, 1GiB memory; free on n1: 0 CPUs of 2") {
		t.Errorf("waiting message = %q", msgs[3])
	}
}

// Shuffling every input slice must not change the plan (total orders only).
func TestScheduleIsDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	base := Snapshot{Now: t0.Add(time.Hour)}
	for i := range 5 {
		base.Nodes = append(base.Nodes, node(fmt.Sprintf("n%d", i), 8, 32<<30, 4))
	}
	for i := range 60 {
		j := job(int64(i+1), float64(1+r.IntN(4)), r.IntN(3))
		j.Priority = domain.Priorities()[r.IntN(4)]
		j.SubmittedAt = t0.Add(time.Duration(r.IntN(10)) * time.Second) // many ties
		base.Pending = append(base.Pending, j)
	}
	want := Schedule(base)
	for range 20 {
		s := base
		s.Nodes = append([]Node(nil), base.Nodes...)
		s.Pending = append([]Pending(nil), base.Pending...)
		r.Shuffle(len(s.Nodes), func(i, j int) { s.Nodes[i], s.Nodes[j] = s.Nodes[j], s.Nodes[i] })
		r.Shuffle(len(s.Pending), func(i, j int) { s.Pending[i], s.Pending[j] = s.Pending[j], s.Pending[i] })
		if got := Schedule(s); !reflect.DeepEqual(got, want) {
			t.Fatal("plan changed when inputs were shuffled")
		}
	}
}

func BenchmarkSchedule1000(b *testing.B) {
	s := Snapshot{Now: t0}
	for i := range 16 {
		s.Nodes = append(s.Nodes, node(fmt.Sprintf("n%02d", i), 64, 512<<30, 8))
	}
	for i := range 1000 {
		s.Pending = append(s.Pending, job(int64(i+1), float64(1+i%8), i%3))
	}
	for b.Loop() {
		Schedule(s)
	}
}
