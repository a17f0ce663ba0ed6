"""stoker.torch.DataLoader: PyTorch's DataLoader conventions, epochs per iter(), torchdata-style
resume (also in a new process and after kill -9), tail defaults by world size, torch.distributed."""
import hashlib
import json
import os
import signal
import subprocess
import sys

import pytest

import stoker
from conftest import dump_order, shardgen

torch = pytest.importorskip("torch", reason="python3-torch is not installed (apt-get install python3-torch)")
import stoker.torch  # noqa: E402

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "loader_child.py")


def image_key(img):
    return hashlib.sha1(img.contiguous().numpy().tobytes()).hexdigest()[:16]


@pytest.fixture(scope="module")
def rec_of(ds):
    """sample hash -> global record index (every image of `ds` is distinct)."""
    out = {}
    with stoker.Reader(ds, batch_size=103, tail="partial", output="torch") as r:
        b = next(iter(r))
        for i, rec in enumerate(b.records):
            out[image_key(b["image"][i])] = int(rec)
    assert len(out) == 103
    return out


@pytest.fixture(scope="module")
def ds48(tmp_path_factory):
    """48 records: a global batch of 8 divides it (ranks then share nothing)."""
    return shardgen(tmp_path_factory.mktemp("ds48") / "ds", 48, per_shard=20)


def records(batch_images, rec_of):
    return [rec_of[image_key(batch_images[i])] for i in range(batch_images.shape[0])]


def epoch_records(it, rec_of):
    return [records(image, rec_of) for image, _ in it]


def run_child(*args, check=True):
    p = subprocess.run([sys.executable, CHILD, *map(str, args)], capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"loader_child {' '.join(map(str, args))}: exit {p.returncode}\n{p.stderr}")
    return p


def read_log(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


# ------------------------------------------------------------------ the DataLoader's surface
def test_import_stoker_imports_no_torch():
    code = ("import sys, stoker, stoker.torch; assert 'torch' not in sys.modules, 'torch imported'; "
            "assert stoker.torch.DataLoader; print('ok')")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(CHILD)))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


def test_tuple_unpacking_and_tensors(ds, rec_of):
    with stoker.torch.DataLoader(ds, batch_size=10, shuffle=True, seed=3) as dl:
        n = 0
        for image, label in dl:
            assert isinstance(image, torch.Tensor) and image.dtype == torch.uint8
            assert isinstance(label, torch.Tensor) and label.dtype == torch.int64
            assert image.shape[1:] == (8, 8, 3) and label.shape == (image.shape[0],)
            n += image.shape[0]
        assert n == 103
    with stoker.torch.DataLoader(ds, batch_size=10, fields=("label", "image")) as dl:
        label, image = next(iter(dl))
        assert label.shape == (10,) and image.shape == (10, 8, 8, 3)
        assert records(image, rec_of) == list(range(10))
    with stoker.torch.DataLoader(ds, batch_size=10, fields="label") as dl:
        label = next(iter(dl))
        assert isinstance(label, torch.Tensor) and label.shape == (10,)
    with stoker.torch.DataLoader(ds, batch_size=10, as_dict=True) as dl:
        b = next(iter(dl))
        assert type(b) is dict and sorted(b) == ["image", "label"]


def test_len_dataset_classes_and_shims(ds):
    with stoker.torch.DataLoader(ds, batch_size=10) as dl:
        assert len(dl) == 11                          # 103 records: the last batch has 3 (partial, one process)
        assert len(dl.dataset) == 103 and dl.dataset.classes == [f"class{i:03d}" for i in range(5)]
        assert dl.dataset.class_to_idx["class003"] == 3 and dl.dataset.fields == ["image", "label"]
        assert len(dl.sampler) == 103 and len(dl.batch_sampler) == 11 and dl.batch_sampler.batch_size == 10
        assert sum(1 for _ in dl) == 11
    with stoker.torch.DataLoader(ds, batch_size=10, drop_last=True) as dl:
        assert len(dl) == 10 and len(dl.sampler) == 100 and dl.drop_last and dl.tail == "drop"
        assert sum(image.shape[0] for image, _ in dl) == 100


def test_collate_fn_on_the_whole_batch_and_pin_memory(ds):
    def mix(batch):
        image, label = batch
        x = image.float()
        return 0.5 * x + 0.5 * x.flip(0), label, label.flip(0)

    with stoker.torch.DataLoader(ds, batch_size=8, shuffle=True, collate_fn=mix, pin_memory=True) as dl:
        x, ya, yb = next(iter(dl))
        assert x.dtype == torch.float32 and x.shape == (8, 8, 8, 3) and torch.equal(ya.flip(0), yb)
        assert x.is_pinned() == torch.cuda.is_available()   # pinned where CUDA can take it, else unchanged


