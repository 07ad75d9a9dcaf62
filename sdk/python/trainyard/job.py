"""The in-job side of the SDK: helpers for training scripts (Python standard
library only). They are also importable as trainyard.report etc., and as the
older module trainyard_sdk.

    import trainyard as ty

    start = ty.resume_from()            # newest complete checkpoint, or None
    for step in range(...):
        ...
        ty.report(step, loss=loss, lr=lr)
        # one file, written atomically, then marked complete:
        ty.save_checkpoint("step-%d.pt" % step, lambda f: torch.save(state, f))

report() sends metrics to the Trainyard server with the attempt's job token
(TRAINYARD_API, TRAINYARD_JOB_TOKEN, TRAINYARD_JOB_ID, TRAINYARD_ATTEMPT),
in batches of up to 100 steps or every second, and flushes at exit. Without
an API configured, or when a send fails, it prints the progress line
`trainyard: {"step": N, "loss": X}` on stdout instead, which the platform
parses from the log. Reporting never raises into the training loop.
"""

import atexit
import json
import math
import os
import secrets
import shutil
import sys
import threading
import urllib.error
import urllib.request

__all__ = ["Reporter", "report", "flush", "checkpoint_dir", "resume_from", "save_checkpoint", "checkpoint_done"]

DEFAULT_BATCH = 100
DEFAULT_INTERVAL = 1.0
TIMEOUT = 10.0


class Reporter:
    """Batches metric reports for one attempt.

    With api empty, every report is printed as a progress line instead.
    """

    def __init__(self, api=None, token=None, job_id=None, attempt=None,
                 batch_size=DEFAULT_BATCH, interval=DEFAULT_INTERVAL, out=None):
        env = os.environ
        self.api = (env.get("TRAINYARD_API", "") if api is None else api).rstrip("/")
        self.token = env.get("TRAINYARD_JOB_TOKEN", "") if token is None else token
        self.job_id = env.get("TRAINYARD_JOB_ID", "") if job_id is None else str(job_id)
        self.attempt = env.get("TRAINYARD_ATTEMPT", "") if attempt is None else str(attempt)
        self.batch_size = max(1, int(batch_size))
        self.interval = float(interval)
        self.out = out
        self._lock = threading.Lock()
        self._pending = []
        self._closed = False
        self._warned = False
        self._wake = threading.Event()
        self._thread = None
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="trainyard-report", daemon=True)
            self._thread.start()

    @property
    def enabled(self):
        """True when reports go to the API rather than stdout."""
        return bool(self.api and self.token and self.job_id and self.attempt)

    def report(self, step, **metrics):
        """Record the metrics of one training step (numbers only)."""
        step = int(step)
        if step < 0:
            raise ValueError("step must be 0 or more, got %d" % step)
        clean = {}
        for k, v in metrics.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise TypeError("metric %r must be a number, got %r" % (k, v))
            if math.isfinite(v):
                clean[k] = float(v)
        if not clean:
            return
        point = {"step": step, "metrics": clean}
        if not self.enabled:
            self._print([point])
            return
        with self._lock:
            if self._closed:
                self._print([point])
                return
            self._pending.append(point)
            full = len(self._pending) >= self.batch_size
        if full:
            self.flush()

    def flush(self):
        """Send every pending report now."""
        with self._lock:
            batch, self._pending = self._pending, []
        if batch:
            self._send(batch)

    def close(self):
        """Flush and stop the background sender."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(TIMEOUT + 1)
        self.flush()

    def _run(self):
        while not self._closed:
            self._wake.wait(self.interval)
            self.flush()

    def _send(self, batch):
        url = "%s/api/v1/jobs/%s/attempts/%s/metrics" % (self.api, self.job_id, self.attempt)
        body = json.dumps({"points": batch}).encode()
        req = urllib.request.Request(url, data=body, method="POST", headers={
            "Authorization": "Bearer " + self.token, "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
                resp.read()
        except (urllib.error.URLError, OSError, ValueError) as e:
            if not self._warned:
                self._warned = True
                detail = e.read().decode(errors="replace")[:300] if isinstance(e, urllib.error.HTTPError) else ""
                print("trainyard_sdk: cannot report metrics to %s (%s) %s; printing progress lines instead"
                      % (self.api, e, detail), file=sys.stderr, flush=True)
            self._print(batch)

    def _print(self, batch):
        out = self.out or sys.stdout
        for p in batch:
            line = {"step": p["step"]}
            line.update(p["metrics"])
            print("trainyard: " + json.dumps(line), file=out, flush=True)


_default = None
_default_lock = threading.Lock()


def _reporter():
    global _default
    with _default_lock:
        if _default is None:
            _default = Reporter()
            atexit.register(_default.close)
        return _default


def report(step, **metrics):
    """Report one training step's metrics, e.g. report(100, loss=0.53)."""
    _reporter().report(step, **metrics)


