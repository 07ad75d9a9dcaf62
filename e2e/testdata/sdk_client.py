"""Drives the pip-installed trainyard package against a real server (run
by e2e/TestPythonSDKPackage). Prints OK at the end; any failure raises."""

import os
import sys
import time

import trainyard
from trainyard import APIError, Client

MARKER = sys.argv[1]  # a path the streaming job waits for
CLI_CONFIG = sys.argv[2]  # the config file the server wrote for the CLI
SMOKE = sys.argv[3]  # examples/smoke.yaml

# Not the source tree: the installed package.
assert "site-packages" in trainyard.__file__, trainyard.__file__

c = Client()  # TRAINYARD_SERVER and TRAINYARD_TOKEN, as the CLI
assert c.whoami()["roles"], "whoami has no roles"

# Submit spec text with a --set override; stdout progress lines become metrics.
trainer = """name: placeholder
entrypoint:
  - python3
  - -c
  - |
    for step in range(5):
        print('trainyard: {"step": %d, "loss": %g}' % (step, 1.0 / (step + 1)), flush=True)
    print("trained", flush=True)
"""
job = c.submit(trainer, set=["name=sdk-trainer"])
assert job["name"] == "sdk-trainer" and job["created"] is True, job
done = c.wait(job["id"], timeout=60, interval=0.2)
assert done["state"] == "succeeded", done
log = c.logs(job["id"])
assert "trained\n" in log, log
assert c.logs(job["id"], tail=1) == "trained\n", c.logs(job["id"], tail=1)
loss = c.metrics(job["id"], key="loss")["loss"]
assert [p["step"] for p in loss] == [0, 1, 2, 3, 4], loss
assert abs(loss[1]["value"] - 0.5) < 1e-9, loss

# A spec file (its relative workdir resolved as the CLI does), with an
# idempotency key: the repeat is the same job.
a = c.submit(file=SMOKE, set="name=smoke-sdk", idempotency_key="sdk-e2e-1")
b = c.submit(file=SMOKE, set="name=smoke-sdk", idempotency_key="sdk-e2e-1")
assert a["id"] == b["id"] and a["created"] is True and b["created"] is False, (a, b)
smoke = c.wait(a["id"], timeout=120, interval=0.2)
assert smoke["state"] == "succeeded" and smoke["name"] == "smoke-sdk", (smoke, c.logs(a["id"]))
smoke_loss = c.metrics(a["id"])["loss"]
assert len(smoke_loss) >= 4 and smoke_loss[-1]["value"] < smoke_loss[0]["value"], smoke_loss

# follow_logs streams: the job prints "first", then waits for MARKER, which
# is created only after "first" arrived here; without streaming this hangs
# until the job gives up and prints "gave up".
streamer = c.submit({"name": "streamer", "entrypoint": ["python3", "-c", """
import os, sys, time
print("first", flush=True)
deadline = time.time() + 60
while not os.path.exists(%r):
    if time.time() > deadline:
        print("gave up", flush=True)
        sys.exit(1)
    time.sleep(0.05)
print("second", flush=True)
""" % MARKER]})
lines = []
for line in c.follow_logs(streamer["id"]):
    lines.append(line)
    if line == "first\n":
        open(MARKER, "w").close()
assert lines == ["first\n", "second\n"], lines
assert c.wait(streamer["id"], timeout=30, interval=0.2)["state"] == "succeeded"

# wait's timeout, then cancel.
sleeper = c.submit({"name": "sleeper", "entrypoint": ["sleep", "120"]})
t0 = time.monotonic()
try:
    c.wait(sleeper["id"], timeout=0.5, interval=0.1)
    raise AssertionError("wait returned for a sleeping job")
except TimeoutError:
    pass
assert time.monotonic() - t0 < 10
c.cancel(sleeper["id"], reason="sdk test")
assert c.wait(sleeper["id"], timeout=60, interval=0.2)["state"] == "canceled"

# list: filters and limit (which pages through cursors).
ids = [j["id"] for j in c.list(state="succeeded")]
assert job["id"] in ids and sleeper["id"] not in ids, ids
assert [j["id"] for j in c.list(state=["canceled"])] == [sleeper["id"]]
assert len(c.list(limit=2)) == 2 and len(c.list()) == 4

# A job array: its members, the sweep's end, two runs compared, a
# dependent job and a priority change.
sw = c.submit_sweep({"name": "arr", "entrypoint": ["sh", "-c", 'echo "trainyard: {\\"step\\": 1, \\"loss\\": $TRAINYARD_ARRAY_INDEX}"'],
                     "params": {"lr": "0.1"}}, array="0-2%2", idempotency_key="arr-1")
assert sw["members"] == 3 and len(sw["jobs"]) == 3 and sw["max_parallel"] == 2 and sw["created"], sw
again = c.submit_sweep({"name": "arr", "entrypoint": ["true"]}, array="0-2%2", idempotency_key="arr-1")
assert again["id"] == sw["id"] and again["jobs"] == sw["jobs"] and not again["created"], again
done = c.wait_sweep(sw["id"], timeout=120, interval=0.2)
assert done["state"] == "succeeded" and done["counts"] == {"succeeded": 3}, done
assert sorted(j["id"] for j in c.list(sweep=sw["id"])) == sw["jobs"]
assert any(s["id"] == sw["id"] for s in c.sweeps())
cmp = c.compare(sw["jobs"][0], sw["jobs"][2])
assert [d["path"] for d in cmp["differences"]] == ["labels.trainyard.array_index"], cmp["differences"]
held = c.submit({"name": "after-array", "entrypoint": ["true"], "after": [{"sweep": sw["id"], "on": "ended"}]})
assert c.wait(held["id"], timeout=60, interval=0.2)["state"] == "succeeded"
long = c.submit({"name": "long", "entrypoint": ["sleep", "120"]})
waiter = c.submit({"name": "waiter", "entrypoint": ["true"], "after": [{"job": long["id"], "on": "succeeded"}]})
assert c.set_priority(waiter["id"], "low")["priority"] == "low"
c.cancel(long["id"])
assert c.wait(waiter["id"], timeout=60, interval=0.2)["reason"] == "DependencyFailed"

# Errors: the server's code, message and fields.
try:
    c.show(999999)
    raise AssertionError("show of a missing job succeeded")
except APIError as e:
    assert e.status == 404 and e.code == "not_found", e
try:
    c.submit("name: bad\nentrypoint: []\nresources: {gpus: -1}\n")
    raise AssertionError("a bad spec was accepted")
except APIError as e:
    assert e.status == 400 and e.code == "invalid_spec" and e.fields, e
    assert any(f["path"] == "resources.gpus" for f in e.fields), e.fields

# The CLI's config file, when the environment names no server or token:
# the one the server wrote, then one at the default place.
server, token = os.environ.pop("TRAINYARD_SERVER"), os.environ.pop("TRAINYARD_TOKEN")
assert Client(config=CLI_CONFIG).token == token
assert Client(config=CLI_CONFIG).whoami()["user"] == "admin"
cfg = os.path.join(os.environ["XDG_CONFIG_HOME"], "trainyard", "config.yaml")
os.makedirs(os.path.dirname(cfg))
with open(cfg, "w") as f:
    f.write("# Trainyard client configuration\nserver: \"%s\"\ntoken: '%s' # admin\n" % (server, token))
assert Client().version()["version"], "version through the config file"
try:
    Client(token="wrong").whoami()
    raise AssertionError("a wrong token was accepted")
except APIError as e:
    assert e.status == 401 and e.code == "unauthorized", e

print("OK")