def test_refused_dataloader_arguments_say_why(ds):
    with pytest.raises(ValueError, match="sampler"):
        stoker.torch.DataLoader(ds, sampler=[0, 1])
    with pytest.raises(ValueError, match="worker_init_fn"):
        stoker.torch.DataLoader(ds, worker_init_fn=print)
    with pytest.raises(TypeError, match="collate_fn"):
        stoker.torch.DataLoader(ds, transform=lambda x: x)
    with stoker.Reader(ds, batch_size=4, output="torch") as r:
        with pytest.raises(ValueError, match="batch_size"):
            stoker.torch.DataLoader(r, batch_size=8)
        dl = stoker.torch.DataLoader(r)                      # over an open Reader: its options rule
        assert len(dl) == len(r) and dl.batch_size == 4 and dl.tail == "pad"


def test_generator_gives_the_seed(ds, rec_of):
    g = torch.Generator()
    g.manual_seed(77)
    with stoker.torch.DataLoader(ds, batch_size=10, shuffle=True, generator=g) as dl:
        got = epoch_records(dl, rec_of)
    assert got == dump_order(ds, 10, "shuffle", 77, tail="partial")


# ------------------------------------------------------------------ epochs
def test_each_iter_is_a_new_epoch_also_after_a_break(ds, rec_of):
    want = dump_order(ds, 10, "shuffle", 5, epochs=4, tail="partial")
    e = [want[i * 11:(i + 1) * 11] for i in range(4)]
    with stoker.torch.DataLoader(ds, batch_size=10, shuffle=True, seed=5, num_workers=2) as dl:
        first = []
        for i, (image, _) in enumerate(dl):
            first.append(records(image, rec_of))
            if i == 2:
                break                                   # a step limit: the epoch is left mid-way
        assert first == e[0][:3] and dl.epoch == 0
        assert epoch_records(dl, rec_of) == e[1]        # a new epoch, from its start
        assert dl.epoch == 1
        assert epoch_records(dl, rec_of) == e[2]
        dl.sampler.set_epoch(0)                        # as DistributedSampler.set_epoch
        assert epoch_records(dl, rec_of) == e[0]
        assert epoch_records(dl, rec_of) == e[1]
    assert e[0] != e[1]


def test_an_old_iterator_does_not_interleave(ds):
    with stoker.torch.DataLoader(ds, batch_size=10) as dl:
        old = iter(dl)
        next(old)
        new = iter(dl)
        next(new)
        with pytest.raises(RuntimeError, match="replaced"):
            next(old)


# ------------------------------------------------------------------ torchdata's protocol
def test_state_dict_protocol_in_process(ds, rec_of):
    want = dump_order(ds, 10, "shuffle", 9, epochs=3, tail="partial")
    kw = dict(batch_size=10, shuffle=True, seed=9)
    with stoker.torch.DataLoader(ds, **kw) as a:
        s0 = a.state_dict()                             # before iter(): the iterator iter() will give
        assert (s0["epoch"], s0["_num_yielded"], s0["_iterator_finished"]) == (0, 0, False)
        it = iter(a)
        for _ in range(4):
            next(it)
        mid = a.state_dict()
        assert (mid["epoch"], mid["_num_yielded"], mid["reader"]["batch"]) == (0, 4, 4)
        rest = [records(image, rec_of) for image, _ in it]
        done = a.state_dict()
        assert done["_iterator_finished"] and done["reader"]["epoch"] == 1
        json.dumps(done)                                # plain values
    assert rest == want[4:11]
    with stoker.torch.DataLoader(ds, **kw) as b:
        b.load_state_dict(mid)
        assert b.state_dict() == mid                    # loaded, not yet iterated: the loaded state
        assert epoch_records(b, rec_of) == want[4:11]   # continues the loaded position ...
        assert epoch_records(b, rec_of) == want[11:22]  # ... then the next epoch
    with stoker.torch.DataLoader(ds, **kw) as c:
        c.load_state_dict(done)                         # a finished epoch: the next one starts
        assert epoch_records(c, rec_of) == want[11:22]
        c.load_state_dict({})                           # torchdata: {} loads nothing
        assert epoch_records(c, rec_of) == want[22:33]
    with stoker.torch.DataLoader(ds, **kw) as d:
        d.load_state_dict(mid)
        d.set_epoch(2)                                  # another epoch named: set_epoch wins
        assert epoch_records(d, rec_of) == want[22:33]


