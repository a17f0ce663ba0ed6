"""stoker.pack's resume state (OUT/stoker-pack.state.json): a state that disagrees with the shards on disk,
or is malformed, is refused with a stoker.Error naming the file, the field and what to delete, never used
(a resume from it would drop or repeat inputs) and never a raw Python error. Property tests of the check
with hypothesis (Debian's python3-hypothesis) when it is installed."""
import copy
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

import stoker
from stoker import _pack
from conftest import expected_records, records

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
STATE = "stoker-pack.state.json"
N = 300  # inputs
KILL_AT = 230  # the killed run dies inside fn of this input
FIELDS = {"i": stoker.Scalar("int64"), "s": stoker.String()}
_kill_at = [None]


def make(i):
    """None, one or two samples per input; some inputs raise (listed as skipped)."""
    if i == _kill_at[0]:
        os.kill(os.getpid(), signal.SIGKILL)
    if i % 41 == 9:
        raise ValueError(f"bad input {i}")
    if i % 13 == 4:
        return None
    one = {"i": i, "s": f"input {i}"}
    return [one, {"i": -i, "s": "second"}] if i % 7 == 2 else one


def run(out, kill_at=None):
    _kill_at[0] = kill_at
    return stoker.pack(make, range(N), out, FIELDS, workers=0, records_per_shard=20, progress=False)


def expected():
    return expected_records(make, N)


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """The directory a SIGKILLed stoker.pack left (committed shards and the state file), as a template."""
    out = tmp_path_factory.mktemp("killed") / "ds"
    child = ("import sys; sys.path[:0] = [sys.argv[3], sys.argv[4]]; import test_pack_state as t; "
             "t.run(sys.argv[1], int(sys.argv[2]))")
    p = subprocess.run([sys.executable, "-c", child, str(out), str(KILL_AT), HERE, PKG], capture_output=True,
                       text=True)
    assert p.returncode == -signal.SIGKILL, p.stderr
    st = json.loads((out / STATE).read_text())
    assert st["shards"] >= 3 and not (out / "manifest.json").exists()
    return out


@pytest.fixture
def run_dir(killed, tmp_path):
    out = tmp_path / "ds"
    shutil.copytree(killed, out)
    return out


def edit(out, change):
    path = out / STATE
    st = json.loads(path.read_text())
    change(st)
    path.write_text(json.dumps(st))
    return path


def test_an_untouched_state_resumes_to_the_uninterrupted_records(run_dir):
    s = run(run_dir)
    assert s["resumed"] and s["complete"] and s["skipped"] == len([i for i in range(N) if i % 41 == 9])
    assert records(run_dir) == expected()
    assert not (run_dir / STATE).exists()


def _next_i(d):
    d["next"][0] += 1


def _next_i_back(d):
    d["next"][0] -= 3


def _next_j(d):
    d["next"][1] += 1


def _shards_up(d):
    d["shards"] += 1


def _shards_down(d):
    d["shards"] -= 1


def _records_up(d):
    d["records"] += 1


def _records_down(d):
    d["records"] -= 20


def _shard_records(d):
    d["committed"][1]["records"] += 1


def _shard_hash(d):
    d["committed"][0]["index_hash"] = "0" * 16


def _shard_end(d):
    d["committed"][1]["next"][1] += 1


def _skipped(d):
    d["skipped"][0][0] += 1


EDITS = {"next": [_next_i, _next_i_back, _next_j], "shards": [_shards_up, _shards_down],
         "records": [_records_up, _records_down], "committed": [_shard_records, _shard_hash],
         "check": [_shard_end, _skipped]}


@pytest.mark.parametrize("field,change", [(f, c) for f, cs in EDITS.items() for c in cs],
                         ids=[c.__name__.strip("_") for cs in EDITS.values() for c in cs])
def test_an_edited_state_is_refused_naming_file_field_and_fix(run_dir, field, change):
    path = edit(run_dir, change)
    before = sorted(os.listdir(run_dir))
    with pytest.raises(stoker.Error) as e:
        run(run_dir)
    msg = str(e.value)
    assert str(path) in msg and f"'{field}'" in msg and f"delete {path}" in msg, msg
    assert sorted(os.listdir(run_dir)) == before  # nothing written, nothing removed
    os.unlink(path)  # what the message says: the run then starts over and gives the right records
    assert run(run_dir)["complete"] and records(run_dir) == expected()


def test_a_state_naming_a_missing_shard_is_refused(run_dir):
    os.unlink(run_dir / "shard-00001.stk")
    with pytest.raises(stoker.Error, match=r"'committed'\[1\]: shard-00001.stk cannot be read"):
        run(run_dir)


MALFORMED = {
    "list": "[]",
    "number": "7",
    "bad JSON": '{"params": ',
    "not UTF-8": b'{"params": "\xff"}',
    "nested too deep": "[" * 100000,
    "negative next": lambda d: d.update(next=[-1, 0]),
    "next past the inputs": lambda d: d.update(next=[N, 0]),
    "next a number": lambda d: d.update(next=5),
    "next too short": lambda d: d.update(next=[5]),
    "shards a list": lambda d: d.update(shards=[1, 2]),
    "shards true": lambda d: d.update(shards=True),
    "records a string": lambda d: d.update(records="40"),
    "records a float": lambda d: d.update(records=40.0),
    "params a number": lambda d: d.update(params=1),
    "no next": lambda d: d.pop("next"),
    "no committed": lambda d: d.pop("committed"),
    "skipped a dict": lambda d: d.update(skipped={}),
    "skipped entry short": lambda d: d.update(skipped=[[9, "9"]]),
    "skipped out of order": lambda d: d.update(skipped=d["skipped"][::-1]),
    "committed entry a list": lambda d: d["committed"].__setitem__(0, [1, 2]),
    "committed file renamed": lambda d: d["committed"][0].update(file="../x.stk"),
}


