package service

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"trainyard/internal/audit"
	"trainyard/internal/authz"
	"trainyard/internal/domain"
	"trainyard/internal/store"
)

// The audit witness (docs/audit.md): the server follows the audit log and
// writes its head, with checkpoints, to a file outside the store
// (Config.AuditWitness), so that removing the newest records or rewriting
// them with recomputed hashes is caught by verification. The witness only
// moves forward: when the store no longer continues it, it stays at the last
// good head, as evidence, and the problem is logged.

// serverWitnessName and keptWitnessName name the witnesses in messages.
const (
	serverWitnessName = "the server's witness"
	keptWitnessName   = "the witness you gave"
)

// maxWitnessBytes bounds a witness file read or sent.
const maxWitnessBytes = 1 << 20

// witnessKeeper is the server's witness as last written.
type witnessKeeper struct {
	mu      sync.Mutex
	w       audit.Witness
	loaded  bool
	problem string // the problem last logged, so each is logged once
}

// readWitnessFile reads the witness at path; ok is false when there is none.
func readWitnessFile(path string) (w audit.Witness, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return audit.Witness{Name: serverWitnessName}, false, nil
	}
	if err != nil {
		return audit.Witness{}, false, fmt.Errorf("read the audit witness %s: %w", path, err)
	}
	if len(b) > maxWitnessBytes {
		return audit.Witness{}, false, fmt.Errorf("the audit witness %s is %d bytes, more than a witness holds", path, len(b))
	}
	w, err = audit.ParseWitness(b)
	if err != nil {
		return audit.Witness{}, false, fmt.Errorf("the audit witness %s cannot be read: %w", path, err)
	}
	w.Name = serverWitnessName
	return w, true, nil
}

