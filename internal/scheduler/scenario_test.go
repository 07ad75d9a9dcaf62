package scheduler_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"trainyard/internal/domain"
	"trainyard/internal/scheduler"
	. "trainyard/internal/scheduler/schedtest"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current plans")

// round is one scheduling pass: changes applied before it, then expectations.
type round struct {
	advance     time.Duration
	finish      []int64
	submit      []scheduler.Pending
	wantStart   []int64 // in decision order
	wantPreempt []int64
	wantWait    map[int64]domain.Reason
	wantMsg     map[int64]string // substring of the waiting message
}

type scenario struct {
	pools    []domain.Pool
	quotas   []domain.Quota
	projects []domain.Project
	usage    []scheduler.Usage
	running  []scheduler.Allocation
	config   scheduler.Config
	rounds   []round
}

const (
	std = "standard"
	h1  = time.Hour
)

func TestScenarios(t *testing.T) {
	cases := map[string]scenario{
		"quota cap": {
			pools:  []domain.Pool{Pool(std).Nodes(2, 8).Obj()},
			quotas: []domain.Quota{Quota("vision", std).GPUs(8).Obj()},
			rounds: []round{{
				submit: []scheduler.Pending{
					Job(1).Project("vision").GPUs(4).Obj(), Job(2).Project("vision").GPUs(4).Obj(), Job(3).Project("vision").GPUs(4).Obj(),
				},
				wantStart: []int64{1, 2},
				wantWait:  map[int64]domain.Reason{3: domain.ReasonQuotaExceeded},
				wantMsg:   map[int64]string{3: "project vision uses 8 of 8 GPUs in pool standard (quota), the job needs 4"},
			}, {
				finish:    []int64{1},
				wantStart: []int64{3},
			}, {}},
		},
		"priority order": {
			pools:  []domain.Pool{Pool(std).Nodes(1, 8).Obj()},
			quotas: []domain.Quota{Quota("vision", std).GPUs(16).MaxPriority(Urgent).Obj()},
			rounds: []round{{
				submit: []scheduler.Pending{
					Job(1).Project("vision").GPUs(4).Obj(),
					Job(2).Project("vision").GPUs(4).Priority(Low).Obj(),
					Job(3).Project("vision").GPUs(4).Priority(High).Obj(),
					Job(4).Project("vision").GPUs(4).Priority(Urgent).Obj(),
				},
				wantStart: []int64{4, 3},
				wantWait:  map[int64]domain.Reason{1: domain.ReasonWaitingForCapacity, 2: domain.ReasonWaitingForCapacity},
			}},
		},
		"previously preempted jobs go ahead of their class peers": {
			pools:  []domain.Pool{Pool(std).Nodes(1, 8).Obj()},
			quotas: []domain.Quota{Quota("vision", std).GPUs(16).Obj()},
			rounds: []round{{
				submit:    []scheduler.Pending{Job(1).Project("vision").GPUs(8).Obj(), Job(2).Project("vision").GPUs(8).Preempted(1).Obj()},
				wantStart: []int64{2},
				wantWait:  map[int64]domain.Reason{1: domain.ReasonWaitingForCapacity},
			}},
		},
		"borrow then reclaim": {
			pools:  []domain.Pool{Pool(std).Nodes(2, 8).Borrowing().Preemption().Obj()},
			quotas: []domain.Quota{Quota("vision", std).GPUs(8).Borrow(8).Obj(), Quota("nlp", std).GPUs(8).Obj()},
			rounds: []round{{
				submit: []scheduler.Pending{
					Job(1).Project("vision").GPUs(4).Preemptible().Obj(), Job(2).Project("vision").GPUs(4).Preemptible().Obj(),
					Job(3).Project("vision").GPUs(4).Preemptible().Obj(), Job(4).Project("vision").GPUs(4).Preemptible().Obj(),
				},
				wantStart: []int64{1, 2, 3, 4},
			}, {
				submit:      []scheduler.Pending{Job(10).Project("nlp").GPUs(8).Obj()},
				wantPreempt: []int64{3, 4},
				wantWait:    map[int64]domain.Reason{10: domain.ReasonWaitingForCapacity},
				wantMsg:     map[int64]string{10: "waiting for 2 preempted job(s) to stop"},
			}, {
				// Nothing more is preempted while the victims stop.
				wantWait: map[int64]domain.Reason{10: domain.ReasonWaitingForCapacity},
				wantMsg:  map[int64]string{10: "waiting for 2 stopping job(s)"},
			}, {
				advance:   time.Minute,
				wantStart: []int64{10},
				wantWait:  map[int64]domain.Reason{3: domain.ReasonWaitingForCapacity, 4: domain.ReasonWaitingForCapacity},
			}, {}},
		},
		"preemption chooses the minimal victim set": {
			// nlp's guarantee holds its normal jobs 10-13; its low jobs 20
			// and 30 are borrowed (31 is not preemptible).
			pools: []domain.Pool{Pool(std).Nodes(3, 8).Borrowing().Preemption().Obj()},
			quotas: []domain.Quota{Quota("vision", std).GPUs(24).MaxPriority(High).Obj(),
				Quota("nlp", std).GPUs(8).Borrow(16).Obj()},
			running: []scheduler.Allocation{
				Job(10).Project("nlp").GPUs(2).Preemptible().Running(T0, On("standard-0", 0, 1)),
				Job(11).Project("nlp").GPUs(2).Preemptible().Running(T0, On("standard-0", 2, 3)),
				Job(12).Project("nlp").GPUs(2).Preemptible().Running(T0, On("standard-0", 4, 5)),
				Job(13).Project("nlp").GPUs(2).Preemptible().Running(T0, On("standard-0", 6, 7)),
				Job(20).Project("nlp").GPUs(6).Priority(Low).Preemptible().Running(T0, On("standard-1", Span(0, 6)...)),
				Job(30).Project("nlp").GPUs(4).Priority(Low).Preemptible().Running(T0, On("standard-2", Span(0, 4)...)),
				Job(31).Project("nlp").GPUs(4).Running(T0, On("standard-2", Span(4, 4)...)),
			},
			rounds: []round{{
				submit: []scheduler.Pending{
					Job(100).Project("vision").GPUs(8).Priority(High).Obj(),
					Job(101).Project("vision").GPUs(4).Priority(High).Obj(),
					Job(102).Project("vision").GPUs(8).Obj(), // normal: the low jobs left are taken
				},
				wantPreempt: []int64{20, 30},
				wantWait: map[int64]domain.Reason{100: domain.ReasonWaitingForCapacity, 101: domain.ReasonWaitingForCapacity,
					102: domain.ReasonWaitingForCapacity},
				wantMsg: map[int64]string{100: "waiting for 1 preempted job(s) to stop", 101: "waiting for 1 preempted job(s) to stop"},
			}, {
				advance:   time.Minute,
				wantStart: []int64{100, 101},
			}},
		},
		"preemption budget bounds victims": {
			pools:  []domain.Pool{Pool(std).Nodes(2, 8).Preemption().Obj()},
			quotas: []domain.Quota{Quota("vision", std).GPUs(32).MaxPriority(High).Obj()},
			config: scheduler.Config{MaxPreemptionsPerCycle: 1},
			running: []scheduler.Allocation{
				Job(10).Project("vision").GPUs(8).Priority(Low).Preemptible().Running(T0, On("standard-0", Span(0, 8)...)),
				Job(11).Project("vision").GPUs(8).Priority(Low).Preemptible().Running(T0, On("standard-1", Span(0, 8)...)),
			},
			rounds: []round{{
				submit:      []scheduler.Pending{Job(1).Project("vision").GPUs(8).Priority(High).Obj(), Job(2).Project("vision").GPUs(8).Priority(High).Obj()},
				wantPreempt: []int64{10},
				wantWait:    map[int64]domain.Reason{1: domain.ReasonWaitingForCapacity, 2: domain.ReasonWaitingForCapacity},
			}},
		},
		"never preempt when the job could not fit anyway": {
			pools:  []domain.Pool{Pool(std).Nodes(2, 8).Preemption().Obj()},
			quotas: []domain.Quota{Quota("vision", std).GPUs(32).MaxPriority(High).Obj()},
			running: []scheduler.Allocation{
				Job(10).Project("vision").GPUs(4).Priority(Low).Preemptible().Running(T0, On("standard-0", Span(0, 4)...)),
				Job(11).Project("vision").GPUs(4).Running(T0, On("standard-0", Span(4, 4)...)),
				Job(12).Project("vision").GPUs(8).Running(T0, On("standard-1", Span(0, 8)...)),
			},
			rounds: []round{{
				submit:   []scheduler.Pending{Job(1).Project("vision").GPUs(8).Priority(High).Obj()},
				wantWait: map[int64]domain.Reason{1: domain.ReasonWaitingForCapacity},
				wantMsg:  map[int64]string{1: "needs 8 GPUs on one node, largest free block is 0"},
			}},
		},
		"gang all or nothing": {
			pools:  []domain.Pool{Pool(std).Nodes(2, 8).Obj()},
			quotas: []domain.Quota{Quota("vision", std).GPUs(32).Obj()},
			running: []scheduler.Allocation{
				Job(10).Project("vision").GPUs(4).Timeout(h1).Running(T0, On("standard-0", Span(0, 4)...)),
			},
			rounds: []round{{
				submit:   []scheduler.Pending{Job(1).Project("vision").GPUs(8).Nodes(2).Obj()},
				wantWait: map[int64]domain.Reason{1: domain.ReasonWaitingForCapacity},
				wantMsg:  map[int64]string{1: "needs 16 GPUs on 2 nodes, largest free block is 8 (1 node(s) have 8 free)"},
			}, {
				advance:   h1,
				wantStart: []int64{1},
			}},
		},
		"two gangs never deadlock": {
			pools:  []domain.Pool{Pool(std).Nodes(4, 8).Obj()},
			quotas: []domain.Quota{Quota("vision", std).GPUs(32).Obj(), Quota("nlp", std).GPUs(40).Obj()},
			running: []scheduler.Allocation{
				Job(1).Project("vision").GPUs(8).Timeout(h1).Running(T0, On("standard-0", Span(0, 8)...)),
				Job(2).Project("vision").GPUs(8).Timeout(2*h1).Running(T0, On("standard-2", Span(0, 8)...)),
			},
			rounds: []round{{
				submit: []scheduler.Pending{
					Job(10).Project("nlp").GPUs(8).Nodes(3).Timeout(h1).Obj(),
					Job(11).Project("nlp").GPUs(8).Nodes(2).Obj(),
				},
				wantWait: map[int64]domain.Reason{10: domain.ReasonWaitingForCapacity, 11: domain.ReasonWaitingForCapacity},
				wantMsg:  map[int64]string{11: "free capacity is reserved for job 10"},
			}, {
				advance:   h1,
				wantStart: []int64{10},
				wantWait:  map[int64]domain.Reason{11: domain.ReasonWaitingForCapacity},
			}, {
				advance:   h1,
				wantStart: []int64{11},
			}, {}},
		},
		"backfill never delays the head job": {
			pools:  []domain.Pool{Pool(std).Nodes(1, 8).Obj()},
			quotas: []domain.Quota{Quota("vision", std).GPUs(32).Obj()},
			running: []scheduler.Allocation{
				Job(1).Project("vision").GPUs(2).Timeout(h1).Running(T0, On("standard-0", 0, 1)),
			},
			rounds: []round{{
				submit: []scheduler.Pending{
					Job(10).Project("vision").GPUs(8).Timeout(h1).Obj(),
					Job(11).Project("vision").GPUs(2).Timeout(30 * time.Minute).Obj(),
					Job(12).Project("vision").GPUs(4).Timeout(2 * h1).Obj(),
					Job(13).Project("vision").GPUs(4).Obj(),
				},
				wantStart: []int64{11},
				wantWait: map[int64]domain.Reason{10: domain.ReasonWaitingForCapacity, 12: domain.ReasonWaitingForCapacity,
					13: domain.ReasonWaitingForCapacity},
				wantMsg: map[int64]string{
					12: "free capacity is reserved for job 10 (priority normal), estimated to start at 2026-01-01 01:00:00 UTC; this job's timeout of 2h ends later",
					13: "a job without a timeout may not run ahead of it",
				},
			}, {
				advance:   h1,
				wantStart: []int64{10},
			}},
		},
		"a job without timeout may use capacity the reservation does not need": {
			pools:  []domain.Pool{Pool(std).Nodes(2, 8).Obj()},
			quotas: []domain.Quota{Quota("vision", std).GPUs(32).Obj()},
			running: []scheduler.Allocation{
				Job(1).Project("vision").GPUs(8).Timeout(h1).Running(T0, On("standard-0", Span(0, 8)...)),
				Job(2).Project("vision").GPUs(4).Running(T0, On("standard-1", Span(0, 4)...)),
			},
			rounds: []round{{
				submit: []scheduler.Pending{
					Job(10).Project("vision").GPUs(8).Obj(),
					Job(11).Project("vision").GPUs(4).Obj(),
				},
				wantStart: []int64{11},
				wantWait:  map[int64]domain.Reason{10: domain.ReasonWaitingForCapacity},
			}},
		},
		"concurrency cap": {
			pools: []domain.Pool{Pool("scratch").Nodes(1, 8).MaxRunning(2).Borrowing().Obj()},
			rounds: []round{{
				submit: []scheduler.Pending{
					Job(1).Pool("scratch").Preemptible().Obj(), Job(2).Pool("scratch").Preemptible().Obj(), Job(3).Pool("scratch").Preemptible().Obj(),
				},
				wantStart: []int64{1, 2},
				wantWait:  map[int64]domain.Reason{3: domain.ReasonWaitingForCapacity},
				wantMsg:   map[int64]string{3: "pool scratch runs 2 of 2 jobs (max_running)"},
			}},
		},
		"fair share ordering": {
			pools:    []domain.Pool{Pool(std).Nodes(1, 8).Obj()},
			quotas:   []domain.Quota{Quota("a", std).GPUs(8).Obj(), Quota("b", std).GPUs(8).Obj(), Quota("c", std).GPUs(8).Obj()},
			usage:    []scheduler.Usage{{Project: "c", Pool: std, Value: 5}},
			projects: []domain.Project{{Name: "b", Shares: 2}},
			rounds: []round{{
				submit: []scheduler.Pending{
					Job(1).Project("c").GPUs(2).Obj(),
					Job(2).Project("a").GPUs(2).Obj(), Job(3).Project("a").GPUs(2).Obj(), Job(4).Project("a").GPUs(2).Obj(),
					Job(5).Project("b").GPUs(2).Obj(), Job(6).Project("b").GPUs(2).Obj(), Job(7).Project("b").GPUs(2).Obj(),
				},
				// a and b start even; b's double shares make its share grow half as fast.
				wantStart: []int64{2, 5, 6, 3},
				wantWait: map[int64]domain.Reason{1: domain.ReasonWaitingForCapacity, 4: domain.ReasonWaitingForCapacity,
					7: domain.ReasonWaitingForCapacity},
			}},
		},
		"non-preemptible job never borrows": {
			pools:  []domain.Pool{Pool(std).Nodes(1, 8).Borrowing().Obj()},
			quotas: []domain.Quota{Quota("vision", std).GPUs(4).Borrow(4).Obj()},
			rounds: []round{{
				submit: []scheduler.Pending{
					Job(1).Project("vision").GPUs(4).Obj(), Job(2).Project("vision").GPUs(4).Obj(),
					Job(3).Project("vision").GPUs(4).Preemptible().Obj(),
				},
				wantStart: []int64{1, 3},
				wantWait:  map[int64]domain.Reason{2: domain.ReasonQuotaExceeded},
				wantMsg:   map[int64]string{2: "job is not preemptible and would need borrowed capacity: project vision uses 4 of 4 GPUs in pool standard (quota), the job needs 4"},
			}},
		},
		"no quota borrows idle capacity, without borrowing it waits": {
			pools:  []domain.Pool{Pool(std).Nodes(1, 8).Borrowing().Obj(), Pool("private").Nodes(1, 8).Obj()},
			quotas: []domain.Quota{Quota("owner", std).GPUs(4).Obj(), Quota("owner", "private").GPUs(8).Obj()},
			rounds: []round{{
				submit: []scheduler.Pending{
					Job(1).Project("guest").GPUs(8).Preemptible().Obj(), Job(2).Project("guest").GPUs(8).Preemptible().Pool("private").Obj(),
				},
				wantStart: []int64{1},
				wantWait:  map[int64]domain.Reason{2: domain.ReasonQuotaExceeded},
				wantMsg:   map[int64]string{2: "project guest has no quota in pool private and the pool does not allow borrowing"},
			}},
		},
		// A pool where no project has a quota (a fresh install's default
		// pool) is one queue, as one Kueue ClusterQueue with
		// withinClusterQueue: LowerPriority (preemption_test.go "preempt
		// lowest priority"): every project runs ordinary jobs there,
		// fair share orders them, and a higher-priority job preempts
		// lower-priority preemptible work of any project.
		"an open pool is one queue": {
			pools: []domain.Pool{Pool(std).Nodes(1, 8).Preemption().Obj()},
			running: []scheduler.Allocation{
				Job(1).Project("vision").GPUs(4).Priority(Low).Preemptible().Running(T0, On("standard-0", Span(0, 4)...)),
				Job(2).Project("nlp").GPUs(4).Running(T0, On("standard-0", Span(4, 4)...)),
			},
			rounds: []round{{
				submit:      []scheduler.Pending{Job(3).Project("speech").GPUs(4).Priority(High).Obj()},
				wantPreempt: []int64{1},
				wantWait:    map[int64]domain.Reason{3: domain.ReasonWaitingForCapacity},
			}, {
				advance:   time.Minute,
				wantStart: []int64{3},
				wantWait:  map[int64]domain.Reason{1: domain.ReasonWaitingForCapacity},
			}},
		},
		"messages with numbers": {
			pools:  []domain.Pool{Pool(std).Nodes(2, 8).Priorities(Low, Normal).Obj()},
			quotas: []domain.Quota{Quota("vision", std).GPUs(16).CPUs(32).Jobs(3).Obj()},
			rounds: []round{{
				submit: []scheduler.Pending{
					Job(1).Project("vision").GPUs(16).Obj(),
					Job(2).Project("vision").GPUs(8).Nodes(3).Obj(),
					Job(3).Project("vision").NotBefore(T0.Add(30 * time.Second)).Obj(),
					Job(4).Project("vision").Pool("gone").Obj(),
					Job(5).Project("vision").Priority(High).Obj(),
					Job(6).Project("vision").CPUs(40).GPUs(1).Nodes(2).Obj(),
					Job(7).Project("vision").CPUs(20).Obj(),
					Job(8).Project("vision").CPUs(40).Obj(), // more than the quota: holds nothing
					Job(9).Project("vision").Obj(), Job(10).Project("vision").Obj(), Job(11).Project("vision").Obj(),
				},
				wantStart: []int64{7, 9, 10},
				wantWait: map[int64]domain.Reason{1: domain.ReasonNoCapacity, 2: domain.ReasonNoCapacity, 3: domain.ReasonBackoff,
					4: domain.ReasonNoCapacity, 5: domain.ReasonNoCapacity, 6: domain.ReasonQuotaExceeded, 8: domain.ReasonQuotaExceeded,
					11: domain.ReasonQuotaExceeded},
				wantMsg: map[int64]string{
					1:  "needs 16 GPUs per node; the largest node in pool standard has 8",
					2:  "needs 3 nodes; pool standard has 2",
					3:  "retry backoff: may start at 2026-01-01 00:00:30 UTC",
					4:  "pool gone does not exist",
					5:  "pool standard does not accept priority high (accepts low, normal)",
					6:  "project vision uses 0 of 32 CPUs in pool standard (quota), the job needs 80",
					8:  "project vision uses 20 of 32 CPUs in pool standard (quota), the job needs 40",
					11: "project vision runs 3 of 3 jobs in pool standard (quota)",
				},
			}},
		},
		"waiting for stopping jobs preempts nothing more": {
			pools:  []domain.Pool{Pool(std).Nodes(1, 8).Preemption().Obj()},
			quotas: []domain.Quota{Quota("vision", std).GPUs(32).MaxPriority(High).Obj()},
			running: []scheduler.Allocation{
				func() scheduler.Allocation {
					a := Job(10).Project("vision").GPUs(4).Priority(Low).Preemptible().Running(T0, On("standard-0", Span(0, 4)...))
					a.Stopping = true
					return a
				}(),
				Job(11).Project("vision").GPUs(4).Priority(Low).Preemptible().Running(T0, On("standard-0", Span(4, 4)...)),
			},
			rounds: []round{{
				submit:   []scheduler.Pending{Job(1).Project("vision").GPUs(4).Priority(High).Obj()},
				wantWait: map[int64]domain.Reason{1: domain.ReasonWaitingForCapacity},
				wantMsg:  map[int64]string{1: "waiting for 1 stopping job(s) to release their resources"},
			}},
		},
		// Kueue pkg/scheduler/preemption/preemption_test.go, "no workloads
		// borrowing": a job that would have to borrow never preempts work
		// inside another queue's nominal quota. Trainyard once did, and the
		// victim, inside its guarantee, took the room back at once: a
		// livelock of one preemption per pass.
		"a borrowing job never preempts inside another project's guarantee": {
			pools:  []domain.Pool{Pool(std).Nodes(1, 2).Borrowing().Preemption().Obj()},
			quotas: []domain.Quota{Quota("owner", std).GPUs(2).Obj()},
			running: []scheduler.Allocation{
				Job(1).Project("owner").GPUs(2).Priority(Low).Preemptible().Running(T0, On("standard-0", 0, 1)),
			},
			rounds: []round{{
				submit:   []scheduler.Pending{Job(2).Project("guest").GPUs(2).Preemptible().Obj()},
				wantWait: map[int64]domain.Reason{2: domain.ReasonWaitingForCapacity},
			}, {advance: time.Minute, wantWait: map[int64]domain.Reason{2: domain.ReasonWaitingForCapacity}}, {
				finish:    []int64{1},
				wantStart: []int64{2},
			}},
		},
		// Kueue preemption_test.go, "reclaim quota from borrower": which of a
		// queue's workloads are above its nominal quota follows their
		// priority, not the order they were admitted in. Here vision's job 1
		// was placed on borrowed capacity while job 0 ran; job 0 has ended,
		// so vision is back within its guarantee and only guest's job may be
		// reclaimed (one preemption, where a borrowed flag fixed at start
		// made two).
		"borrowed is decided from the current allocation": {
			pools:  []domain.Pool{Pool(std).Nodes(1, 4).Borrowing().Preemption().Obj()},
			quotas: []domain.Quota{Quota("vision", std).GPUs(2).Borrow(2).Obj(), Quota("nlp", std).GPUs(2).Obj()},
			running: []scheduler.Allocation{
				Job(20).Project("guest").GPUs(2).Preemptible().Running(T0, On("standard-0", 0, 1)),
				func() scheduler.Allocation {
					a := Job(1).Project("vision").GPUs(2).Preemptible().Running(T0.Add(time.Minute), On("standard-0", 2, 3))
					a.Borrowed = true // as placed, while job 0 ran
					return a
				}(),
			},
			rounds: []round{{
				submit:      []scheduler.Pending{Job(30).Project("nlp").GPUs(2).Obj()},
				wantPreempt: []int64{20},
				wantWait:    map[int64]domain.Reason{30: domain.ReasonWaitingForCapacity},
			}, {advance: time.Minute, wantStart: []int64{30}, wantWait: map[int64]domain.Reason{20: domain.ReasonWaitingForCapacity}}, {}},
		},
		// Kueue preemption_test.go, "reclaim quota from borrower" and "not
		// enough workloads borrowing": the victims cover the preemptor's need
		// and no more. A job waiting for its victims holds its project's
		// quota, so the project's other queued jobs, now above their
		// guarantee, do not reclaim again: one preemption for one GPU of
		// guarantee, not one per queued job.
		"one reclaim per unit of guarantee": {
			pools:  []domain.Pool{Pool(std).Nodes(1, 8).Borrowing().Preemption().Obj()},
			quotas: []domain.Quota{Quota("owner", std).GPUs(1).Borrow(7).Obj()},
			running: func() []scheduler.Allocation {
				var rs []scheduler.Allocation
				for i := range 8 {
					rs = append(rs, Job(int64(10+i)).Project("guest").GPUs(1).Preemptible().Running(T0, On("standard-0", i)))
				}
				return rs
			}(),
			rounds: []round{{
				submit: []scheduler.Pending{Job(1).Project("owner").GPUs(1).Preemptible().Obj(), Job(2).Project("owner").GPUs(1).Preemptible().Obj(),
					Job(3).Project("owner").GPUs(1).Preemptible().Obj()},
				wantPreempt: []int64{10},
				wantWait: map[int64]domain.Reason{1: domain.ReasonWaitingForCapacity, 2: domain.ReasonWaitingForCapacity,
					3: domain.ReasonWaitingForCapacity},
			}, {
				advance:   time.Minute,
				wantStart: []int64{1},
				wantWait:  map[int64]domain.Reason{2: domain.ReasonWaitingForCapacity, 3: domain.ReasonWaitingForCapacity},
			}, {}},
		},
		// Kueue docs (concepts/cluster_queue.md, queueingStrategy
		// StrictFIFO): an older workload that cannot be admitted blocks newer
		// ones even if they fit the quota left. Here a project at its quota
		// with a stream of 1-GPU jobs: the 4-GPU job ahead of them holds the
		// quota it needs, so it starts once four of the running jobs end
		// instead of never.
		"a job blocked by its own quota holds it against smaller jobs behind it": {
			pools:  []domain.Pool{Pool(std).Nodes(1, 8).Obj()},
			quotas: []domain.Quota{Quota("vision", std).GPUs(8).Obj()},
			running: func() []scheduler.Allocation {
				var rs []scheduler.Allocation
				for i := range 8 {
					rs = append(rs, Job(int64(10+i)).Project("vision").GPUs(1).Running(T0, On("standard-0", i)))
				}
				return rs
			}(),
			rounds: []round{{
				submit:   []scheduler.Pending{Job(1).Project("vision").GPUs(4).Submitted(T0).Obj(), Job(2).Project("vision").GPUs(1).Submitted(T0.Add(time.Minute)).Obj()},
				wantWait: map[int64]domain.Reason{1: domain.ReasonQuotaExceeded, 2: domain.ReasonQuotaExceeded},
			}, {
				finish:   []int64{10},
				wantWait: map[int64]domain.Reason{1: domain.ReasonQuotaExceeded, 2: domain.ReasonQuotaExceeded},
				wantMsg:  map[int64]string{2: "project vision's quota in pool standard is held for job 1, which waits ahead (uses 7 of 8 GPUs, waiting jobs hold 4, the job needs 1)"},
			}, {
				finish:    []int64{11, 12, 13},
				wantStart: []int64{1},
				wantWait:  map[int64]domain.Reason{2: domain.ReasonQuotaExceeded},
			}},
		},
		// A job that may not borrow, over its ceiling only with what the
		// job waiting ahead holds, is told of its guarantee, not of a
		// jobs limit it does not have.
		"a non-preemptible job behind a held quota is told of its guarantee": {
			pools:  []domain.Pool{Pool(std).Nodes(1, 8).Borrowing().Obj()},
			quotas: []domain.Quota{Quota("vision", std).GPUs(2).Borrow(6).Obj()},
			running: func() []scheduler.Allocation {
				var rs []scheduler.Allocation
				for i := range 4 {
					rs = append(rs, Job(int64(10+i)).Project("vision").GPUs(1).Preemptible().Running(T0, On("standard-0", i)))
				}
				return rs
			}(),
			rounds: []round{{
				submit: []scheduler.Pending{Job(1).Project("vision").GPUs(5).Preemptible().Submitted(T0).Obj(),
					Job(2).Project("vision").GPUs(1).Submitted(T0.Add(time.Minute)).Obj()},
				wantWait: map[int64]domain.Reason{1: domain.ReasonQuotaExceeded, 2: domain.ReasonQuotaExceeded},
				wantMsg: map[int64]string{
					1: "project vision uses 4 of 8 GPUs in pool standard (quota 2 + borrow 6), the job needs 5",
					2: "job is not preemptible and would need borrowed capacity: project vision uses 4 of 2 GPUs in pool standard (quota), the job needs 1"},
			}},
		},
		// Kueue KEP-1337 ("Preempt within cohort while borrowing") and
		// concepts/cluster_queue.md: borrowWithinCohort defaults to Never, so
		// a workload that must borrow preempts no other queue's workload.
		// Trainyard lets it take a lower-priority borrowed job only when that
		// job could never fit its own project's guarantee (a guest's job):
		// alpha's low job, stopped, would reclaim its room as soon as
		// alpha's normal job ended, and the two took it from each other
		// again and again (repeated preemptions in the simulator).
		"a borrowing job does not preempt a job that could reclaim": {
			pools:  []domain.Pool{Pool(std).Nodes(1, 10).Borrowing().Preemption().Obj()},
			quotas: []domain.Quota{Quota("alpha", std).GPUs(4).Borrow(4).Obj(), Quota("beta", std).GPUs(2).Borrow(6).Obj()},
			running: []scheduler.Allocation{
				Job(1).Project("alpha").GPUs(4).Preemptible().Running(T0, On("standard-0", Span(0, 4)...)),
				Job(2).Project("alpha").GPUs(2).Priority(Low).Preemptible().Running(T0, On("standard-0", 4, 5)),
				Job(3).Project("beta").GPUs(2).Preemptible().Running(T0, On("standard-0", 6, 7)),
				Job(5).Project("guest").GPUs(2).Priority(Low).Preemptible().Running(T0, On("standard-0", 8, 9)),
			},
			rounds: []round{{
				submit:      []scheduler.Pending{Job(4).Project("beta").GPUs(2).Preemptible().Obj()},
				wantPreempt: []int64{5},
				wantWait:    map[int64]domain.Reason{4: domain.ReasonWaitingForCapacity},
			}, {
				advance:   time.Minute,
				wantStart: []int64{4},
				wantWait:  map[int64]domain.Reason{5: domain.ReasonWaitingForCapacity},
			}, {
				submit:   []scheduler.Pending{Job(6).Project("beta").GPUs(2).Preemptible().Obj()},
				wantWait: map[int64]domain.Reason{5: domain.ReasonWaitingForCapacity, 6: domain.ReasonWaitingForCapacity},
			}},
		},
		// Kueue preemption_test.go, "preempt lowest priority" (and Slurm's
		// preemption docs: lower-priority jobs are preempted first): among
		// victims that make room, the lowest priority goes first, even when
		// a higher-priority one is smaller. Stopping guest's normal job
		// would have let it preempt guest's low job in turn: two
		// preemptions for one.
		"lowest-priority victims first": {
			pools:  []domain.Pool{Pool(std).Nodes(1, 4).Borrowing().Preemption().Obj()},
			quotas: []domain.Quota{Quota("owner", std).GPUs(2).Obj()},
			running: []scheduler.Allocation{
				Job(1).Project("guest").GPUs(1).Preemptible().Running(T0, On("standard-0", 0)),
				Job(2).Project("guest").GPUs(2).Priority(Low).Preemptible().Running(T0, On("standard-0", 1, 2)),
				Job(3).Project("owner").GPUs(1).Running(T0, On("standard-0", 3)),
			},
			rounds: []round{{
				submit:      []scheduler.Pending{Job(4).Project("owner").GPUs(1).Obj()},
				wantPreempt: []int64{2},
				wantWait:    map[int64]domain.Reason{4: domain.ReasonWaitingForCapacity},
			}, {
				advance:   time.Minute,
				wantStart: []int64{4},
				wantWait:  map[int64]domain.Reason{2: domain.ReasonWaitingForCapacity},
			}, {}},
		},
		// Kueue preemption_test.go, "preempt from all ClusterQueues in
		// cohort": freeing room for a job may take its own project's
		// lower-priority work and another project's borrowed work at once.
		"own preemption and reclaim together": {
			pools:  []domain.Pool{Pool(std).Nodes(1, 4).Borrowing().Preemption().Obj()},
			quotas: []domain.Quota{Quota("alpha", std).GPUs(2).Obj(), Quota("beta", std).GPUs(2).Borrow(2).Obj()},
			running: []scheduler.Allocation{
				Job(1).Project("alpha").GPUs(1).Priority(Low).Preemptible().Running(T0, On("standard-0", 0)),
				Job(2).Project("beta").GPUs(3).Preemptible().Running(T0, On("standard-0", 1, 2, 3)),
			},
			rounds: []round{{
				submit:      []scheduler.Pending{Job(3).Project("alpha").GPUs(2).Preemptible().Obj()},
				wantPreempt: []int64{1, 2},
				wantWait:    map[int64]domain.Reason{3: domain.ReasonWaitingForCapacity},
			}, {advance: time.Minute, wantStart: []int64{3}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := New(tc.pools, tc.quotas...)
			h.Config = tc.config
			h.Snap.Projects = tc.projects
			h.Snap.Usage = tc.usage
			h.Run(tc.running...)
			var golden strings.Builder
			for i, r := range tc.rounds {
				if r.advance > 0 {
					h.Advance(r.advance)
				}
				h.Finish(r.finish...)
				h.Submit(r.submit...)
				snap := h.Snap // the plan's snapshot: h.Schedule applies the plan to h.Snap
				plan, err := h.Schedule()
				if err != nil {
					t.Fatalf("round %d: plan breaks an invariant: %v\n%s", i, err, Format(snap, plan))
				}
				fmt.Fprintf(&golden, "# round %d at %s\n%s", i, h.Snap.Now.Sub(T0), Format(snap, plan))
				if got := Started(plan); !slices.Equal(got, r.wantStart) {
					t.Errorf("round %d: started %v, want %v\n%s", i, got, r.wantStart, Format(snap, plan))
				}
				if got := Victims(plan); !slices.Equal(got, r.wantPreempt) {
					t.Errorf("round %d: preempted %v, want %v\n%s", i, got, r.wantPreempt, Format(snap, plan))
				}
				for id, want := range r.wantWait {
					w, ok := WaitingFor(plan, id)
					if !ok || w.Reason != want {
						t.Errorf("round %d: job %d waits with %q (%v), want %q\n%s", i, id, w.Reason, ok, want, Format(snap, plan))
					}
				}
				for id, want := range r.wantMsg {
					if w, _ := WaitingFor(plan, id); !strings.Contains(w.Message, want) {
						t.Errorf("round %d: job %d message %q, want it to contain %q", i, id, w.Message, want)
					}
				}
			}
			compareGolden(t, name, golden.String())
		})
	}
}

func compareGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", strings.ReplaceAll(name, " ", "_")+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatalf("write golden file: %v", err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file %s: %v (run go test -run TestScenarios -update to create it)", path, err)
	}
	if string(want) != got {
		t.Errorf("plan differs from %s (run with -update if the change is intended):\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}

// A waiting job's message does not change while only time passes, so the
// control loop does not rewrite every waiting job's reason every cycle.
func TestMessagesStableAsTimePasses(t *testing.T) {
	s := scheduler.Snapshot{Now: T0.Add(time.Minute),
		Pools:  []domain.Pool{Pool("standard").Nodes(1, 8).Obj()},
		Quotas: []domain.Quota{Quota("vision", "standard").GPUs(32).Obj()},
		Running: []scheduler.Allocation{
			Job(1).Project("vision").GPUs(2).Timeout(time.Hour).Running(T0, On("standard-0", 0, 1)),
		},
		Pending: []scheduler.Pending{
			Job(10).Project("vision").GPUs(8).Timeout(time.Hour).Obj(),
			Job(12).Project("vision").GPUs(4).Timeout(2 * time.Hour).Obj(),
			Job(13).Project("vision").GPUs(4).Obj(),
			Job(14).Project("vision").GPUs(1).NotBefore(T0.Add(10 * time.Minute)).Obj(),
		},
	}
	a := scheduler.Schedule(s, scheduler.Config{})
	s.Now = s.Now.Add(7 * time.Second)
	b := scheduler.Schedule(s, scheduler.Config{})
	if len(a.Waiting) != 4 || !reflect.DeepEqual(a.Waiting, b.Waiting) {
		t.Fatalf("messages changed as time passed:\n%+v\n%+v", a.Waiting, b.Waiting)
	}
}
