#!/bin/bash
# tests/remote/test_tools_remote.sh - shardinfo, shardcheck and shardview on
# s3:// print what they print for the local copy (the address in place of
# the directory), under tests/support/s3env: datasets written by shardgen
# (bytes, zstd-compressed, variable-shape fields), uploaded with curl. A
# byte damaged in the object is named by shard, record and field, exit 1; a
# missing dataset and a lone remote shard are refused by name, exit 1.
set -u
B=${STOKER_TOOLS:?STOKER_TOOLS names the built tools}
T=${STOKER_TEST_TMP:?}/tools-remote
BK=${STOKER_TEST_S3_BUCKET:?run under tests/support/s3env}
rm -rf "$T" && mkdir -p "$T"
export STOKER_CACHE_DIR=$T/cache
fails=0
fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}
upload() { # DIR PREFIX
    for f in $(cd "$1" && ls); do
        curl -sS -f --aws-sigv4 "aws:amz:${AWS_REGION:-us-east-1}:s3" -u "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
            -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -T "$1/$f" "$STOKER_TEST_S3_DIRECT/$BK/$2/$f" -o /dev/null ||
            { echo "upload of $1/$f failed"; exit 1; }
    done
}
# same NAME LOCAL_OUT REMOTE_OUT LOCAL_PATH URL: equal once the paths are one
same() {
    if ! diff <(sed "s|$4|DATASET|g" "$2") <(sed "s|$5|DATASET|g" "$3") > "$T/diff"; then
        fail "$1 differs on s3://"
        head -20 "$T/diff"
    fi
}
# A run's exit status must be $1.
status() {
    local want=$1 what=$2
    shift 2
    "$@" > "$T/out" 2> "$T/err"
    local got=$?
    [ "$got" = "$want" ] || { fail "$what: exit $got, want $want"; cat "$T/err"; }
}
# --json results without the timings
untimed() { sed -E 's/"seconds": [0-9.]+/"seconds": 0/; s/"gb_per_s": [0-9.]+/"gb_per_s": 0/' "$1"; }

"$B/shardgen" -q -n 240 --size 32 --captions --records-per-shard 80 "$T/plain" || exit 1
"$B/shardgen" -q -n 240 --size 32 --captions --compress zstd --block-size 8K --records-per-shard 80 "$T/zstd" || exit 1
"$B/shardgen" -q -n 240 --size 32 --aspect --records-per-shard 80 "$T/aspect" || exit 1
for d in plain zstd aspect; do
    upload "$T/$d" "ds/$d"
    L=$T/$d U=s3://$BK/ds/$d
    for args in "" "--json"; do
        status 0 "shardinfo $args $d" "$B/shardinfo" $args "$L" && cp "$T/out" "$T/l"
        status 0 "shardinfo $args s3 $d" "$B/shardinfo" $args "$U" && cp "$T/out" "$T/r"
        same "shardinfo $args $d" "$T/l" "$T/r" "$L" "$U"
    done
    for args in "--quick" "--full" "--file-hash"; do
        status 0 "shardcheck $args $d" "$B/shardcheck" -q --json $args "$L" && untimed "$T/out" > "$T/l"
        status 0 "shardcheck $args s3 $d" "$B/shardcheck" -q --json $args "$U" && untimed "$T/out" > "$T/r"
        same "shardcheck $args $d" "$T/l" "$T/r" "$L" "$U"
    done
    status 0 "shardcheck default s3 $d" "$B/shardcheck" -q "$U/manifest.json"
    status 0 "shardview $d" "$B/shardview" -q -o "$T/l.png" "$L"
    status 0 "shardview s3 $d" "$B/shardview" -q -o "$T/r.png" "$U"
    cmp -s "$T/l.png" "$T/r.png" || fail "shardview $d: another image from s3://"
done

# The same dataset by plain https?:// (range GETs of the objects' URLs)
H=$AWS_ENDPOINT_URL/$BK/ds/plain
status 0 "shardinfo local" "$B/shardinfo" "$T/plain" && cp "$T/out" "$T/l"
status 0 "shardinfo http" "$B/shardinfo" "$H" && cp "$T/out" "$T/r"
same "shardinfo http" "$T/l" "$T/r" "$T/plain" "$H"
status 0 "shardcheck http" "$B/shardcheck" -q --file-hash "$H/manifest.json"

# A byte of shard 1 damaged in the object (the middle of the file: image data)
cp -r "$T/plain" "$T/bad"
s1=$T/bad/$(cd "$T/bad" && ls shard-*.stk | sed -n 2p)
size=$(stat -c %s "$s1")
printf '\xff\xfe' | dd of="$s1" bs=1 seek=$((size / 2)) conv=notrunc status=none
upload "$T/bad" ds/bad
status 1 "shardcheck local damaged" "$B/shardcheck" -q "$T/bad" && cp "$T/out" "$T/l"
status 1 "shardcheck s3 damaged" "$B/shardcheck" -q "s3://$BK/ds/bad" && cp "$T/out" "$T/r"
grep -q "record .*, field 'image': checksum mismatch" "$T/l" || fail "local damage not named: $(cat "$T/l")"
# the same problem, the address in place of the directory, and that it was fetched twice
if ! diff <(sed "s|$T/bad|DATASET|g; s|\$| in two fetches|" "$T/l") <(sed "s|s3://$BK/ds/bad|DATASET|g" "$T/r") > "$T/diff"; then
    fail "shardcheck on the damaged object names another problem"
    cat "$T/diff"
fi

status 1 "shardinfo missing" "$B/shardinfo" "s3://$BK/ds/none"
grep -q "s3://$BK/ds/none: not a stoker dataset (no manifest.json)" "$T/err" || fail "missing: $(cat "$T/err")"
status 1 "shardcheck missing" "$B/shardcheck" -q "s3://$BK/ds/none"
status 1 "shardcheck remote shard" "$B/shardcheck" -q "s3://$BK/ds/plain/shard-00000.stk"
grep -q "checked through its dataset" "$T/err" || fail "lone shard: $(cat "$T/err")"

[ "$fails" = 0 ] && echo "OK" && exit 0
exit 1