// writeWitnessFile replaces the witness at path atomically and durably: a
// temporary file in the same directory, synced, renamed over it, and the
// directory synced, so a crash leaves the old witness or the new one.
func writeWitnessFile(path string, w audit.Witness) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, ".audit-witness-*")
	if err != nil {
		return fmt.Errorf("write the audit witness in %s: %w", dir, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op after the rename
	_, err = f.Write(w.Marshal())
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write the audit witness %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("install the audit witness %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // the rename itself survives a crash
		d.Close()
	}
	return nil
}

// LoadAuditWitness reads the server's witness (Config.AuditWitness) before
// the server starts following the log. A missing file starts an empty
// witness, written at once, so that a path that cannot be written fails the
// start rather than going unnoticed. A file that is not a witness is an
// error: it may be the evidence of tampering, so it is never overwritten.
func (s *AuditService) LoadAuditWitness() error {
	if s.cfg.AuditWitness == "" {
		return nil
	}
	k := &s.witness
	k.mu.Lock()
	defer k.mu.Unlock()
	return s.loadWitnessLocked()
}

func (s *AuditService) loadWitnessLocked() error {
	k, path := &s.witness, s.cfg.AuditWitness
	w, ok, err := readWitnessFile(path)
	if err != nil {
		return fmt.Errorf("%w; keep it as evidence, move it aside and start again to begin a new witness (docs/audit.md)", err)
	}
	if !ok {
		w.WrittenAt = s.cfg.Clock.Now()
		if err := writeWitnessFile(path, w); err != nil {
			return fmt.Errorf("%w; set audit_witness in the server config to a writable path", err)
		}
		s.cfg.Logger.Info("started a new audit witness; keep a copy of it elsewhere (docs/audit.md)", "witness", path)
	}
	k.w, k.loaded = w, true
	return nil
}

// UpdateAuditWitness moves the server's witness to the newest record of the
// audit log and writes it when it moved. When the log no longer continues
// the witnessed chain (its newest records were removed or replaced) the
// witness stays where it is, and the *audit.Problem is returned and logged
// once. Other errors are reading the log or writing the file.
func (s *AuditService) UpdateAuditWitness(ctx context.Context) (audit.Witness, error) {
	if s.cfg.AuditWitness == "" {
		return audit.Witness{}, nil
	}
	k := &s.witness
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.loaded {
		if err := s.loadWitnessLocked(); err != nil {
			return audit.Witness{}, err
		}
	}
	w, problem, readErr := k.w, error(nil), error(nil)
	for {
		recs, err := s.st.ListAudit(ctx, store.AuditFilter{AfterSeq: max(w.Seq-1, 0), Limit: auditPage})
		if len(recs) > 0 || err == nil {
			if w, problem = w.Extend(recs); problem != nil {
				break
			}
		}
		if err != nil {
			readErr = fmt.Errorf("audit witness: read the audit log after record %d: %w", w.Seq, err)
			break
		}
		if len(recs) < auditPage {
			break
		}
	}
	if w.Seq != k.w.Seq {
		w.WrittenAt = s.cfg.Clock.Now()
		if err := writeWitnessFile(s.cfg.AuditWitness, w); err != nil {
			return k.w, err
		}
		k.w = w
	}
	if problem != nil {
		if msg := problem.Error(); msg != k.problem {
			s.cfg.Logger.Error("the audit log no longer continues its witness, which stays at the last record it saw, as evidence; run trainyard audit verify (docs/audit.md)",
				"witness", s.cfg.AuditWitness, "problem", msg)
			k.problem = msg
		}
		return k.w, problem
	}
	if k.problem != "" && readErr == nil {
		s.cfg.Logger.Info("the audit log continues its witness again", "witness", s.cfg.AuditWitness, "seq", k.w.Seq)
		k.problem = ""
	}
	return k.w, readErr
}

// RunAuditWitness updates the witness now, on every tick and once more when
// ctx ends (the server ticks every second). Failures are logged (a problem
// with the log once, until it changes) and retried on the next tick.
func (s *AuditService) RunAuditWitness(ctx context.Context, ticks <-chan time.Time) {
	if s.cfg.AuditWitness == "" {
		return
	}
	var lastErr string
	update := func(ctx context.Context) {
		_, err := s.UpdateAuditWitness(ctx)
		var p *audit.Problem
		switch {
		case err == nil || errors.As(err, &p):
			lastErr = ""
		case err.Error() != lastErr && ctx.Err() == nil:
			s.cfg.Logger.Warn("audit witness not updated; retrying", "witness", s.cfg.AuditWitness, "err", err)
			lastErr = err.Error()
		}
	}
	for {
		update(ctx)
		select {
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			update(final)
			cancel()
			return
		case <-ticks:
		}
	}
}

// serverWitnesses returns the witnesses the log is checked against: the
// server's witness file as it is on disk and, when this server follows the
// log, the witness it last wrote. replaced is a problem with the file
// itself: missing, damaged, or older than what this server wrote.
func (s *AuditService) serverWitnesses() (ws []audit.Witness, file *audit.Witness, replaced *audit.Problem) {
	if s.cfg.AuditWitness == "" {
		return nil, nil, nil
	}
	k := &s.witness
	k.mu.Lock()
	defer k.mu.Unlock()
	w, ok, err := readWitnessFile(s.cfg.AuditWitness)
	mem, loaded := k.w, k.loaded && k.w.Seq > 0
	mem.Name = "the witness this server wrote"
	if ok {
		ws = append(ws, w)
		file = &w
	}
	if loaded && (!ok || mem.Seq != w.Seq || mem.Hash != w.Hash) {
		ws = append(ws, mem)
	}
	switch {
	case err != nil:
		replaced = &audit.Problem{Kind: audit.WitnessReplaced,
			Message: fmt.Sprintf("%s was damaged or replaced: %v", serverWitnessName, err)}
	case !ok && loaded:
		replaced = &audit.Problem{Kind: audit.WitnessReplaced, Other: mem.Seq,
			Message: fmt.Sprintf("%s was deleted: this server last wrote it at record %d", serverWitnessName, mem.Seq)}
	case ok && loaded:
		replaced = audit.CompareWitnesses(mem, w)
	}
	return ws, file, replaced
}

// AuditVerification is the outcome of VerifyAudit: the report on the log
// and the server's witness it was checked against (nil when none is kept).
type AuditVerification struct {
	audit.Report
	Witness *audit.Witness
}

// VerifyAudit walks the whole audit log, page by page, and checks its hash
// chain (see audit.Verify) and that it still holds what the server's witness
// and kept, a witness the caller kept (a witness file; nil or empty: none),
// saw. A broken chain, a log behind a witness and a witness that moved
// backwards are not errors: they are the report's Problem, the first found.
// The error is for a log that could not be read, or a kept witness that is
// not one.
func (s *AuditService) VerifyAudit(ctx context.Context, p Principal, kept []byte) (AuditVerification, error) {
	var keptW *audit.Witness
	if len(kept) > 0 {
		w, err := audit.ParseWitness(kept)
		if err != nil {
			return AuditVerification{}, domain.FieldErrors{{Path: "witness", Message: err.Error() + "; give a file written by the server (audit_witness) or by trainyard audit witness"}}
		}
		w.Name = keptWitnessName
		keptW = &w
	}
	if err := s.authorize(ctx, p, authz.AuditRead, authz.Resource{Kind: "audit"}); err != nil {
		return AuditVerification{}, err
	}
	// The witnesses are read before the log: the log only grows, so it
	// reaches them unless records were removed.
	ws, file, replaced := s.serverWitnesses()
	if keptW != nil {
		ws = append(ws, *keptW)
	}
	rep, err := audit.Verify(store.AuditRecords(ctx, s.st, 0, auditPage), ws...)
	if err != nil {
		return AuditVerification{}, fmt.Errorf("verify the audit log: %w", err)
	}
	if rep.Problem == nil {
		rep.Problem = replaced
	}
	if rep.Problem == nil && keptW != nil && file != nil {
		rep.Problem = audit.CompareWitnesses(*keptW, *file)
	}
	return AuditVerification{Report: rep, Witness: file}, nil
}

// AuditWitness returns the server's witness file as it is on disk, for an
// operator to keep elsewhere (trainyard audit witness).
func (s *AuditService) AuditWitness(ctx context.Context, p Principal) ([]byte, error) {
	if err := s.authorize(ctx, p, authz.AuditRead, authz.Resource{Kind: "audit"}); err != nil {
		return nil, err
	}
	if s.cfg.AuditWitness == "" {
		return nil, domain.Errorf(domain.ErrNotFound, "this server keeps no audit witness; set audit_witness in its config (docs/audit.md)")
	}
	s.witness.mu.Lock()
	defer s.witness.mu.Unlock()
	w, ok, err := readWitnessFile(s.cfg.AuditWitness)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, domain.Errorf(domain.ErrNotFound, "the server has not written its audit witness yet; try again in a few seconds")
	}
	return w.Marshal(), nil
}