@pytest.mark.parametrize("bad", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_malformed_state_is_a_stoker_error_naming_the_file(run_dir, bad):
    path = run_dir / STATE
    if isinstance(bad, (str, bytes)):
        (path.write_bytes if isinstance(bad, bytes) else path.write_text)(bad)
    else:
        edit(run_dir, bad)
    with pytest.raises(stoker.Error) as e:
        run(run_dir)
    assert str(path) in str(e.value) and f"delete {path}" in str(e.value), str(e.value)


def test_a_state_of_other_arguments_is_replaced(run_dir):
    """A run with other arguments does not continue that state: it starts over (as before)."""
    s = stoker.pack(make, range(N - 1), run_dir, FIELDS, workers=0, records_per_shard=20, progress=False)
    assert not s["resumed"] and records(run_dir) == expected()[:len(records(run_dir))]


# ------------------------------------------------------------------ property tests (hypothesis)

try:
    import hypothesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as hs
except ImportError:
    hypothesis = None

if hypothesis is None:
    def test_state_properties():
        pytest.skip("python3-hypothesis is not installed (apt-get install python3-hypothesis): the property "
                    "tests of stoker.pack's state file did not run")
else:
    def _containers(kids):  # named, not a lambda: hypothesis reads a lambda's source to show it
        return hs.lists(kids, max_size=3) | hs.dictionaries(hs.text(max_size=6), kids, max_size=3)

    JSON = hs.recursive(hs.none() | hs.booleans() | hs.integers(-2 ** 70, 2 ** 70) | hs.floats(allow_nan=False)
                        | hs.text(max_size=8), _containers, max_leaves=8)
    SETTINGS = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

    def _other_than(old):
        def other(x):
            return x != old or type(x) is not type(old)
        return other

    def _paths(v, at=()):
        """Every place in a JSON value: (path, value)."""
        yield at, v
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        for k, x in items:
            yield from _paths(x, at + (k,))

    def _put(v, at, x):
        v = copy.deepcopy(v)
        if not at:
            return x
        o = v
        for k in at[:-1]:
            o = o[k]
        o[at[-1]] = x
        return v

    def _load(target, st):
        path = os.path.join(target, STATE)
        with open(path, "w") as f:
            f.write(st if isinstance(st, str) else json.dumps(st))
        params = json.loads(open(os.path.join(target, STATE + ".orig")).read())["params"]
        return _pack._load_state(str(target), params, 0, N)

    @pytest.fixture(scope="module")
    def prop_dir(killed, tmp_path_factory):
        out = tmp_path_factory.mktemp("prop") / "ds"
        shutil.copytree(killed, out)
        shutil.copy(out / STATE, out / (STATE + ".orig"))
        return out

    @SETTINGS
    @given(st=JSON)
    def test_any_json_is_a_state_or_a_stoker_error_naming_the_file(prop_dir, st):
        try:
            got = _load(prop_dir, st)
        except stoker.Error as e:
            assert os.path.join(str(prop_dir), STATE) in str(e)
        else:
            assert got is None  # no random value is a valid state of these shards

    @SETTINGS
    @given(data=hs.data(), text=hs.text(max_size=200))
    def test_any_text_is_refused_or_ignored_never_a_raw_error(prop_dir, data, text):
        orig = (prop_dir / (STATE + ".orig")).read_text()
        cut = data.draw(hs.integers(0, len(orig)))
        for st in (text, orig[:cut], orig[:cut] + text):
            try:
                got = _load(prop_dir, st)
            except stoker.Error as e:
                assert os.path.join(str(prop_dir), STATE) in str(e)
            else:
                assert got is None or st == orig

    @SETTINGS
    @given(data=hs.data())
    def test_any_edit_of_a_killed_runs_state_is_refused(prop_dir, data):
        """Replacing any value of the state by another JSON value: refused (stoker.Error naming the file),
        or, for 'params' alone, a state of other arguments (None: the run starts over)."""
        orig = json.loads((prop_dir / (STATE + ".orig")).read_text())
        at, old = data.draw(hs.sampled_from(list(_paths(orig))[1:]))
        new = data.draw(JSON.filter(_other_than(old)))
        try:
            got = _load(prop_dir, _put(orig, at, new))
        except stoker.Error as e:
            assert os.path.join(str(prop_dir), STATE) in str(e)
        else:
            assert at == ("params",) and got is None, f"edit at {at} to {new!r} was accepted"

    def test_the_untouched_state_is_accepted(prop_dir):
        orig = json.loads((prop_dir / (STATE + ".orig")).read_text())
        got = _load(prop_dir, orig)
        assert got["next"] == orig["next"] and got["records"] == orig["records"]

    @SETTINGS
    @given(data=hs.data())
    def test_any_numeric_edit_of_counts_or_positions_is_refused(prop_dir, data):
        orig = json.loads((prop_dir / (STATE + ".orig")).read_text())
        places = [p for p, v in _paths(orig) if type(v) is int and p[0] in ("shards", "records", "next", "committed")]
        at = data.draw(hs.sampled_from(places))
        old = orig
        for k in at:
            old = old[k]
        delta = data.draw(hs.integers(-3 * N, 3 * N).filter(bool))
        with pytest.raises(stoker.Error):
            _load(prop_dir, _put(orig, at, old + delta))
