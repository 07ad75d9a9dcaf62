package sqlstore

// Config snapshots are immutable and never deleted (migration 0001's
// triggers refuse both), so once one is committed every later job of the
// same spec can skip inserting it: most submits repeat a spec that is
// already stored. SnapshotCache remembers what a backend's writer knows is
// stored; only the writer goroutine touches it.

// knownSnapshots bounds how many committed snapshot hashes a writer
// remembers; past it, the set starts afresh.
const knownSnapshots = 4096

// SnapshotCache knows which config snapshots are stored. The zero value
// knows none.
type SnapshotCache struct {
	// committed holds hashes of snapshots in committed transactions.
	committed map[string]struct{}
	// added lists the hashes inserted in the running transaction, in
	// order, so a request rolled back can drop its own.
	added []string
}

// Committed reports whether the snapshot of hash is known to be in a
// committed transaction.
func (c *SnapshotCache) Committed(hash string) bool {
	_, ok := c.committed[hash]
	return ok
}

// Stored reports whether the snapshot of hash is known to be stored in
// the running transaction's view: committed, or added by it.
func (c *SnapshotCache) Stored(hash string) bool {
	if c.Committed(hash) {
		return true
	}
	for _, h := range c.added {
		if h == hash {
			return true
		}
	}
	return false
}

// Add records that the running transaction inserted the snapshot of hash.
func (c *SnapshotCache) Add(hash string) { c.added = append(c.added, hash) }

// Mark returns a mark to Undo back to: what the running transaction added
// so far.
func (c *SnapshotCache) Mark() int { return len(c.added) }

// Undo forgets what the running transaction added since mark: that
// request's writes were rolled back.
func (c *SnapshotCache) Undo(mark int) { c.added = c.added[:mark] }

// Begin forgets what an earlier, uncommitted transaction added.
func (c *SnapshotCache) Begin() { c.added = c.added[:0] }

// Commit records the running transaction's snapshots as stored.
func (c *SnapshotCache) Commit() {
	if len(c.added) == 0 {
		return
	}
	if c.committed == nil || len(c.committed)+len(c.added) > knownSnapshots {
		c.committed = make(map[string]struct{}, len(c.added))
	}
	for _, h := range c.added {
		c.committed[h] = struct{}{}
	}
	c.added = c.added[:0]
}
