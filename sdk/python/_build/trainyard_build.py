"""A PEP 517 build backend for the Trainyard SDK, standard library only, so
that installing the SDK needs no network and no setuptools (a Python 3.12+
venv has none). It builds a pure-Python wheel of the trainyard package and
the trainyard_sdk module, an sdist, and (PEP 660) an editable wheel.

Name and version come from pyproject.toml's [project] table."""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULES = ["trainyard_sdk.py"]
PACKAGE = "trainyard"
SDIST_FILES = ["pyproject.toml", "_build/trainyard_build.py", "trainyard_sdk.py", "test_trainyard_sdk.py", "test_client.py"]


def _project():
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    table = text.split("[project]", 1)[1].split("\n[", 1)[0]
    fields = dict(re.findall(r'^(\w[\w-]*)\s*=\s*"([^"]*)"', table, re.M))
    return fields["name"], fields["version"], fields.get("description", ""), fields.get("requires-python", "")


def _sources():
    files = list(MODULES)
    for name in sorted(os.listdir(os.path.join(ROOT, PACKAGE))):
        if name.endswith(".py"):
            files.append(PACKAGE + "/" + name)
    return files


def _metadata():
    name, version, summary, requires = _project()
    meta = "Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\n" % (name, version, summary)
    if requires:
        meta += "Requires-Python: %s\n" % requires
    return name, version, meta


def _dist_info(name, version):
    return "%s-%s.dist-info" % (name, version)


def _write_wheel(wheel_directory, entries):
    name, version, meta = _metadata()
    di = _dist_info(name, version)
    entries = list(entries) + [
        (di + "/METADATA", meta.encode()),
        (di + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: trainyard_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
    ]
    record = []
    filename = "%s-%s-py3-none-any.whl" % (name, version)
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in entries:
            zf.writestr(zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0)), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append("%s,sha256=%s,%d" % (path, digest, len(data)))
        record.append(di + "/RECORD,,")
        zf.writestr(zipfile.ZipInfo(di + "/RECORD", date_time=(2020, 1, 1, 0, 0, 0)), "\n".join(record) + "\n")
    return filename


def _read(rel):
    with open(os.path.join(ROOT, rel), "rb") as f:
        return f.read()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    name, version, meta = _metadata()
    di = os.path.join(metadata_directory, _dist_info(name, version))
    os.makedirs(di, exist_ok=True)
    with open(os.path.join(di, "METADATA"), "w", encoding="utf-8") as f:
        f.write(meta)
    return _dist_info(name, version)


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [(p, _read(p)) for p in _sources()])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [("trainyard.pth", (ROOT + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    name, version, meta = _metadata()
    base = "%s-%s" % (name, version)
    filename = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for rel in SDIST_FILES + [p for p in _sources() if p not in SDIST_FILES] + ["PKG-INFO"]:
            data = meta.encode() if rel == "PKG-INFO" else _read(rel)
            info = tarfile.TarInfo(base + "/" + rel)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tf.addfile(info, io.BytesIO(data))
    return filename
