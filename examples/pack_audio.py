#!/usr/bin/env python3
"""Variable-length audio clips with a transcript: a speech-recognition set.

    .venv/bin/python examples/pack_audio.py OUT --wav-dir DIR     # every DIR/*.wav (16-bit PCM, mono) and its DIR/*.txt transcript
    .venv/bin/python examples/pack_audio.py OUT --synthetic 500   # clips made here (tones of random length), no data needed

Fields: audio i16[*] (samples), sample_rate i32, transcript (a string: read back as str). The reader gives a
batch's clips as a list, or with ragged="pad" one [B, longest] array and batch.lengths["audio"], which is what a
CTC loss takes. A .wav that cannot be read is listed in OUT/skipped.tsv with the reason and the run goes on.
"""
import argparse
import os
import sys
import wave

try:
    import numpy as np
    import stoker
except ImportError as e:  # another Python than the venv's: say how to run it
    sys.exit(f"pack_audio: {e}: run it with the README's venv, .venv/bin/python examples/pack_audio.py\n"
             "(made by: /usr/bin/python3 -m venv --system-site-packages .venv && .venv/bin/pip install ./python)")

FIELDS = {"audio": stoker.Ragged("int16", (None,)), "sample_rate": stoker.Scalar("int32"),
          "transcript": stoker.String()}
WORDS = "the quick brown fox jumps over a lazy dog".split()


def from_wav(path):
    with wave.open(path, "rb") as w:
        if w.getsampwidth() != 2 or w.getnchannels() != 1:
            raise ValueError(f"{w.getsampwidth() * 8}-bit, {w.getnchannels()} channels: 16-bit mono only")
        audio = np.frombuffer(w.readframes(w.getnframes()), "<i2").copy()
        rate = w.getframerate()
    txt = os.path.splitext(path)[0] + ".txt"
    with open(txt, encoding="utf-8") as f:
        return {"audio": audio, "sample_rate": rate, "transcript": f.read().strip()}


def synthetic(i):
    rng = np.random.default_rng(i)
    rate = 16000
    n = int(rng.integers(rate // 4, 2 * rate))
    t = np.arange(n) / rate
    audio = (8000 * np.sin(2 * np.pi * rng.uniform(200, 800) * t)).astype(np.int16)
    words = rng.choice(WORDS, int(rng.integers(1, 8)))
    return {"audio": audio, "sample_rate": rate, "transcript": " ".join(words)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--wav-dir")
    src.add_argument("--synthetic", type=int, metavar="N")
    ap.add_argument("--batch-size", type=int, default=8)
    a = ap.parse_args()
    if a.wav_dir:
        inputs = sorted(os.path.join(a.wav_dir, f) for f in os.listdir(a.wav_dir) if f.endswith(".wav"))
        s = stoker.pack(from_wav, inputs, a.out, FIELDS, mode="thread")  # wave and numpy: mostly I/O
    else:
        s = stoker.pack(synthetic, range(a.synthetic), a.out, FIELDS)
    print(f"pack_audio: {s['records']:,} clips into {a.out}, {s['skipped']} skipped (see skipped.tsv)")
    with stoker.Reader(a.out, batch_size=a.batch_size, order="shuffle", seed=0, ragged="pad") as r:
        b = next(iter(r))
        print(f"batch: audio {list(b['audio'].shape)}, lengths {b.lengths['audio'][:, 0].tolist()}, "
              f"first transcript {b['transcript'][0]!r}")


if __name__ == "__main__":
    main()