def test_state_after_the_last_batch_gives_an_empty_epoch_then_the_next(ds, rec_of):
    """As StatefulDataLoader: taken after the last batch but before StopIteration, a state
    resumes that epoch's (empty) rest, so a script's epoch loop stays aligned."""
    want = dump_order(ds, 10, "shuffle", 2, epochs=2, tail="partial")
    with stoker.torch.DataLoader(ds, batch_size=10, shuffle=True, seed=2) as a:
        it = iter(a)
        for _ in range(11):
            next(it)
        last = a.state_dict()
    assert (last["_num_yielded"], last["_iterator_finished"]) == (11, False)
    with stoker.torch.DataLoader(ds, batch_size=10, shuffle=True, seed=2) as b:
        b.load_state_dict(last)
        assert epoch_records(b, rec_of) == []
        assert epoch_records(b, rec_of) == want[11:]


def test_load_state_dict_refusals(ds):
    with stoker.torch.DataLoader(ds, batch_size=10, shuffle=True, seed=1) as a:
        st = a.state_dict()
    with stoker.torch.DataLoader(ds, batch_size=10, shuffle=True, seed=2) as b:
        with pytest.raises(stoker.ArgumentError, match="seed differs"):
            b.load_state_dict(st)
        with pytest.raises(ValueError, match="not a stoker.torch.DataLoader state"):
            b.load_state_dict({"epoch": 1})
        bad = dict(st, _num_yielded=3)
        with pytest.raises(ValueError, match="position"):
            b.load_state_dict(bad)


@pytest.mark.parametrize("transform", [False, True], ids=["raw", "transform"])
def test_state_dict_loaded_in_a_new_process_continues_batch_for_batch(ds, tmp_path, transform):
    """Process A reads an epoch and 4 batches, saves its state, reads on; process B loads the
    state and must give the same batches (the same pixels, random crops and flips included)."""
    extra = ["--transform"] if transform else []
    common = [ds, "--batch", 10, "--shuffle", "--seed", 31, *extra]
    run_child(*common, "--log", tmp_path / "a.log", "--epochs", 3, "--state-out", tmp_path / "state.json",
              "--state-after", 11 + 4)
    run_child(*common, "--log", tmp_path / "b.log", "--epochs", 2, "--state-in", tmp_path / "state.json")
    a, b = read_log(tmp_path / "a.log"), read_log(tmp_path / "b.log")
    assert len(a) == 33 and len(b) == 7 + 11
    assert [(x["epoch"], x["batch"]) for x in b[:2]] == [(1, 4), (1, 5)]
    assert b == a[15:]
    if transform:
        assert a[0]["images"] != a[11]["images"]  # epochs differ in their crops, not only their order


# ------------------------------------------------------------------ checkpoint_dir
def test_checkpoint_dir_resumes_after_kill_9(ds, tmp_path):
    common = [ds, "--batch", 10, "--shuffle", "--seed", 4, "--epochs", 3, "--checkpoint-every", 3]
    run_child(*common, "--log", tmp_path / "full.log", "--checkpoint-dir", tmp_path / "ck-full")
    full = read_log(tmp_path / "full.log")
    ck = tmp_path / "ck"
    p = run_child(*common, "--log", tmp_path / "run.log", "--checkpoint-dir", ck, "--kill-after", 11 + 8,
                  check=False)
    assert p.returncode == -signal.SIGKILL, p.stderr
    before = read_log(tmp_path / "run.log")
    assert len(before) == 19
    saved = json.load(open(ck / "stoker-ds.rank0.json"))["saved"]
    assert (saved["epoch"], saved["_num_yielded"]) == (1, 6)  # saved when batch 6 was asked for: 0..5 done
    # the restarted script knows nothing of the position: the loader finds its file
    run_child(*common[:-4], "--epochs", 2, "--checkpoint-every", 3, "--log", tmp_path / "run.log",
              "--checkpoint-dir", ck)
    after = read_log(tmp_path / "run.log")[19:]
    assert [(x["epoch"], x["batch"]) for x in after[:1]] == [(1, 6)]
    assert before[:17] + after == full                  # batches 6 and 7 of epoch 1 read twice, none lost
    assert json.load(open(ck / "stoker-ds.rank0.json"))["maybe"] == {"epoch": 2, "batch": 11, "at": "end"}  # its loop over


