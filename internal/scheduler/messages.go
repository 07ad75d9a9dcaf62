package scheduler

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"trainyard/internal/domain"
)

// msgCache keeps messages that many waiting jobs share, so that the tail of
// a long queue costs a map lookup per job rather than a formatted string.
type msgCache struct {
	running  string
	runningN int
}

type capMsg struct {
	version int
	msg     string
	rawFits bool // fits if reservations are ignored
}

// quotaMsgKey identifies a quota message within one project's current use
// (projState.msgs is reset whenever the use changes).
type quotaMsgKey struct {
	dim      int
	ceiling  bool
	notPre   bool // the job is not preemptible and would need to borrow
	claimed  bool // claimedMessage
	needBits uint64
}

// keptMsgKey identifies a quota message by everything it is made of
// besides the pool's definition and quotas, for a queue's passes under
// one memoConfig (queue.msgs): floats by their bits, so that keys equal
// only when the text would be.
type keptMsgKey struct {
	project   string
	key       quotaMsgKey
	used, lim [4]uint64
	claimed   [4]uint64
	claimBy   int64
}

func limitBits(l limits) [4]uint64 {
	return [4]uint64{uint64(l.gpus), math.Float64bits(l.cpus), math.Float64bits(l.mem), uint64(l.jobs)}
}

// maxKeptMsgs bounds queue.msgs; past it the cache starts afresh.
const maxKeptMsgs = 1 << 14

// keptMsg looks a quota message up in the queue's cache, kept between
// passes under the same pool definition, quotas and config.
func (ps *poolState) keptMsg(k *keptMsgKey) (string, bool) {
	if ps.memoCfg == nil || ps.q == nil {
		return "", false
	}
	m, ok := ps.q.msgs[*k]
	return m, ok
}

func (ps *poolState) keepMsg(k *keptMsgKey, m string) {
	if ps.memoCfg == nil || ps.q == nil {
		return
	}
	if ps.q.msgs == nil || len(ps.q.msgs) >= maxKeptMsgs {
		ps.q.msgs = make(map[keptMsgKey]string)
	}
	ps.q.msgs[*k] = m
}

// backoffMessage names when a retry may start. Times in messages are
// absolute, so a waiting job's message stays the same from pass to pass
// (and is not written again) until the facts change.
func backoffMessage(notBefore time.Time) string {
	return "retry backoff: may start at " + stamp(notBefore)
}

// stamp formats a time in messages: UTC, to the second.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") }

func (ps *poolState) priorityNotAccepted(j *Pending) string {
	return fmt.Sprintf("pool %s does not accept priority %s (accepts %s); resubmit with an accepted priority",
		ps.pool.Name, j.Priority, joinPriorities(ps.pool.Priorities))
}

func (ps *poolState) priorityMessage(j *Pending, pr *projState) string {
	return fmt.Sprintf("priority %s is above the highest class project %s may use in pool %s (%s)",
		j.Priority, pr.name, ps.pool.Name, domain.Priorities()[pr.rule.maxRank])
}

func (ps *poolState) maxRunningMessage() string {
	if ps.msgs.running == "" || ps.msgs.runningN != ps.running {
		ps.msgs.running = fmt.Sprintf("pool %s runs %d of %d jobs (max_running)", ps.pool.Name, ps.running, ps.pool.MaxRunning)
		ps.msgs.runningN = ps.running
	}
	return ps.msgs.running
}

// neverFitsMessage says why the pool can never hold the request.
func (ps *poolState) neverFitsMessage(r req, k, capable int) string {
	name := ps.pool.Name
	switch {
	case ps.pool.MaxGPUsPerJob > 0 && r.g*k > ps.pool.MaxGPUsPerJob:
		return fmt.Sprintf("needs %d GPUs in total; pool %s accepts at most %d per job", r.g*k, name, ps.pool.MaxGPUsPerJob)
	case ps.pool.MaxNodesPerJob > 0 && k > ps.pool.MaxNodesPerJob:
		return fmt.Sprintf("needs %d nodes; pool %s accepts at most %d per job", k, name, ps.pool.MaxNodesPerJob)
	case r.g > ps.maxG:
		return fmt.Sprintf("needs %d GPUs per node; the largest node in pool %s has %d", r.g, name, ps.maxG)
	case r.c > ps.maxC+cpuEps:
		return fmt.Sprintf("needs %s CPUs per node; the largest node in pool %s has %s", fmtCPU(r.c), name, fmtCPU(ps.maxC))
	case r.m > ps.maxM:
		return fmt.Sprintf("needs %s memory per node; the largest node in pool %s has %s", domain.ByteSize(r.m), name, domain.ByteSize(ps.maxM))
	case k > len(ps.nodes):
		return fmt.Sprintf("needs %d nodes; pool %s has %d", k, name, len(ps.nodes))
	}
	return fmt.Sprintf("needs %d nodes with %s each; only %d node(s) in pool %s are that large", k, describeReq(r), capable, name)
}