def flush():
    """Send pending reports now (they are also sent every second and at exit)."""
    _reporter().flush()


def checkpoint_dir():
    """The directory to write checkpoints to (created if missing):
    TRAINYARD_CHECKPOINT_DIR, else ./checkpoints."""
    d = os.environ.get("TRAINYARD_CHECKPOINT_DIR") or os.path.join(os.getcwd(), "checkpoints")
    os.makedirs(d, exist_ok=True)
    return d


def resume_from():
    """The checkpoint to resume from (TRAINYARD_RESUME_FROM): the path of
    the newest complete checkpoint whose SHA-256 still verifies, or None
    on a fresh start (or when there is none)."""
    return os.environ.get("TRAINYARD_RESUME_FROM") or None


MARKER = ".complete"
TMP_PREFIX = ".tmp-"


def _check_name(name):
    if (not isinstance(name, str) or not name or name in (".", "..") or os.path.basename(name) != name
            or "/" in name or (os.altsep and os.altsep in name) or "\0" in name
            or name.startswith(".") or name.endswith(".tmp") or name.endswith(MARKER)):
        raise ValueError("checkpoint name %r: give a name directly under the checkpoint dir "
                         "(no slashes, not hidden, not ending in .tmp or %s)" % (name, MARKER))


def _fsync_dir(path):
    if os.name != "posix":
        return  # directories cannot be opened for fsync there
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path):
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(top):
    """fsync every regular file and directory at or below top (no links followed)."""
    for root, dirs, files in os.walk(top):
        for name in files:
            p = os.path.join(root, name)
            if os.path.isfile(p) and not os.path.islink(p):
                _fsync_file(p)
        _fsync_dir(root)


