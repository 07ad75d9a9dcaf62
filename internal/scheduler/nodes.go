package scheduler

import (
	"math/bits"
	"slices"
	"time"

	"trainyard/internal/domain"
)

const cpuEps = 1e-9

// req is a per-node request.
type req struct {
	g int
	c float64
	m float64
}

func perNode(r domain.Resources) req {
	return req{g: max(r.GPUs, 0), c: max(r.CPUs, 0), m: float64(max(r.Memory, 0))}
}

// shapeKey identifies a request shape for memoised fit results.
type shapeKey struct {
	r req
	k int
}

// shape holds what a pass learned about one request shape. Within a pass
// available capacity only shrinks, so a failed fit stays failed.
type shape struct {
	key        shapeKey
	need       limits // whole gang, one job
	capable    int    // nodes that could hold r when empty; -1 until computed
	fitFailed  bool
	stopFailed bool
	stopAt     int // stopVersion when stopFailed was recorded
	msg        capMsg
	hasMsg     bool
	// bfVer is poolState.stateVer+1 when bfAny and bfLatest (mayBackfill)
	// were computed.
	bfVer    int
	bfAny    bool
	bfLatest time.Time
}

// holder is a job holding resources in a pool: a running allocation from the
// snapshot or a placement made earlier in this pass.
type holder struct {
	id          int64
	project     string
	rank        int
	res         req
	gang        limits
	nodes       []*nodeState
	start       time.Time
	end         time.Time // zero: unbounded
	preemptible bool
	borrowed    bool
	unentitled  bool    // too large for its project's guarantee even alone: it can never reclaim
	stopping    bool    // being stopped (in the snapshot, or chosen as a victim in this pass)
	placed      bool    // placed in this pass: a victim only by undoing the placement (unplace)
	cost        float64 // placed: what it added to its project's allocation share
	seq         int     // position in poolState.holders (creation order)
}

// releaseAt is when the holder is expected to free its resources; ok is
// false when it runs unbounded.
func (h *holder) releaseAt(now time.Time) (time.Time, bool) {
	if h.stopping {
		return now, true
	}
	if h.end.IsZero() {
		return time.Time{}, false
	}
	if h.end.Before(now) {
		return now, true
	}
	return h.end, true
}

// nodeState is one node's capacity during a pass. used includes stopping
// holders (they hold resources until they stop); resv is capacity held by
// reservations of waiting jobs. What later jobs may use is cap-used-resv
// (avail), or cap-used for backfill onto reserved nodes.
type nodeState struct {
	idx     int
	name    string
	gpuIDs  []int // device indices, ascending
	gpuUsed []bool
	capG    int
	capC    float64
	capM    float64
	usedG   int
	usedC   float64
	usedM   float64
	stopG   int
	stopC   float64
	stopM   float64
	resvG   int
	resvC   float64
	resvM   float64
	// resvStart is the earliest estimated start among reservations on the
	// node; resvBlocked means one has no estimate, so nothing may backfill.
	resvStart   time.Time
	resvBlocked bool
	reserved    bool
	holders     []*holder
	bucket      int
	// Victim bounds (victimBound), valid while boundOK.
	bound   [4]deficit // by job rank
	boundB  deficit
	boundOK bool
}

func (n *nodeState) availG() int { return max(0, n.capG-n.usedG-n.resvG) }

func (n *nodeState) fitsAvail(r req) bool {
	return r.g <= n.capG-n.usedG-n.resvG && r.c <= n.capC-n.usedC-n.resvC+cpuEps && r.m <= n.capM-n.usedM-n.resvM
}

func (n *nodeState) fitsRaw(r req) bool {
	return r.g <= n.capG-n.usedG && r.c <= n.capC-n.usedC+cpuEps && r.m <= n.capM-n.usedM
}

func (n *nodeState) fitsAfterStops(r req) bool {
	return r.g <= n.capG-n.usedG+n.stopG-n.resvG && r.c <= n.capC-n.usedC+n.stopC-n.resvC+cpuEps &&
		r.m <= n.capM-n.usedM+n.stopM-n.resvM
}

func (n *nodeState) fitsEmpty(r req) bool {
	return r.g <= n.capG && r.c <= n.capC+cpuEps && r.m <= n.capM
}

// take assigns the lowest free GPU indices and the request's CPUs and memory.
func (n *nodeState) take(r req) []int {
	gpus := make([]int, 0, r.g)
	for i, used := range n.gpuUsed {
		if len(gpus) == r.g {
			break
		}
		if !used {
			n.gpuUsed[i] = true
			gpus = append(gpus, n.gpuIDs[i])
		}
	}
	n.usedG += r.g
	n.usedC += r.c
	n.usedM += r.m
	return gpus
}