// quotaMessage: "project vision uses 8 of 8 GPUs in pool standard (quota), the job needs 4".
func (ps *poolState) quotaMessage(pr *projState, need, lim limits, ceiling, notPreemptible bool) string {
	dim := exceededDim(lim, pr.used.plus(need))
	key := quotaMsgKey{dim: dim, ceiling: ceiling, notPre: notPreemptible, needBits: math.Float64bits(amount(dim, need))}
	if m, ok := pr.msgs[key]; ok {
		return m
	}
	kk := keptMsgKey{project: pr.name, key: key, used: limitBits(pr.used), lim: limitBits(lim)}
	m, ok := ps.keptMsg(&kk)
	if !ok {
		m = ps.quotaText(pr, need, lim, dim, ceiling, notPreemptible)
		ps.keepMsg(&kk, m)
	}
	if pr.msgs == nil {
		pr.msgs = map[quotaMsgKey]string{}
	}
	pr.msgs[key] = m
	return m
}

func (ps *poolState) quotaText(pr *projState, need, lim limits, dim int, ceiling, notPreemptible bool) string {
	var m string
	if !pr.rule.has && !pr.rule.canBorrow {
		m = fmt.Sprintf("project %s has no quota in pool %s and the pool does not allow borrowing", pr.name, ps.pool.Name)
	} else {
		var b strings.Builder
		if dim == dimJobs {
			fmt.Fprintf(&b, "project %s runs %d of %d jobs in pool %s", pr.name, pr.used.jobs, lim.jobs, ps.pool.Name)
		} else {
			fmt.Fprintf(&b, "project %s uses %s of %s %s in pool %s", pr.name, fmtAmount(dim, pr.used), fmtAmount(dim, lim), dimName(dim), ps.pool.Name)
		}
		switch {
		case !ceiling:
			b.WriteString(" (quota)")
		case !pr.rule.has:
			b.WriteString(" (no quota; borrowing up to the whole pool)")
		default:
			fmt.Fprintf(&b, " (quota %s + borrow %s)", fmtAmount(dim, pr.rule.guaranteed), fmtAmount(dim, lim.minus(pr.rule.guaranteed)))
		}
		if dim != dimJobs {
			fmt.Fprintf(&b, ", the job needs %s", fmtAmount(dim, need))
		}
		m = b.String()
	}
	if notPreemptible {
		m = "job is not preemptible and would need borrowed capacity: " + m + "; make it preemptible to borrow idle capacity"
	}
	return m
}

// claimedMessage: the project's quota would fit the job but for what its
// waiting jobs hold: "project vision's quota in pool standard is held for
// job 12, which waits ahead (uses 7 of 8 GPUs, waiting jobs hold 4, the job
// needs 1)".
func (ps *poolState) claimedMessage(pr *projState, need, lim, claimed limits) string {
	dim := exceededDim(lim, pr.used.plus(claimed).plus(need))
	key := quotaMsgKey{dim: dim, claimed: true, ceiling: lim == pr.rule.ceiling, needBits: math.Float64bits(amount(dim, need))}
	if m, ok := pr.msgs[key]; ok {
		return m
	}
	kk := keptMsgKey{project: pr.name, key: key, used: limitBits(pr.used), lim: limitBits(lim), claimed: limitBits(claimed), claimBy: pr.claimBy}
	m, ok := ps.keptMsg(&kk)
	if !ok {
		m = ps.claimedText(pr, dim, need, lim, claimed)
		ps.keepMsg(&kk, m)
	}
	if pr.msgs == nil {
		pr.msgs = map[quotaMsgKey]string{}
	}
	pr.msgs[key] = m
	return m
}

func (ps *poolState) claimedText(pr *projState, dim int, need, lim, claimed limits) string {
	if dim == dimJobs {
		return fmt.Sprintf("project %s's quota in pool %s is held for job %d, which waits ahead (runs %d of %d jobs, waiting jobs hold %d more)",
			pr.name, ps.pool.Name, pr.claimBy, pr.used.jobs, lim.jobs, claimed.jobs)
	}
	return fmt.Sprintf("project %s's quota in pool %s is held for job %d, which waits ahead (uses %s of %s %s, waiting jobs hold %s, the job needs %s)",
		pr.name, ps.pool.Name, pr.claimBy, fmtAmount(dim, pr.used), fmtAmount(dim, lim), dimName(dim), fmtAmount(dim, claimed), fmtAmount(dim, need))
}

