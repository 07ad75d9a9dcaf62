package sqlite

// Config snapshots are immutable and never deleted (migration 0001's
// triggers refuse both), so once one is committed every later job of
// the same spec can skip inserting it: most submits repeat a spec that is
// already stored. snapshotCache remembers what the writer knows is
// stored; only the writer goroutine touches it.

// knownSnapshots bounds how many committed snapshot hashes the writer
// remembers; past it, the set starts afresh.
const knownSnapshots = 4096

type snapshotCache struct {
	// committed holds hashes of snapshots in committed transactions.
	committed map[string]struct{}
	// added lists the hashes inserted in the running transaction, in
	// order, so a request rolled back to its savepoint can drop its own.
	added []string
}

// stored reports whether the snapshot of hash is known to be stored in
// the running transaction's view.
func (c *snapshotCache) stored(hash string) bool {
	if _, ok := c.committed[hash]; ok {
		return true
	}
	for _, h := range c.added {
		if h == hash {
			return true
		}
	}
	return false
}

// begin forgets what an earlier, uncommitted transaction added.
func (c *snapshotCache) begin() { c.added = c.added[:0] }

// undo forgets what the running transaction added since mark (a length of
// added): that request's savepoint was rolled back.
func (c *snapshotCache) undo(mark int) { c.added = c.added[:mark] }

// commit records the running transaction's snapshots as stored.
func (c *snapshotCache) commit() {
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

// storeSnapshot stores the config snapshot of hash unless it is known to
// be stored.
func (w *writer) storeSnapshot(hash string, specJSON []byte) error {
	if w.snaps.stored(hash) {
		return nil
	}
	if _, err := w.exec(insertSnapshotSQL, hash, specJSON); err != nil {
		return interpretError("create job: store config snapshot", err)
	}
	w.snaps.added = append(w.snaps.added, hash)
	return nil
}
