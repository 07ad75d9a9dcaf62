"""The in-job side of the SDK: helpers for training scripts (Python standard
library only). They are also importable as trainyard.report etc., and as the
older module trainyard_sdk.

    import trainyard as ty

    start = ty.resume_from()            # latest checkpoint path, or None
    ckpt = ty.checkpoint_dir()          # where to write checkpoints
    for step in range(...):
        ...
        ty.report(step, loss=loss, lr=lr)
        # write a checkpoint directory, then mark it complete:
        ty.checkpoint_done("step-%d" % step)

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
import sys
import threading
import urllib.error
import urllib.request

__all__ = ["Reporter", "report", "flush", "checkpoint_dir", "resume_from", "checkpoint_done"]

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
    """The latest checkpoint to resume from (TRAINYARD_RESUME_FROM), or None
    on a fresh start."""
    return os.environ.get("TRAINYARD_RESUME_FROM") or None


MARKER = ".complete"


def checkpoint_done(name):
    """Mark the checkpoint directory checkpoint_dir()/name complete: write
    its marker file and, with an API configured, register it with the
    server at once. Only a complete checkpoint is handed to the next attempt
    as TRAINYARD_RESUME_FROM. Returns the checkpoint's path; raises
    ValueError when there is no such directory."""
    if not name or os.path.basename(name) != name or name.startswith(".") or name.endswith(".tmp"):
        raise ValueError("checkpoint name %r: give a directory name directly under the checkpoint dir" % (name,))
    path = os.path.join(checkpoint_dir(), name)
    if not os.path.isdir(path):
        raise ValueError("checkpoint %r: no directory %s; write the checkpoint first" % (name, path))
    with open(os.path.join(path, MARKER), "w"):
        pass
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