// nodeIndex buckets nodes by available GPUs (bitsets over node indices), so
// a fit query visits only nodes with enough GPUs, best fit first.
type nodeIndex struct {
	buckets [][]uint64
	count   []int
}

func newNodeIndex(maxG, nodes int) nodeIndex {
	words := (nodes + 63) / 64
	ix := nodeIndex{buckets: make([][]uint64, maxG+1), count: make([]int, maxG+1)}
	for b := range ix.buckets {
		ix.buckets[b] = make([]uint64, words)
	}
	return ix
}

func (ix *nodeIndex) set(n *nodeState, b int) {
	ix.buckets[b][n.idx/64] |= 1 << (n.idx % 64)
	ix.count[b]++
	n.bucket = b
}

func (ix *nodeIndex) move(n *nodeState) {
	b := n.availG()
	if b == n.bucket {
		return
	}
	ix.buckets[n.bucket][n.idx/64] &^= 1 << (n.idx % 64)
	ix.count[n.bucket]--
	ix.set(n, b)
}

// atLeast counts nodes with at least g available GPUs.
func (ix *nodeIndex) atLeast(g int) int {
	c := 0
	for b := g; b < len(ix.count); b++ {
		c += ix.count[b]
	}
	return c
}

// largest is the most available GPUs on one node.
func (ix *nodeIndex) largest() int {
	for b := len(ix.count) - 1; b > 0; b-- {
		if ix.count[b] > 0 {
			return b
		}
	}
	return 0
}

// scan returns up to k nodes that fit r in available capacity: fewest
// available GPUs first, then node name.
func (ps *poolState) scanAvail(r req, k int) []*nodeState {
	if r.g >= len(ps.ix.count) || ps.ix.atLeast(r.g) < k {
		return nil
	}
	var chosen []*nodeState
	for b := r.g; b < len(ps.ix.buckets); b++ {
		if ps.ix.count[b] == 0 {
			continue
		}
		for w, word := range ps.ix.buckets[b] {
			for word != 0 {
				i := w*64 + bits.TrailingZeros64(word)
				word &= word - 1
				if n := ps.nodes[i]; n.fitsAvail(r) {
					chosen = append(chosen, n)
					if len(chosen) == k {
						return chosen
					}
				}
			}
		}
	}
	return chosen
}

// fit finds k distinct nodes for r. Capacity held by reservations is used
// only by a job with a timeout that ends before the reservation's estimated
// start (backfill), and only after unreserved capacity.
func (ps *poolState) fit(sh *shape, timeout time.Duration) []*nodeState {
	r, k := sh.key.r, sh.key.k
	var bf []*nodeState
	if timeout > 0 && len(ps.reserved) > 0 {
		for _, n := range ps.reserved {
			if !n.resvBlocked && ps.endsBy(timeout, n.resvStart) && n.fitsRaw(r) && !n.fitsAvail(r) {
				bf = append(bf, n)
			}
		}
	}
	if sh.fitFailed && len(bf) == 0 {
		return nil
	}
	chosen := ps.scanAvail(r, k)
	if len(chosen) == k {
		return chosen
	}
	sh.fitFailed = true
	for _, n := range bf {
		if len(chosen) == k {
			break
		}
		chosen = append(chosen, n)
	}
	if len(chosen) < k {
		return nil
	}
	return chosen
}

// fitAfterStops finds k nodes that fit r once stopping holders release
// their resources (nodes that fit now count too), or nil.
func (ps *poolState) fitAfterStops(sh *shape) []*nodeState {
	if ps.stoppingNodes == 0 {
		return nil
	}
	r, k := sh.key.r, sh.key.k
	if sh.stopFailed && sh.stopAt == ps.stopVersion {
		return nil
	}
	if k == 1 {
		// One node: the tightest fit, so that a job does not take the room
		// a job preempted for another one leaves (preemption chose that
		// room as the smallest that fits its beneficiary).
		var best *nodeState
		var bg int
		var bc, bm float64
		for _, n := range ps.nodes {
			if !n.fitsAfterStops(r) || n.fitsAvail(r) {
				continue
			}
			g, c, m := n.capG-n.usedG+n.stopG-n.resvG-r.g, n.capC-n.usedC+n.stopC-n.resvC-r.c, n.capM-n.usedM+n.stopM-n.resvM-r.m
			if best == nil || g < bg || g == bg && (c < bc || c == bc && m < bm) {
				best, bg, bc, bm = n, g, c, m
			}
		}
		if best != nil {
			return []*nodeState{best}
		}
		sh.stopFailed, sh.stopAt = true, ps.stopVersion
		return nil
	}
	var chosen []*nodeState
	needStop := false
	for _, n := range ps.nodes {
		if n.fitsAfterStops(r) {
			chosen = append(chosen, n)
			needStop = needStop || !n.fitsAvail(r)
			if len(chosen) == k && needStop {
				return chosen
			}
		}
	}
	sh.stopFailed, sh.stopAt = true, ps.stopVersion
	return nil
}