def _write_marker(path):
    """Create (or touch) the empty marker file path, never through a link,
    and make it and its directory durable."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o666)
    try:
        if os.utime in os.supports_fd:
            os.utime(fd)  # a marker kept from an earlier version: completed now
        os.fsync(fd)
    finally:
        os.close(fd)
    _fsync_dir(os.path.dirname(path))


def _remove(path):
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    except FileNotFoundError:
        pass


def save_checkpoint(name, write, *, directory=False, path=False):
    """Save the checkpoint checkpoint_dir()/name so that it is either whole
    and marked complete, or absent: a save cut short (an exception, a kill,
    a crash) is never handed to a later attempt as TRAINYARD_RESUME_FROM.

    write makes the data, under a hidden temporary name in the checkpoint
    dir; then save_checkpoint fsyncs it, renames it to name, fsyncs the
    directory, writes the marker and fsyncs again. Returns the final path.

    - A single file (the default): write(f) gets a binary file object open
      for writing, e.g. lambda f: torch.save(state, f). write may also be
      bytes. With path=True, write(p) gets instead the path of a file to
      write (for libraries that take a file name); the temporary name
      keeps name's extension. The marker is the file name.complete beside it.
    - A directory (directory=True): write(p) gets the path of an empty
      directory to fill, e.g. lambda p: model.save_pretrained(p). Its
      marker is name/.complete.

    Saving again under the same name replaces the checkpoint whole (a new
    version of it). name must be directly under the checkpoint dir: no
    slashes, not hidden, not ending in .tmp or .complete. An exception
    from write removes the temporary data and is raised again.
    """
    _check_name(name)
    if directory and path:
        raise ValueError("save_checkpoint: directory=True already passes a path; drop path=True")
    if not callable(write) and (directory or path or not isinstance(write, (bytes, bytearray, memoryview))):
        raise TypeError("save_checkpoint: write must be a callable%s, got %r"
                        % ("" if directory or path else " or bytes", type(write).__name__))
    parent = checkpoint_dir()
    final = os.path.join(parent, name)
    if directory:
        return _save_dir(parent, name, final, write)
    if os.path.isdir(final) and not os.path.islink(final):
        raise ValueError("checkpoint %r: %s is a directory; save a file under another name" % (name, final))
    ext = os.path.splitext(name)[1]
    tmp = os.path.join(parent, TMP_PREFIX + secrets.token_hex(8) + (ext if len(ext) <= 32 else ""))
    try:
        if path:
            write(tmp)  # not created first: a writer that adds a suffix leaves nothing at tmp
        else:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
            with os.fdopen(fd, "wb") as f:
                if callable(write):
                    write(f)
                else:
                    f.write(write)
        if os.path.islink(tmp) or not os.path.isfile(tmp):
            raise ValueError("checkpoint %r: write(%r) left no regular file there" % (name, tmp))
        _fsync_file(tmp)
        os.replace(tmp, final)
    except BaseException:
        _remove(tmp)
        raise
    _fsync_dir(parent)
    _write_marker(final + MARKER)
    return final


def _save_dir(parent, name, final, write):
    if os.path.lexists(final) and (os.path.islink(final) or not os.path.isdir(final)):
        raise ValueError("checkpoint %r: %s exists and is not a directory; save the directory under another name"
                         % (name, final))
    tmp = os.path.join(parent, TMP_PREFIX + secrets.token_hex(8))
    os.mkdir(tmp)
    old = None
    try:
        write(tmp)
        if os.path.islink(tmp) or not os.path.isdir(tmp):
            raise ValueError("checkpoint %r: write(%r) left no directory there" % (name, tmp))
        _fsync_tree(tmp)
        if os.path.lexists(final):
            # A directory cannot be renamed over a full one: move the old
            # version aside (hidden, so never taken for a checkpoint) first.
            old = os.path.join(parent, TMP_PREFIX + secrets.token_hex(8))
            os.rename(final, old)
        os.rename(tmp, final)
    except BaseException:
        _remove(tmp)
        if old is not None and not os.path.lexists(final):
            os.rename(old, final)
            old = None
        raise
    _fsync_dir(parent)
    if old is not None:
        _remove(old)
    _write_marker(os.path.join(final, MARKER))
    return final


def checkpoint_done(name):
    """Mark the checkpoint directory checkpoint_dir()/name complete, once
    its data is written: fsync it, write its marker file and, with an API
    configured, register it with the server at once. Only a complete
    checkpoint is handed to the next attempt as TRAINYARD_RESUME_FROM.
    Returns the checkpoint's path; raises ValueError when there is no such
    directory. (save_checkpoint(name, write, directory=True) writes a
    directory and marks it in one step.)"""
    if not name or os.path.basename(name) != name or name.startswith(".") or name.endswith(".tmp"):
        raise ValueError("checkpoint name %r: give a directory name directly under the checkpoint dir" % (name,))
    path = os.path.join(checkpoint_dir(), name)
    if os.path.islink(path) or not os.path.isdir(path):
        raise ValueError("checkpoint %r: no directory %s; write the checkpoint first" % (name, path))
    _fsync_tree(path)
    _write_marker(os.path.join(path, MARKER))
    env = os.environ
    api, token = env.get("TRAINYARD_API", "").rstrip("/"), env.get("TRAINYARD_JOB_TOKEN", "")
    job, attempt = env.get("TRAINYARD_JOB_ID", ""), env.get("TRAINYARD_ATTEMPT", "")
    if api and token and job and attempt:
        req = urllib.request.Request("%s/api/v1/jobs/%s/attempts/%s/checkpoints" % (api, job, attempt),
                                     data=json.dumps({"name": name}).encode(), method="POST",
                                     headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
                resp.read()
        except (urllib.error.URLError, OSError, ValueError) as e:
            # The marker is written: the server registers it when the attempt ends.
            print("trainyard_sdk: could not register checkpoint %s now (%s); it is registered when the attempt ends" % (name, e),
                  file=sys.stderr, flush=True)
    return path
