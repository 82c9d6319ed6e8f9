"""A PEP 517 build backend for the cellvm client, standard library only.

It exists so that ``pip install ./clients/python`` works offline on any
machine: a backend such as setuptools would have to be downloaded (build
isolation) or be installed already, with its ``wheel`` companion. The
package is pure Python, so its wheel is a zip of the ``cellvm`` directory
and three metadata files, which this module writes. It also builds an
sdist and an editable install (a .pth file naming the source directory).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

NAME = "cellvm"
SUMMARY = "Client of the cellvm daemon: run model-written Python in KVM microVMs"
REQUIRES_PYTHON = ">=3.9"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(HERE, NAME)


def _version() -> str:
    with open(os.path.join(PACKAGE, "__init__.py"), encoding="utf-8") as f:
        m = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M)
    if not m:
        raise RuntimeError("cellvm/__init__.py has no __version__")
    return m.group(1)


def _metadata() -> bytes:
    readme = ""
    path = os.path.join(HERE, "README.md")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            readme = f.read()
    head = (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {_version()}\nSummary: {SUMMARY}\n"
            f"Requires-Python: {REQUIRES_PYTHON}\nDescription-Content-Type: text/markdown\n\n")
    return (head + readme).encode("utf-8")


def _files():
    """The package's files, relative to HERE, in a stable order."""
    out = []
    for root, dirs, files in os.walk(PACKAGE):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith((".pyc", ".pyo")):
                continue
            out.append(os.path.relpath(os.path.join(root, f), HERE))
    return out


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def _wheel(wheel_directory: str, entries) -> str:
    """Writes a wheel of (archive name, bytes) entries plus dist-info."""
    version = _version()
    dist_info = f"{NAME}-{version}.dist-info"
    name = f"{NAME}-{version}-py3-none-any.whl"
    entries = list(entries) + [
        (f"{dist_info}/METADATA", _metadata()),
        (f"{dist_info}/WHEEL", b"Wheel-Version: 1.0\nGenerator: cellvm_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"),
        (f"{dist_info}/top_level.txt", f"{NAME}\n".encode()),
    ]
    record = [f"{arc},{_digest(data)},{len(data)}" for arc, data in entries] + [f"{dist_info}/RECORD,,"]
    entries.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in entries:
            info = zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return name


def _read(rel: str) -> bytes:
    with open(os.path.join(HERE, rel), "rb") as f:
        return f.read()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, [(rel.replace(os.sep, "/"), _read(rel)) for rel in _files()])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, [(f"_{NAME}_editable.pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{_version()}"
    name = base + ".tar.gz"
    rels = _files() + ["pyproject.toml", os.path.join("build_backend", "cellvm_build.py")]
    if os.path.exists(os.path.join(HERE, "README.md")):
        rels.append("README.md")
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for rel in rels:
            data = _read(rel)
            info = tarfile.TarInfo(f"{base}/{rel}")
            info.size, info.mode, info.mtime = len(data), 0o644, 1577836800
            tar.addfile(info, io.BytesIO(data))
        pkg_info = _metadata()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size, info.mode, info.mtime = len(pkg_info), 0o644, 1577836800
        tar.addfile(info, io.BytesIO(pkg_info))
    return name