// reserve holds r on nodes for a waiting job with estimated start est (zero:
// unknown, so nothing may backfill there).
func (ps *poolState) reserve(id int64, rank int, r req, nodes []*nodeState, est time.Time) {
	for _, n := range nodes {
		ps.touch(n, false)
		n.resvG += r.g
		n.resvC += r.c
		n.resvM += r.m
		if est.IsZero() {
			n.resvBlocked = true
		} else if n.resvStart.IsZero() || est.Before(n.resvStart) {
			n.resvStart = est
		}
		if !n.reserved {
			n.reserved = true
			ps.reserved = append(ps.reserved, n)
		}
		ps.ix.move(n)
	}
	ps.holds = append(ps.holds, reservation{job: id, rank: rank, est: est})
	ps.stateVer++
}

// estimate picks the k nodes where r can start soonest, judged by when
// holders end (StartedAt+Timeout), and returns them with the gang's
// estimated start (zero when some node's start is unknown).
func (ps *poolState) estimate(r req, k int) ([]*nodeState, time.Time) {
	type cand struct {
		n     *nodeState
		t     time.Time
		known bool
		defG  int
		defC  float64
		defM  float64
	}
	var cands []cand
	var rel []*holder
	for _, n := range ps.nodes {
		if !n.fitsEmpty(r) {
			continue
		}
		c := cand{n: n, defG: r.g - (n.capG - n.usedG - n.resvG), defC: r.c - (n.capC - n.usedC - n.resvC), defM: r.m - (n.capM - n.usedM - n.resvM)}
		if c.defG <= 0 && c.defC <= cpuEps && c.defM <= 0 {
			c.t, c.known = ps.now, true
		} else {
			rel = rel[:0]
			for _, h := range n.holders {
				if ps.trackNow && !h.end.IsZero() && !h.stopping {
					ps.nowR.expired(h.end, ps.now)
				}
				if _, ok := h.releaseAt(ps.now); ok {
					rel = append(rel, h)
				}
			}
			slices.SortFunc(rel, func(a, b *holder) int {
				ta, _ := a.releaseAt(ps.now)
				tb, _ := b.releaseAt(ps.now)
				if c := ta.Compare(tb); c != 0 {
					return c
				}
				return compareInt64(a.id, b.id)
			})
			g, cp, m := c.defG, c.defC, c.defM
			for _, h := range rel {
				g, cp, m = g-h.res.g, cp-h.res.c, m-h.res.m
				if g <= 0 && cp <= cpuEps && m <= 0 {
					c.t, _ = h.releaseAt(ps.now)
					c.known = true
					break
				}
			}
		}
		cands = append(cands, c)
	}
	less := func(a, b *cand) int {
		switch {
		case a.known != b.known:
			if a.known {
				return -1
			}
			return 1
		case a.known && !a.t.Equal(b.t):
			return a.t.Compare(b.t)
		case a.defG != b.defG:
			return compareInt(a.defG, b.defG)
		case a.defC != b.defC:
			return compareFloat(a.defC, b.defC)
		case a.defM != b.defM:
			return compareFloat(a.defM, b.defM)
		}
		return compareInt(a.n.idx, b.n.idx)
	}
	if k > 8 {
		slices.SortFunc(cands, func(a, b cand) int { return less(&a, &b) })
	} else {
		// Only the k best matter: select them in order.
		for i := 0; i < k && i < len(cands); i++ {
			m := i
			for x := i + 1; x < len(cands); x++ {
				if less(&cands[x], &cands[m]) < 0 {
					m = x
				}
			}
			cands[i], cands[m] = cands[m], cands[i]
		}
	}
	if len(cands) < k {
		return nil, time.Time{}
	}
	nodes := make([]*nodeState, k)
	var est time.Time
	known := true
	for i, c := range cands[:k] {
		nodes[i] = c.n
		if !c.known {
			known = false
		} else if c.t.After(est) {
			est = c.t
		}
	}
	if !known {
		est = time.Time{}
	}
	if !est.IsZero() && est.Equal(ps.now) {
		ps.nowR.flows = true // the estimate is the time
	}
	return nodes, est
}

func compareInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func compareInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func compareFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