func stoppingMessage(n int, preempted bool) string {
	if preempted {
		return "waiting for " + strconv.Itoa(n) + " preempted job(s) to stop"
	}
	return "waiting for " + strconv.Itoa(n) + " stopping job(s) to release their resources"
}

// capacityMessage explains why the job does not fit now:
// "needs 16 GPUs on 2 nodes, largest free block is 8".
func (ps *poolState) capacityMessage(j *job, sh *shape) string {
	r, k := sh.key.r, sh.key.k
	c := sh.msg
	if !sh.hasMsg || c.version != ps.version {
		c = capMsg{version: ps.version, msg: ps.shortage(r, k)}
		if len(ps.holds) > 0 {
			raw := 0
			for _, n := range ps.nodes {
				if n.fitsRaw(r) {
					raw++
				}
			}
			c.rawFits = raw >= k
		}
		sh.msg, sh.hasMsg = c, true
	}
	if !c.rawFits {
		return c.msg
	}
	ps.resvAppended, ps.resvBase = true, c.msg
	return c.msg + "; " + ps.reservedTextFor(j)
}

// shortage describes the free capacity that falls short of r on k nodes.
func (ps *poolState) shortage(r req, k int) string {
	largest := ps.ix.largest()
	if r.g > 0 && ps.ix.atLeast(r.g) < k {
		if k == 1 {
			return fmt.Sprintf("needs %d GPUs on one node, largest free block is %d", r.g, largest)
		}
		return fmt.Sprintf("needs %d GPUs on %d nodes, largest free block is %d (%d node(s) have %d free)",
			r.g*k, k, largest, ps.ix.atLeast(r.g), r.g)
	}
	var maxC, maxM float64
	fits := 0
	for _, n := range ps.nodes {
		if n.availG() < r.g {
			continue
		}
		maxC = max(maxC, n.capC-n.usedC-n.resvC)
		maxM = max(maxM, n.capM-n.usedM-n.resvM)
		if n.fitsAvail(r) {
			fits++
		}
	}
	where := "one node"
	if k > 1 {
		where = fmt.Sprintf("each of %d nodes", k)
	}
	most := fmt.Sprintf("most free on a node: %s CPUs, %s memory", fmtCPU(max(maxC, 0)), domain.ByteSize(max(maxM, 0)))
	if r.g > 0 {
		most = fmt.Sprintf("most free on a node with %d free GPUs: %s CPUs, %s memory", r.g, fmtCPU(max(maxC, 0)), domain.ByteSize(max(maxM, 0)))
	}
	return fmt.Sprintf("needs %s on %s, %d node(s) have that much free (%s)", describeReq(r), where, fits, most)
}

// reservedText says which reservation keeps the job from capacity that is
// otherwise free, and why it may not run ahead of it.
func (ps *poolState) reservedText(j *Pending) string {
	h := ps.holds[0]
	rank := j.Priority.Rank()
	ahead := 0
	for _, x := range ps.holds {
		if x.rank > rank {
			ahead++
		}
	}
	var b strings.Builder
	if ahead > 0 {
		fmt.Fprintf(&b, "behind %d higher-priority job(s) holding reservations; ", ahead)
	}
	fmt.Fprintf(&b, "free capacity is reserved for job %d (priority %s)", h.job, domain.Priorities()[max(h.rank, 0)])
	switch {
	case h.est.IsZero():
		b.WriteString(", whose start cannot be estimated (running jobs without timeout), so no job may run ahead of it there")
	case j.Timeout <= 0:
		fmt.Fprintf(&b, ", estimated to start at %s; a job without a timeout may not run ahead of it", stamp(h.est))
	default:
		fmt.Fprintf(&b, ", estimated to start at %s; this job's timeout of %s ends later", stamp(h.est),
			domain.FormatDuration(j.Timeout))
	}
	return b.String()
}

func describeReq(r req) string {
	s := fmtCPU(r.c) + " CPUs, " + domain.ByteSize(r.m).String() + " memory"
	if r.g > 0 {
		s = strconv.Itoa(r.g) + " GPUs, " + s
	}
	return s
}

// amount is one dimension of l as a number.
func amount(dim int, l limits) float64 {
	switch dim {
	case dimGPUs:
		return float64(l.gpus)
	case dimCPUs:
		return l.cpus
	case dimMem:
		return l.mem
	}
	return float64(l.jobs)
}
