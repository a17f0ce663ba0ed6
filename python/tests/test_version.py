"""The release is written once, in CMakeLists.txt's project(): CMake generates
stoker/version.h from it (what libstoker reports), setup.py reads it, and
stoker.__version__ is the library's. They must agree."""
import os
import re
import subprocess
import sys

import pytest

from conftest import ROOT

import stoker
from stoker import _lib as L


def cmake_version():
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        m = re.search(r"project\(\s*stoker\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)", f.read())
    assert m, "no project(stoker VERSION X.Y.Z) in CMakeLists.txt"
    return m.group(1)


def test_library_python_and_cmake_agree():
    v = cmake_version()
    assert L.version() == v, f"libstoker ({L.path}) says {L.version()}, CMakeLists.txt {v}: a stale build?"
    assert stoker.__version__ == v


def test_generated_header_agrees():
    # STOKER_LIB is BUILD/reader/libstoker.so in the tree's builds: BUILD/include/stoker/version.h is beside it.
    header = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(L.path))), "include", "stoker", "version.h")
    if not os.path.isfile(header):
        pytest.skip(f"{header}: not a build tree's library")
    with open(header, encoding="utf-8") as f:
        text = f.read()
    macros = dict(re.findall(r"#define (STK_VERSION_\w+) (\S+)", text))
    v = cmake_version()
    assert macros["STK_VERSION_STRING"] == f'"{v}"'
    assert ".".join(macros[f"STK_VERSION_{k}"] for k in ("MAJOR", "MINOR", "PATCH")) == v


def test_setup_py_agrees():
    pytest.importorskip("setuptools")
    p = subprocess.run([sys.executable, "setup.py", "--version"], cwd=os.path.join(ROOT, "python"),
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().splitlines()[-1] == cmake_version()
