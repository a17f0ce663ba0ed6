"""stoker.pack over 2,400 inputs in 2 worker processes, slow enough to be killed mid-way
(test_writer.test_a_killed_pack_resumes_to_the_same_bytes). Argument: the output directory."""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import stoker  # noqa: E402

FIELDS = {"x": stoker.Ragged("float32", (None, 3)), "i": stoker.Scalar("int64"), "s": stoker.String()}


def make(i):
    time.sleep(0.001)
    if i % 211 == 5:
        raise ValueError(f"bad input {i}")
    if i % 7 == 3:
        return None
    one = {"x": np.full((i % 13, 3), i, np.float32), "i": i, "s": f"input {i}"}
    return [one, {**one, "i": -i}] if i % 5 == 1 else one


if __name__ == "__main__":
    print("packing", flush=True)  # imports done: the parent's kill timer starts here, whatever the load
    stoker.pack(make, range(2400), sys.argv[1], FIELDS, workers=2, records_per_shard=40, chunk=5, progress=False)
