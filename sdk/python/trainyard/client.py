"""A client of the Trainyard HTTP API (Python standard library only).

    from trainyard import Client

    c = Client()                          # server and token as the CLI finds them
    job = c.submit(file="train.yaml", set=["params.lr=0.01"])
    job = c.wait(job["id"], timeout=3600)  # until succeeded, failed or canceled
    print(c.logs(job["id"], tail=20))
    loss = c.metrics(job["id"], key="loss")["loss"]

Jobs and the other answers are the API's JSON objects as dicts (the fields
are in docs/openapi.json). Errors the server answers raise APIError.
"""

import json
import os
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request

__all__ = ["Client", "APIError", "TERMINAL_STATES", "DEFAULT_SERVER", "config_path", "read_config"]

DEFAULT_SERVER = "http://127.0.0.1:7070"
TERMINAL_STATES = ("succeeded", "failed", "canceled")


class APIError(Exception):
    """An error answer of the server: status is the HTTP status, code the
    stable error code (invalid_spec, not_found, unauthorized, ...), fields
    the invalid fields as dicts with path, message and sometimes line."""

    def __init__(self, status, code, message, fields=None):
        self.status, self.code, self.message, self.fields = status, code, message, list(fields or [])
        text = "%s (%d %s)" % (message, status, code)
        for f in self.fields:
            where = f.get("path", "")
            if f.get("line"):
                where += " (line %d)" % f["line"]
            text += "\n  %s: %s" % (where, f.get("message", ""))
        super().__init__(text)


def config_path(environ=None):
    """The CLI's config file: $XDG_CONFIG_HOME/trainyard/config.yaml, by
    default ~/.config/trainyard/config.yaml."""
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_CONFIG_HOME", "")
    if xdg and os.path.isabs(xdg):
        return os.path.join(xdg, "trainyard", "config.yaml")
    home = env.get("HOME") or os.path.expanduser("~")
    return os.path.join(home, ".config", "trainyard", "config.yaml")


