"""examples/pack_tokens.py, pack_detection.py and pack_audio.py, run small: what they pack reads back."""
import os
import subprocess
import sys
import wave

import numpy as np
import pytest

import stoker

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(script, *args):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", script), *map(str, args)],
                       capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    return p.stdout


def test_tokens_from_a_bin_file_are_its_windows(tmp_path):
    T = 16
    toks = np.random.default_rng(3).integers(0, 50257, 10 * T * 256 + 5, dtype=np.uint16)
    header = np.zeros(256, np.int32).tobytes()
    (tmp_path / "train.bin").write_bytes(header + toks.tobytes())
    out = run("pack_tokens.py", tmp_path / "ds", "--bin", tmp_path / "train.bin", "--header-bytes", 1024,
              "--T", T, "--workers", 2, "--read", 3, "--batch-size", 8)
    assert "shuffled batches [8, 17] uint16" in out
    n = (len(toks) - 1) // T
    with stoker.Reader(tmp_path / "ds", batch_size=64, order="shuffle", seed=5, tail="partial") as r:
        assert r.num_records == n and r.metadata["T"] == T
        seen = set()
        for b in r:
            for j, rec in enumerate(b.records):
                w = int(rec)
                assert (b["tokens"][j] == toks[w * T:w * T + T + 1]).all()
                seen.add(w)
        assert seen == set(range(n))  # a full shuffle: every window once an epoch


def test_detection_boxes_and_labels_come_back_padded(tmp_path):
    out = run("pack_detection.py", tmp_path / "ds", "--n", 60, "--read", 2)
    assert "batch 1: image [8, " in out
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    try:
        import pack_detection
    finally:
        sys.path.pop(0)
    with stoker.Reader(tmp_path / "ds", batch_size=10, ragged="pad") as r:
        assert r.classes == pack_detection.CLASSES
        for b in r:
            for j, rec in enumerate(b.records):
                s = pack_detection.sample(int(rec))
                k = b.lengths["boxes"][j, 0]
                assert k == len(s["boxes"]) == b.lengths["labels"][j, 0]
                assert (b["boxes"][j, :k] == s["boxes"]).all() and (b["labels"][j, :k] == s["labels"]).all()
                h, w = s["image"].shape[:2]
                assert (b["image"][j, :h, :w] == s["image"]).all() and b["image_id"][j] == int(rec)


def test_audio_from_wav_files_with_a_bad_one_listed(tmp_path):
    wavs = tmp_path / "wavs"
    wavs.mkdir()
    clips = {}
    for i in range(5):
        a = (np.arange(1000 + 300 * i) % 50 * 100 - 2500).astype(np.int16)
        with wave.open(str(wavs / f"c{i}.wav"), "wb") as w:
            w.setnchannels(1), w.setsampwidth(2), w.setframerate(8000)
            w.writeframes(a.tobytes())
        (wavs / f"c{i}.txt").write_text(f"clip number {i}")
        clips[f"clip number {i}"] = a
    (wavs / "broken.wav").write_bytes(b"RIFF not really")
    out = run("pack_audio.py", tmp_path / "ds", "--wav-dir", wavs, "--batch-size", 5)
    assert "5 clips" in out and "1 skipped" in out
    skipped = (tmp_path / "ds" / "skipped.tsv").read_text().splitlines()
    assert len(skipped) == 2 and "broken.wav" in skipped[1]
    with stoker.Reader(tmp_path / "ds", batch_size=5) as r:
        b = next(iter(r))
        for j in range(5):
            assert (b["audio"][j] == clips[b["transcript"][j]]).all() and b["sample_rate"][j] == 8000


def test_audio_synthetic(tmp_path):
    out = run("pack_audio.py", tmp_path / "ds", "--synthetic", 20)
    assert "20 clips" in out
