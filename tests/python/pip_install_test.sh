#!/bin/sh
# pip_install_test.sh PYTHON_DIR: `pip install` the package offline into a
# scratch venv (with Debian's site packages, where numpy and torch live), from
# a copy of python/ (so the source tree stays clean), bundling $STOKER_LIB;
# then, from another folder, import it and read batches through the bundled
# library. Exit 77 (skipped) without pip/venv/numpy.
set -eu
py=${STOKER_PYTHON:-/usr/bin/python3}
tmp=${STOKER_TEST_TMP:-${TMPDIR:-/tmp}/stoker-pip}
for m in venv ensurepip numpy; do
  if ! "$py" -c "import $m" 2>/dev/null; then
    echo "SKIPPED: $py cannot import $m (apt-get install python3-venv python3-numpy)"
    exit 77
  fi
done
rm -rf "$tmp" && mkdir -p "$tmp"
cp -r "$1" "$tmp/src"
rm -rf "$tmp/src/build" "$tmp/src"/*.egg-info "$tmp/src/stoker/_lib"
"$py" -m venv --system-site-packages "$tmp/venv"
"$tmp/venv/bin/pip" install --no-index --disable-pip-version-check -q "$tmp/src"
"$STOKER_TOOLS/shardgen" -q -n 50 --size 8 --records-per-shard 20 "$tmp/ds"
cd "$tmp"
env -u STOKER_LIB -u PYTHONPATH "$tmp/venv/bin/python" - "$tmp/ds" <<'PY'
import os, sys
import stoker
lib = os.path.realpath(stoker.library_path)
assert lib.startswith(os.path.realpath(sys.prefix)), f"not the bundled library: {lib}"
r = stoker.Reader(sys.argv[1], batch_size=10, order="shuffle", seed=1)
recs = sorted(int(x) for b in r for x in b.records)
assert recs == list(range(50)), recs
print(f"installed stoker {stoker.__version__} reads through {lib}")
PY