def read_config(path):
    """Reads the top-level `key: value` lines of the CLI's config file (as
    `trainyard login` writes it: server, token, ca_file). A missing file is
    an empty config. This is not a YAML parser: nested or multi-line values
    are not read."""
    out = {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return out
    for line in lines:
        if not line or line[0] in " \t#-" or ":" not in line:
            continue
        key, value = line.split(":", 1)
        out[key.strip()] = _scalar(value.strip())
    return out


def _resolve_workdir(doc, directory, sets):
    """Adds "workdir=<absolute>" to sets when the spec file sets a relative
    top-level workdir (resolved against its directory) and sets does not
    set one, as the CLI's submit does. Only a JSON object or a top-level
    one-line `workdir: value` of YAML is read."""
    sets = list(sets or [])
    if any(s.split("=", 1)[0].strip() == "workdir" for s in sets):
        return sets
    wd = None
    if doc.lstrip().startswith("{"):
        try:
            wd = json.loads(doc).get("workdir")
        except (ValueError, AttributeError):
            return sets
    else:
        for line in doc.splitlines():
            if line.startswith("workdir:"):
                wd = _scalar(line.split(":", 1)[1].strip())
    if isinstance(wd, str) and wd and not os.path.isabs(wd):
        sets.append("workdir=" + os.path.normpath(os.path.join(directory, wd)))
    return sets


def _scalar(value):
    """A YAML scalar on one line: 'single' or "double" quoted, or plain
    (up to a comment)."""
    if value.startswith("'"):
        out, i = [], 1
        while i < len(value):
            if value[i] == "'":
                if value[i + 1:i + 2] != "'":
                    break
                i += 1
            out.append(value[i])
            i += 1
        return "".join(out)
    if value.startswith('"'):
        try:
            return json.JSONDecoder().raw_decode(value)[0]
        except ValueError:
            return value.strip('"')
    if value.startswith("#"):
        return ""
    return value.split(" #", 1)[0].rstrip()


class Client:
    """A Trainyard API client.

    server, token and ca_file default, like the CLI's --server, --token and
    --ca-file, to TRAINYARD_SERVER, TRAINYARD_TOKEN and TRAINYARD_CA_FILE,
    then to the CLI's config file, then (the server) to
    http://127.0.0.1:7070. timeout bounds each request, in seconds; a
    followed log waits as long as the attempt runs.
    """

    def __init__(self, server=None, token=None, ca_file=None, timeout=30.0, config=None):
        env = os.environ
        cfg = None

        def pick(given, var, key):
            nonlocal cfg
            if given:
                return given
            if env.get(var):
                return env[var]
            if cfg is None:
                cfg = read_config(config or config_path())
            return cfg.get(key, "")

        self.server = (pick(server, "TRAINYARD_SERVER", "server") or DEFAULT_SERVER).rstrip("/")
        self.token = pick(token, "TRAINYARD_TOKEN", "token")
        self.ca_file = pick(ca_file, "TRAINYARD_CA_FILE", "ca_file")
        self.timeout = timeout
        self._ssl = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else None

    def __repr__(self):
        return "Client(server=%r)" % self.server

    # ---- jobs ----

    def submit(self, spec=None, file=None, set=None, template=None, project=None, vars=None, code=None,
               idempotency_key=None):
        """Submits a job and returns it. The spec is a dict (sent as JSON),
        or the text of a spec file (YAML or JSON; errors then name its
        lines), or file, a spec file's path. set holds "key=value"
        overrides ("params.lr=0.01", "resources.gpus=2", "name=x"), applied
        after parsing. template ("name" or "name@version") with project and
        vars submits from a job template instead. idempotency_key makes a
        repeat return the job the first submit created (its "created" is
        then False)."""
        if file is not None:
            if spec is not None:
                raise ValueError("give spec or file, not both")
            with open(file, encoding="utf-8") as f:
                spec = f.read()
            set = _resolve_workdir(spec, os.path.dirname(os.path.abspath(file)), [set] if isinstance(set, str) else set)
        body = {}
        if spec is not None:
            body["spec"] = spec
        elif template is None:
            raise ValueError("give a spec, a file or a template")
        if set:
            body["set"] = [set] if isinstance(set, str) else list(set)
        if template:
            body["template"] = template
        if project:
            body["project"] = project
        if vars:
            body["vars"] = dict(vars)
        if code:
            body["code"] = code
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return self._json("POST", "/api/v1/jobs", body=body, headers=headers)

    def list(self, state=None, project=None, limit=None, sweep=None):
        """Jobs, newest first: every matching job, or the newest limit.
        state is a state or a list of them ("running", ["queued", "held"]);
        sweep keeps the members of one sweep."""
        out, cursor = [], None
        while True:
            q = {"state": ",".join([state] if isinstance(state, str) else state or []), "project": project,
                 "limit": limit - len(out) if limit else None, "cursor": cursor, "sweep": sweep}
            page = self._json("GET", "/api/v1/jobs", query=q)
            out.extend(page.get("jobs") or [])
            cursor = page.get("next_cursor")
            if not cursor or (limit and len(out) >= limit):
                return out[:limit] if limit else out

    def show(self, job_id):
        """One job, with its spec snapshot, attempts and transitions."""
        return self._json("GET", "/api/v1/jobs/%d" % int(job_id))

    get = show

    def wait(self, job_id, timeout=None, interval=1.0):
        """Polls the job until it is succeeded, failed or canceled and
        returns it; raises TimeoutError after timeout seconds (None: no
        limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.show(job_id)
            if job.get("state") in TERMINAL_STATES:
                return job
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("job %s is still %s after %gs" % (job_id, job.get("state"), timeout))
                time.sleep(min(interval, left))
            else:
                time.sleep(interval)

    def rerun(self, job_id, set=None, env=None, resume=False, from_checkpoint=None, idempotency_key=None):
        """Submits job_id's config snapshot again, with set overrides and
        env; resume starts it from the original's latest complete
        checkpoint (from_checkpoint: a named one). Returns the new job."""
        body = {"set": [set] if isinstance(set, str) else list(set or []), "env": env,
                "resume": bool(resume), "from_checkpoint": from_checkpoint}
        body = {k: v for k, v in body.items() if v}
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return self._json("POST", "/api/v1/jobs/%d/rerun" % int(job_id), body=body or None, headers=headers)

    def set_priority(self, job_id, priority):
        """Changes a waiting (queued or held) job's priority class, within
        its project's ceiling, and returns the job."""
        return self._json("POST", "/api/v1/jobs/%d/priority" % int(job_id), body={"priority": priority})

    def compare(self, *job_ids):
        """2 to 20 jobs side by side: the spec fields that differ, each
        job's params, env, code, run time, cost and metric summaries."""
        ids = [int(i) for i in (job_ids[0] if len(job_ids) == 1 and not isinstance(job_ids[0], int) else job_ids)]
        return self._json("GET", "/api/v1/compare", query={"jobs": ",".join(str(i) for i in ids)})

    # ---- sweeps and job arrays ----

    def submit_sweep(self, spec=None, file=None, set=None, array=None, code=None, idempotency_key=None):
        """Submits a sweep (a spec with a sweep: section) or, with array
        ("0-31", "0-31%4"), a job array of any spec. Returns the sweep,
        its members' ids under "jobs". idempotency_key makes a repeat
        return the sweep the first submit created (its "created" is then
        False)."""
        if file is not None:
            if spec is not None:
                raise ValueError("give spec or file, not both")
            with open(file, encoding="utf-8") as f:
                spec = f.read()
            set = _resolve_workdir(spec, os.path.dirname(os.path.abspath(file)), [set] if isinstance(set, str) else set)
        if spec is None:
            raise ValueError("give a spec or a file")
        body = {"spec": spec}
        if set:
            body["set"] = [set] if isinstance(set, str) else list(set)
        if array:
            body["array"] = array
        if code:
            body["code"] = code
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return self._json("POST", "/api/v1/sweeps", body=body, headers=headers)

    def sweep(self, sweep_id):
        """One sweep: its members counted by state ("counts"), its
        "state" and its "best" member by its objective."""
        return self._json("GET", "/api/v1/sweeps/%d" % int(sweep_id))

    def sweeps(self, project=None, limit=None):
        """Sweeps, newest first."""
        return self._json("GET", "/api/v1/sweeps", query={"project": project, "limit": limit}).get("sweeps") or []

    def wait_sweep(self, sweep_id, timeout=None, interval=1.0):
        """Polls the sweep until every member ended and returns it;
        raises TimeoutError after timeout seconds (None: no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            sw = self.sweep(sweep_id)
            if sw.get("state") in TERMINAL_STATES:
                return sw
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("sweep %s is still %s after %gs" % (sweep_id, sw.get("state"), timeout))
            time.sleep(interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic())))

    def cancel_sweep(self, sweep_id, reason=None):
        """Cancels every member of the sweep that has not ended."""
        body = {"reason": reason} if reason else None
        return self._json("POST", "/api/v1/sweeps/%d/cancel" % int(sweep_id), body=body)

    def cancel(self, job_id, reason=None):
        """Cancels a job and returns it."""
        body = {"reason": reason} if reason else None
        return self._json("POST", "/api/v1/jobs/%d/cancel" % int(job_id), body=body)

    def why(self, job_id):
        """Why the job is pending or failed: reason, evidence, hint."""
        return self._json("GET", "/api/v1/jobs/%d/why" % int(job_id))

    def logs(self, job_id, attempt=None, tail=None, grep=None, since=None, timestamps=False):
        """An attempt's log (default: the latest attempt) as it is now."""
        return "".join(self._log_lines(job_id, attempt, tail, grep, since, timestamps, follow=False))

    def follow_logs(self, job_id, attempt=None, tail=None, grep=None, since=None, timestamps=False):
        """Yields an attempt's log lines as they are written, until the
        attempt ends. Lines keep their newline."""
        return self._log_lines(job_id, attempt, tail, grep, since, timestamps, follow=True)

    def _log_lines(self, job_id, attempt, tail, grep, since, timestamps, follow):
        q = {"attempt": attempt, "tail": tail, "grep": grep, "since": since,
             "timestamps": "true" if timestamps else None, "follow": "true" if follow else None}
        resp = self._open("GET", "/api/v1/jobs/%d/logs" % int(job_id), query=q, timeout=None if follow else self.timeout)
        with resp:
            for line in resp:
                yield line.decode("utf-8", errors="replace")

    def metrics(self, job_id, key=None, max_points=None):
        """The job's metric series: {"loss": [{"step", "value", "at",
        "attempt"}, ...], ...}, each downsampled to about max_points."""
        q = {"key": key, "max": max_points}
        return self._json("GET", "/api/v1/jobs/%d/metrics" % int(job_id), query=q).get("series") or {}

    # ---- other reads ----

    def whoami(self):
        return self._json("GET", "/api/v1/whoami")

    def version(self):
        return self._json("GET", "/api/v1/version")

    def request(self, method, path, body=None, query=None):
        """Any other endpoint (docs/openapi.json): the decoded JSON answer,
        or None for an empty one."""
        return self._json(method, path, body=body, query=query)

    # ---- transport ----

    def _json(self, method, path, body=None, query=None, headers=None):
        with self._open(method, path, body=body, query=query, headers=headers) as resp:
            data = resp.read()
        return json.loads(data) if data else None

    def _open(self, method, path, body=None, query=None, headers=None, timeout=0):
        url = self.server + path
        if query:
            q = {k: v for k, v in query.items() if v is not None and v != ""}
            if q:
                url += "?" + urllib.parse.urlencode(q)
        h = {"Accept": "application/json", "User-Agent": "trainyard-python"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        req = urllib.request.Request(url, data=data, method=method, headers=h)
        try:
            return urllib.request.urlopen(req, timeout=self.timeout if timeout == 0 else timeout, context=self._ssl)
        except urllib.error.HTTPError as e:
            raw = e.read()
            e.close()
            try:
                err = json.loads(raw)["error"]
            except (ValueError, KeyError, TypeError):
                raise APIError(e.code, "http_%d" % e.code, raw.decode(errors="replace").strip() or e.reason) from None
            raise APIError(e.code, err.get("code", ""), err.get("message", ""), err.get("fields")) from None
