"""Tests of trainyard_sdk. The reporting tests need a real server: the Go
test e2e/TestPythonSDK starts one and sets TRAINYARD_SDK_TEST_API,
TRAINYARD_SDK_TEST_TOKEN (an admin token), TRAINYARD_SDK_TEST_JOB and
TRAINYARD_SDK_TEST_ATTEMPT; without them those tests are skipped."""

import io
import json
import os
import tempfile
import time
import unittest
import urllib.request
import zipfile
from unittest import mock

import trainyard.job
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


class SaveCheckpoint(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = os.path.join(tmp.name, "ckpt")
        env = mock.patch.dict(os.environ, {"TRAINYARD_CHECKPOINT_DIR": self.dir})
        env.start()
        self.addCleanup(env.stop)

    def listing(self, sub=""):
        return sorted(os.listdir(os.path.join(self.dir, sub)))

    def test_file_from_a_writer_bytes_or_a_path(self):
        path = ty.save_checkpoint("step-1.bin", lambda f: f.write(b"weights"))
        self.assertEqual(path, os.path.join(self.dir, "step-1.bin"))
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"weights")
        self.assertEqual(os.path.getsize(path + ".complete"), 0)
        ty.save_checkpoint("step-2.json", b'{"step": 2}')

        def by_path(p):
            self.assertTrue(os.path.basename(p).startswith(".tmp-") and p.endswith(".npy"), p)
            self.assertFalse(os.path.exists(p), "the path is for the writer to create")
            with open(p, "wb") as f:
                f.write(b"array")
        ty.save_checkpoint("step-3.npy", by_path, path=True)
        self.assertEqual(self.listing(), ["step-1.bin", "step-1.bin.complete", "step-2.json", "step-2.json.complete",
                                          "step-3.npy", "step-3.npy.complete"])

    def test_a_torch_save_style_zip_to_the_file_object(self):
        def save(f):  # what torch.save(state, f) does: a zip archive, central directory last
            with zipfile.ZipFile(f, "w") as z:
                z.writestr("archive/data.pkl", b"state")
                z.writestr("archive/version", b"3")
        path = ty.save_checkpoint("step-100.pt", save)
        self.assertTrue(zipfile.is_zipfile(path))
        self.assertTrue(os.path.isfile(path + ".complete"))

    def test_a_write_that_raises_leaves_nothing(self):
        ty.save_checkpoint("last.pt", b"version 1")
        for form in ({}, {"path": True}):
            def partial(target):
                if isinstance(target, str):
                    with open(target, "wb") as f:
                        f.write(b"half of version 2")
                else:
                    target.write(b"half of version 2")
                    target.flush()
                raise KeyboardInterrupt  # not only Exception: also a signal's
            with self.assertRaises(KeyboardInterrupt):
                ty.save_checkpoint("last.pt", partial, **form)
            with self.assertRaises(KeyboardInterrupt):
                ty.save_checkpoint("new.pt", partial, **form)
            self.assertEqual(self.listing(), ["last.pt", "last.pt.complete"])
            with open(os.path.join(self.dir, "last.pt"), "rb") as f:
                self.assertEqual(f.read(), b"version 1")
        with self.assertRaises(ValueError):  # a path writer that wrote nothing there
            ty.save_checkpoint("none.pt", lambda p: None, path=True)
        self.assertEqual(self.listing(), ["last.pt", "last.pt.complete"])

    def test_the_marker_comes_after_the_data_is_durable(self):
        events = []
        real_replace, real_fsync, real_marker = os.replace, os.fsync, trainyard.job._write_marker

        def replace(src, dst):
            events.append(("rename", os.path.basename(src).startswith(".tmp-"), os.path.basename(dst)))
            self.assertFalse(os.path.exists(os.path.join(self.dir, "s.pt.complete")))
            real_replace(src, dst)

        def fsync(fd):
            where = os.readlink("/proc/self/fd/%d" % fd) if os.path.isdir("/proc/self/fd") else "?"
            events.append(("fsync", os.path.basename(where)))
            real_fsync(fd)

        def marker(path):
            with open(os.path.join(self.dir, "s.pt"), "rb") as f:
                self.assertEqual(f.read(), b"x" * 100000, "the marker must follow the whole data")
            events.append(("marker", os.path.basename(path)))
            real_marker(path)

        with mock.patch("os.replace", replace), mock.patch("os.fsync", fsync), \
                mock.patch.object(trainyard.job, "_write_marker", marker):
            ty.save_checkpoint("s.pt", lambda f: f.write(b"x" * 100000))
        kinds = [e[0] for e in events]
        self.assertEqual(kinds, ["fsync", "rename", "fsync", "marker", "fsync", "fsync"], events)
        self.assertEqual(events[1], ("rename", True, "s.pt"))
        if os.path.isdir("/proc/self/fd"):
            self.assertTrue(events[0][1].startswith(".tmp-"), events)  # the data, under its temporary name
            self.assertEqual([e[1] for e in events if e[0] == "fsync"][1:], ["ckpt", "s.pt.complete", "ckpt"])

    def test_saving_again_is_a_new_version_completed_now(self):
        path = ty.save_checkpoint("last.pt", b"1")
        past = time.time() - 3600
        os.utime(path + ".complete", (past, past))
        ty.save_checkpoint("last.pt", b"2")
        with open(path, "rb") as f:
            self.assertEqual(f.read(), b"2")
        self.assertGreater(os.path.getmtime(path + ".complete"), past + 60)

    def test_directory(self):
        def write(p):
            self.assertEqual(os.listdir(p), [])
            self.assertTrue(os.path.basename(p).startswith(".tmp-"))
            os.makedirs(os.path.join(p, "shards"))
            for rel in ("config.json", "shards/0.bin"):
                with open(os.path.join(p, rel), "w") as f:
                    f.write(rel)
        path = ty.save_checkpoint("step-10", write, directory=True)
        self.assertEqual(path, os.path.join(self.dir, "step-10"))
        self.assertEqual(self.listing(), ["step-10"])
        self.assertEqual(self.listing("step-10"), [".complete", "config.json", "shards"])

        def fail(p):
            with open(os.path.join(p, "half.bin"), "w") as f:
                f.write("half")
            raise RuntimeError("disk full")
        with self.assertRaises(RuntimeError):
            ty.save_checkpoint("step-10", fail, directory=True)
        self.assertEqual(self.listing(), ["step-10"])
        self.assertEqual(self.listing("step-10"), [".complete", "config.json", "shards"])

        def again(p):  # a new version replaces the old one whole
            with open(os.path.join(p, "model.bin"), "w") as f:
                f.write("v2")
        ty.save_checkpoint("step-10", again, directory=True)
        self.assertEqual(self.listing(), ["step-10"])
        self.assertEqual(self.listing("step-10"), [".complete", "model.bin"])

        with self.assertRaises(ValueError):  # a file where a directory goes, and the other way round
            ty.save_checkpoint("step-10", b"x")
        ty.save_checkpoint("f.pt", b"x")
        with self.assertRaises(ValueError):
            ty.save_checkpoint("f.pt", again, directory=True)

    def test_rejects_bad_names(self):
        called = []
        for bad in ["", ".", "..", "a/b", "../x", "/abs", ".hidden", ".tmp-x", "x.tmp", "x.pt.complete", ".complete"]:
            with self.assertRaises(ValueError, msg=bad):
                ty.save_checkpoint(bad, called.append)
        self.assertEqual(called, [])
        with self.assertRaises(TypeError):
            ty.save_checkpoint("x.pt", "not bytes")
        self.assertFalse(os.path.exists(self.dir) and self.listing())

    def test_never_writes_a_marker_through_a_link(self):
        os.makedirs(self.dir)
        precious = os.path.join(os.path.dirname(self.dir), "precious")
        with open(precious, "w") as f:
            f.write("keep")
        os.symlink(precious, os.path.join(self.dir, "x.pt.complete"))
        with self.assertRaises(OSError):
            ty.save_checkpoint("x.pt", b"data")
        os.makedirs(os.path.join(self.dir, "d"))
        os.symlink(precious, os.path.join(self.dir, "d", ".complete"))
        with self.assertRaises(OSError):
            ty.checkpoint_done("d")
        with open(precious) as f:
            self.assertEqual(f.read(), "keep")


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
