#!/usr/bin/env bash
# install_test.sh BUILD_DIR SOURCE_DIR WORK_DIR
# `cmake --install` into WORK_DIR/prefix, then build examples/read_dataset.c
# against the installed tree with pkg-config and with find_package(stoker),
# and run each on a dataset made by the installed shardgen.
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix
fail() { echo "install_test: FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >"$work/install.log"
for f in include/stoker/format.h include/stoker/reader.h bin/shardcheck bin/shardgen; do
  [[ -e $prefix/$f ]] || fail "missing $f after install"
done
libdir=$(cd "$(dirname "$(find "$prefix" -name stoker.pc)")/.." && pwd)
[[ -e $libdir/libstoker.a && -e $libdir/libstoker.so ]] || fail "libstoker.a / libstoker.so not installed"
[[ -e $libdir/cmake/stoker/stokerConfig.cmake ]] || fail "CMake package config not installed"

"$prefix/bin/shardgen" -q -n 64 --size 16 --classes 4 "$work/ds" || fail "installed shardgen failed"
"$prefix/bin/shardcheck" -q "$work/ds" || fail "installed shardcheck found problems"

# 1. pkg-config (relocatable .pc: the prefix is not the configured one)
export PKG_CONFIG_PATH=$libdir/pkgconfig
flags=$(pkg-config --cflags --libs stoker) || fail "pkg-config does not know stoker"
# shellcheck disable=SC2086
cc -std=c11 -Wall -Werror "$src/examples/read_dataset.c" $flags -Wl,-rpath,"$libdir" -o "$work/read_pc" ||
  fail "consumer did not build with pkg-config ($flags)"
out=$("$work/read_pc" "$work/ds") || fail "pkg-config consumer failed: $out"
grep -q "64 records" <<<"$out" || fail "pkg-config consumer printed: $out"
# ldd's output is captured first: `ldd | grep -q` under pipefail fails at random
# when grep exits on its match before ldd has written everything (SIGPIPE).
deps=$(ldd "$work/read_pc") || fail "ldd $work/read_pc failed"
grep -qF "$libdir/libstoker.so" <<<"$deps" ||
  fail "consumer not linked to the installed libstoker.so ($libdir); ldd says: $(grep stoker <<<"$deps")"

# 2. find_package(stoker), shared and static
cmake -S "$src/tests/install/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  -DEXAMPLE_SOURCE="$src/examples/read_dataset.c" >"$work/consumer.log" 2>&1 ||
  { cat "$work/consumer.log"; fail "find_package(stoker) failed"; }
cmake --build "$work/consumer" >>"$work/consumer.log" 2>&1 || { cat "$work/consumer.log"; fail "consumer build failed"; }
for exe in read_shared read_static; do
  out=$("$work/consumer/$exe" "$work/ds") || fail "$exe failed: $out"
  grep -q "64 records" <<<"$out" || fail "$exe printed: $out"
done
echo "install_test: OK (pkg-config and find_package, shared and static)"
