package sqlite

// storeSnapshot stores the config snapshot of hash unless it is known to
// be stored.
func (w *writer) storeSnapshot(hash string, specJSON []byte) error {
	if w.snaps.Stored(hash) {
		return nil
	}
	if _, err := w.exec(insertSnapshotSQL, hash, specJSON); err != nil {
		return interpretError("create job: store config snapshot", err)
	}
	w.snaps.Add(hash)
	return nil
}