def test_checkpoint_env_applies_to_shuffling_loaders_only(ds, tmp_path, monkeypatch):
    monkeypatch.setenv("STOKER_CHECKPOINT_DIR", str(tmp_path / "env"))
    monkeypatch.setenv("STOKER_CHECKPOINT_EVERY", "2")
    with stoker.torch.DataLoader(ds, batch_size=10, shuffle=True) as train:
        it = iter(train)
        for _ in range(5):
            next(it)
        assert train.checkpoint_path == str(tmp_path / "env" / "stoker-ds.rank0.json")
        assert json.load(open(train.checkpoint_path))["saved"]["_num_yielded"] == 4
    with stoker.torch.DataLoader(ds, batch_size=10) as val:        # evaluation: whole epochs, no file
        assert val.checkpoint_path is None
    with stoker.torch.DataLoader(ds, batch_size=10, shuffle=True) as again:   # continues the file
        assert again.state_dict()["_num_yielded"] == 4
    with stoker.torch.DataLoader(ds, batch_size=10, shuffle=True, checkpoint_dir=False) as off:
        assert off.checkpoint_path is None and off.state_dict()["_num_yielded"] == 0
    with pytest.raises(stoker.ArgumentError, match="stoker-ds.rank0.json.*another run"):
        stoker.torch.DataLoader(ds, batch_size=5, shuffle=True)   # another global batch: refused, not restarted


# ------------------------------------------------------------------ tails and ranks
def test_tail_defaults_by_world_size(ds, rec_of, monkeypatch):
    with stoker.torch.DataLoader(ds, batch_size=10, shuffle=True, seed=6) as one:
        assert one.tail == "partial" and one.world_size == 1
        seen = sorted(r for b in epoch_records(one, rec_of) for r in b)
        assert seen == list(range(103))                 # every record once: no padding in one process
    with stoker.torch.DataLoader(ds, batch_size=10, rank=1, world_size=2) as two:
        assert two.tail == "pad" and len(two) == 6 and len(two.sampler) == 60
        assert all(image.shape[0] == 10 for image, _ in two)
    with stoker.torch.DataLoader(ds, batch_size=10, rank=1, world_size=2, drop_last=True) as drop:
        assert drop.tail == "drop" and len(drop) == 5
    with stoker.torch.DataLoader(ds, batch_size=10, rank=1, world_size=2, tail="partial") as part:
        assert part.tail == "partial" and len(part.sampler) == 50 and sum(i.shape[0] for i, _ in part) == 50
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "3")
    with stoker.torch.DataLoader(ds, batch_size=10) as env:
        assert (env.rank, env.world_size, env.tail) == (0, 3, "pad")


def test_two_process_distributed_ranks_are_disjoint_and_cover_the_epoch(ds48, tmp_path):
    """torch.distributed (gloo, CPU), two processes: rank and world size from the process group,
    the default tail pad; a global batch dividing the dataset: disjoint ranks, union the epoch."""
    init = tmp_path / "pg"
    args = lambda r: [ds48, "--batch", 4, "--shuffle", "--seed", 8, "--epochs", 2,  # noqa: E731
                      "--log", tmp_path / f"r{r}.log", "--dist", r, 2, init]
    procs = [subprocess.Popen([sys.executable, CHILD, *map(str, args(r))],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    logs = [read_log(tmp_path / f"r{r}.log") for r in range(2)]
    assert [(x["rank"], x["world"], x["tail"], x["len"]) for x in (logs[0][0], logs[1][0])] == \
        [(0, 2, "pad", 6), (1, 2, "pad", 6)]
    for epoch in range(2):
        per_rank = [[h for x in log if x["epoch"] == epoch for h in x["images"]] for log in logs]
        assert len(per_rank[0]) == len(per_rank[1]) == 24
        assert not set(per_rank[0]) & set(per_rank[1])
        with stoker.Reader(ds48, batch_size=48, output="torch") as r:
            every = {image_key(img) for img in next(iter(r))["image"]}
        assert set(per_rank[0]) | set(per_rank[1]) == every
    e0 = [h for x in logs[0] if x["epoch"] == 0 for h in x["images"]]
    e1 = [h for x in logs[0] if x["epoch"] == 1 for h in x["images"]]
    assert e0 != e1


def test_unshuffled_loaders_read_once(ds):
    # an unshuffled loader is an evaluation pass: read_once, unless asked otherwise
    with stoker.torch.DataLoader(ds, batch_size=10, shuffle=False) as dl:
        s = dl.reader.io_stats()
        assert s["read_once"] == 1 and s["filled_bytes"] == 0
    with stoker.torch.DataLoader(ds, batch_size=10) as dl:
        assert dl.reader.io_stats()["read_once"] == 1
    with stoker.torch.DataLoader(ds, batch_size=10, shuffle=True) as dl:
        assert dl.reader.io_stats()["read_once"] == 0
    with stoker.torch.DataLoader(ds, batch_size=10, shuffle=False, read_once=False) as dl:
        assert dl.reader.io_stats()["read_once"] == 0
    with stoker.torch.DataLoader(ds, batch_size=10, order="quasi") as dl:
        assert dl.reader.io_stats()["read_once"] == 0
