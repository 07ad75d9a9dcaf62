"""Tests of trainyard_sdk. The reporting tests need a real server: the Go
test e2e/TestPythonSDK starts one and sets TRAINYARD_SDK_TEST_API,
TRAINYARD_SDK_TEST_TOKEN (an admin token), TRAINYARD_SDK_TEST_JOB and
TRAINYARD_SDK_TEST_ATTEMPT; without them those tests are skipped."""

import io
import json
import os
import tempfile
import unittest
import urllib.request
from unittest import mock

import trainyard_sdk as ty

API = os.environ.get("TRAINYARD_SDK_TEST_API", "")
TOKEN = os.environ.get("TRAINYARD_SDK_TEST_TOKEN", "")
JOB = os.environ.get("TRAINYARD_SDK_TEST_JOB", "")
ATTEMPT = os.environ.get("TRAINYARD_SDK_TEST_ATTEMPT", "")


def series(key):
    req = urllib.request.Request("%s/api/v1/jobs/%s/metrics?key=%s&max=100000" % (API, JOB, key),
                                 headers={"Authorization": "Bearer " + TOKEN})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)["series"].get(key, [])


class Fallback(unittest.TestCase):
    def test_prints_progress_lines_without_api(self):
        out = io.StringIO()
        r = ty.Reporter(api="", out=out)
        self.assertFalse(r.enabled)
        r.report(5, loss=0.5, acc=1)
        self.assertEqual(out.getvalue(), 'trainyard: {"step": 5, "loss": 0.5, "acc": 1.0}\n')

    def test_failed_send_falls_back_to_lines(self):
        out = io.StringIO()
        r = ty.Reporter(api="http://127.0.0.1:9", token="t", job_id=1, attempt=1, out=out)
        with mock.patch("sys.stderr", new=io.StringIO()) as err:
            r.report(1, loss=2.0)
            r.close()
        self.assertIn('trainyard: {"step": 1, "loss": 2.0}', out.getvalue())
        self.assertIn("cannot report metrics", err.getvalue())

    def test_rejects_bad_input(self):
        r = ty.Reporter(api="", out=io.StringIO())
        with self.assertRaises(TypeError):
            r.report(1, loss="high")
        with self.assertRaises(ValueError):
            r.report(-1, loss=1.0)


class Checkpoints(unittest.TestCase):
    def test_dirs_from_environment(self):
        with tempfile.TemporaryDirectory() as d:
            target = os.path.join(d, "ckpt")
            with mock.patch.dict(os.environ, {"TRAINYARD_CHECKPOINT_DIR": target, "TRAINYARD_RESUME_FROM": ""}):
                self.assertEqual(ty.checkpoint_dir(), target)
                self.assertTrue(os.path.isdir(target))
                self.assertIsNone(ty.resume_from())
            with mock.patch.dict(os.environ, {"TRAINYARD_RESUME_FROM": target + "/step-20.json"}):
                self.assertEqual(ty.resume_from(), target + "/step-20.json")


class CheckpointDone(unittest.TestCase):
    def test_writes_the_marker_and_registers(self):
        with tempfile.TemporaryDirectory() as d:
            env = {"TRAINYARD_CHECKPOINT_DIR": d, "TRAINYARD_API": "http://127.0.0.1:9", "TRAINYARD_JOB_TOKEN": "tok",
                   "TRAINYARD_JOB_ID": "42", "TRAINYARD_ATTEMPT": "2"}
            os.makedirs(os.path.join(d, "step-10"))
            sent = []

            class Resp(io.BytesIO):
                def __enter__(self):
                    return self

                def __exit__(self, *a):
                    return False

            def fake_urlopen(req, timeout=None):
                sent.append((req.full_url, req.data, req.get_header("Authorization")))
                return Resp(b"{}")

            with mock.patch.dict(os.environ, env), mock.patch.object(urllib.request, "urlopen", fake_urlopen):
                path = ty.checkpoint_done("step-10")
            self.assertEqual(path, os.path.join(d, "step-10"))
            self.assertTrue(os.path.isfile(os.path.join(d, "step-10", ".complete")))
            self.assertEqual(sent, [("http://127.0.0.1:9/api/v1/jobs/42/attempts/2/checkpoints", b'{"name": "step-10"}', "Bearer tok")])

    def test_rejects_bad_names_and_missing_dirs(self):
        with tempfile.TemporaryDirectory() as d:
            with mock.patch.dict(os.environ, {"TRAINYARD_CHECKPOINT_DIR": d, "TRAINYARD_API": ""}):
                for bad in ["", "a/b", ".hidden", "x.tmp", "missing"]:
                    with self.assertRaises(ValueError):
                        ty.checkpoint_done(bad)


@unittest.skipUnless(API and TOKEN and JOB and ATTEMPT, "needs a server (run through go test ./e2e -run TestPythonSDK)")
class AgainstServer(unittest.TestCase):
    def reporter(self, **kw):
        return ty.Reporter(api=API, token=TOKEN, job_id=JOB, attempt=ATTEMPT, out=io.StringIO(), **kw)

    def test_batches_reach_the_server(self):
        r = self.reporter(batch_size=10, interval=60)
        for step in range(25):
            r.report(step, sdk_loss=1.0 / (step + 1))
        # Two full batches are sent at once; the rest waits for close.
        got = series("sdk_loss")
        self.assertEqual(len(got), 20)
        r.close()
        got = series("sdk_loss")
        self.assertEqual([p["step"] for p in got], list(range(25)))
        self.assertAlmostEqual(got[3]["value"], 0.25)
        self.assertEqual(r.out.getvalue(), "", "nothing should fall back to stdout")

    def test_interval_flushes_without_a_full_batch(self):
        r = self.reporter(batch_size=1000, interval=0.05)
        r.report(7, sdk_timer=3.5)
        deadline = 200
        while deadline and not series("sdk_timer"):
            deadline -= 1
            r._wake.wait(0.05)
        r.close()
        self.assertEqual([(p["step"], p["value"]) for p in series("sdk_timer")], [(7, 3.5)])


if __name__ == "__main__":
    unittest.main()
