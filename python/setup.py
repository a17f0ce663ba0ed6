"""Install the stoker Python package with libstoker bundled inside it.

    pip install ./python                 (in a venv; see README "Python / PyTorch")

Which libstoker.so goes into the package, first match wins:
  1. $STOKER_LIB: that file (e.g. build/reader/libstoker.so of a build you made);
  2. $STOKER_BUILD_DIR, else ../build (the README's build folder) when it holds
     a CMake build: `cmake --build DIR --target stoker` first, so the copy is
     never older than the sources (a no-op when it is up to date);
  3. otherwise a fresh CMake build of ../ (Release, no CUDA probe unless
     $STOKER_CUDA is set) in python/build/libstoker.
The library is copied into stoker/_lib/libstoker.so; the package loads that
copy, so the installed package keeps working if the build folder goes away.
No network access, and no build dependency beyond what building stoker needs
(cmake and a C compiler) plus setuptools.
"""
import ctypes
import os
import re
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _run(cmd):
    print("stoker setup: " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)


def find_libstoker():
    env = os.environ.get("STOKER_LIB")
    if env:
        if not os.path.isfile(env):
            raise SystemExit(f"stoker setup: STOKER_LIB={env}: no such file")
        return env
    if not os.path.isfile(os.path.join(ROOT, "CMakeLists.txt")):
        raise SystemExit("stoker setup: not inside the stoker source tree and STOKER_LIB is not set: "
                         "set STOKER_LIB to a built libstoker.so")
    if shutil.which("cmake") is None:
        raise SystemExit("stoker setup: cmake not found (needed to build libstoker); or set STOKER_LIB")
    build = os.environ.get("STOKER_BUILD_DIR") or os.path.join(ROOT, "build")
    if not os.path.isfile(os.path.join(build, "CMakeCache.txt")):
        build = os.path.join(HERE, "build", "libstoker")
        cfg = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release"]
        cfg.append("-DSTOKER_CUDA=" + os.environ.get("STOKER_CUDA", "AUTO"))
        _run(cfg)
    _run(["cmake", "--build", build, "--target", "stoker", "-j", str(os.cpu_count() or 1)])
    lib = os.path.join(build, "reader", "libstoker.so")
    if not os.path.isfile(lib):
        raise SystemExit(f"stoker setup: {lib} missing after the build")
    return lib


def project_version():
    """The release, written once: project(stoker VERSION ...) in the tree's CMakeLists.txt; outside the
    tree (a copy of python/), what the libstoker to be bundled ($STOKER_LIB) says it is."""
    cml = os.path.join(ROOT, "CMakeLists.txt")
    if os.path.isfile(cml):
        with open(cml, encoding="utf-8") as f:
            m = re.search(r"project\(\s*stoker\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+)", f.read())
        if not m:
            raise SystemExit(f"stoker setup: no `project(stoker VERSION X.Y.Z` in {cml}")
        return m.group(1)
    env = os.environ.get("STOKER_LIB")
    if env and os.path.isfile(env):
        fn = ctypes.CDLL(os.path.realpath(env)).stk_version_string
        fn.restype = ctypes.c_char_p
        return fn().decode()
    raise SystemExit("stoker setup: not inside the stoker source tree and STOKER_LIB is not set: "
                     "set STOKER_LIB to a built libstoker.so")


class BuildPyWithLib(build_py):
    def run(self):
        super().run()
        src = os.path.realpath(find_libstoker())
        dst_dir = os.path.join(self.build_lib, "stoker", "_lib")
        os.makedirs(dst_dir, exist_ok=True)
        dst = os.path.join(dst_dir, "libstoker.so")
        shutil.copyfile(src, dst)
        os.chmod(dst, 0o755)
        print(f"stoker setup: bundled {src} as stoker/_lib/libstoker.so", flush=True)


class BinaryDistribution(Distribution):
    """The wheel carries a native library: platform-specific."""

    def has_ext_modules(self):
        return True


setup(
    name="stoker",
    version=project_version(),
    description="Python and PyTorch binding of libstoker, the batching reader of packed datasets",
    packages=["stoker"],
    python_requires=">=3.9",
    install_requires=[],  # numpy (and torch for output='torch') come from Debian: python3-numpy, python3-torch
    cmdclass={"build_py": BuildPyWithLib},
    distclass=BinaryDistribution,
    zip_safe=False,
)
