#!/bin/sh
# run_pytest.sh TESTS... [PYTEST ARGS]: the binding's pytest suite with Debian's python.
# Exit 77 (ctest: skipped) with the reason when pytest or numpy is missing.
set -eu
py=${STOKER_PYTHON:-/usr/bin/python3}
[ -x "$py" ] || { echo "SKIPPED: $py not found (apt-get install python3)"; exit 77; }
for m in pytest numpy; do
  if ! "$py" -c "import $m" 2>/dev/null; then
    echo "SKIPPED: $py cannot import $m (apt-get install python3-$m)"
    exit 77
  fi
done
tmp=${STOKER_TEST_TMP:-${TMPDIR:-/tmp}/stoker-pytest}
rm -rf "$tmp" && mkdir -p "$tmp"
exec "$py" -m pytest -q -rs -p no:cacheprovider --basetemp="$tmp" "$@"
