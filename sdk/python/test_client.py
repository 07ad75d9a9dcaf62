"""Offline tests of trainyard.client; e2e/TestPythonSDKPackage runs the
client against a real server."""

import os
import tempfile
import unittest
from unittest import mock

from trainyard.client import APIError, Client, config_path, read_config


class Config(unittest.TestCase):
    def test_reads_the_cli_config_file(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "config.yaml")
            with open(path, "w") as f:
                f.write("# Trainyard client configuration\n"
                        "server: http://h:7070/x#frag\n"
                        "token: 'ty_it''s' # admin\n"
                        'ca_file: "/etc/ca\\u0031.pem"\n'
                        "nested:\n  key: ignored\n")
            self.assertEqual(read_config(path), {"server": "http://h:7070/x#frag", "token": "ty_it's",
                                                 "ca_file": "/etc/ca1.pem", "nested": ""})
            self.assertEqual(read_config(os.path.join(d, "missing.yaml")), {})

    def test_precedence_argument_environment_file_default(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "config.yaml")
            with open(path, "w") as f:
                f.write("server: http://file:1/\ntoken: file-token\n")
            with mock.patch.dict(os.environ, {"TRAINYARD_SERVER": "", "TRAINYARD_TOKEN": "env-token", "TRAINYARD_CA_FILE": ""}):
                c = Client(config=path)
                self.assertEqual((c.server, c.token), ("http://file:1", "env-token"))
                c = Client(server="http://arg:2", token="arg-token", config=path)
                self.assertEqual((c.server, c.token), ("http://arg:2", "arg-token"))
                c = Client(config=os.path.join(d, "none.yaml"))
                self.assertEqual(c.server, "http://127.0.0.1:7070")

    def test_config_path_follows_xdg(self):
        self.assertEqual(config_path({"XDG_CONFIG_HOME": "/x", "HOME": "/h"}), "/x/trainyard/config.yaml")
        self.assertEqual(config_path({"XDG_CONFIG_HOME": "rel", "HOME": "/h"}), "/h/.config/trainyard/config.yaml")


class Workdir(unittest.TestCase):
    def test_relative_workdir_resolves_against_the_file(self):
        from trainyard.client import _resolve_workdir
        self.assertEqual(_resolve_workdir("name: x\nworkdir: .  # here\n", "/specs", ["name=y"]), ["name=y", "workdir=/specs"])
        self.assertEqual(_resolve_workdir('{"workdir": "sub"}', "/specs", None), ["workdir=/specs/sub"])
        self.assertEqual(_resolve_workdir("workdir: /abs\n", "/specs", None), [])
        self.assertEqual(_resolve_workdir("workdir: .\n", "/specs", ["workdir=/mine"]), ["workdir=/mine"])
        self.assertEqual(_resolve_workdir("params:\n  workdir: x\n", "/specs", None), [])


class Errors(unittest.TestCase):
    def test_message_names_fields(self):
        e = APIError(400, "invalid_spec", "the job spec has 1 problem(s)", [{"path": "resources.gpus", "line": 4, "message": "must be 0 or more"}])
        self.assertEqual(str(e), "the job spec has 1 problem(s) (400 invalid_spec)\n  resources.gpus (line 4): must be 0 or more")

    def test_submit_needs_something(self):
        with self.assertRaises(ValueError):
            Client(server="http://127.0.0.1:9", token="t").submit()


if __name__ == "__main__":
    unittest.main()
