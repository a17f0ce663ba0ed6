"""One rank of a distributed evaluation shaped like torchvision's references/classification/train.py
evaluate(): a model in eval mode over the evaluation loader, the batch sizes summed on each rank and
then across ranks with all_reduce (its utils.reduce_across_processes), compared with
len(data_loader.dataset). Run under torchrun (gloo, CPU):

    python3 -m torch.distributed.run --nproc_per_node 2 eval_child.py DATASET OUT.json

For each loader below (the default tail, and the README's evaluation loader: tail="partial", at two
batch sizes) rank 0 writes what evaluate() counted, each rank's batch sizes and a hash of every image each
rank saw, as one JSON document.
"""
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the package from the source tree

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import stoker.torch  # noqa: E402


def reduce_across_processes(val):
    """torchvision's references/classification/utils.py (on the CPU: gloo)."""
    t = torch.tensor(val)
    dist.barrier()
    dist.all_reduce(t)
    return t


def evaluate(model, data_loader):
    model.eval()
    num_processed_samples = 0
    sizes, seen = [], []
    with torch.inference_mode():
        for image, target in data_loader:
            output = model(image.float().flatten(1))
            assert output.shape[0] == image.shape[0]
            batch_size = image.shape[0]
            num_processed_samples += batch_size
            sizes.append(batch_size)
            images = image.contiguous().numpy()
            seen += [hashlib.sha1(images[i].tobytes()).hexdigest()[:16] for i in range(batch_size)]
    num_processed_samples = reduce_across_processes(num_processed_samples)
    return int(num_processed_samples), sizes, seen


def main():
    dataset, out = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.Linear(8 * 8 * 3, 5)
    result = {}
    for name, batch, tail in (("default", 32, None), ("partial", 32, "partial"), ("partial100", 100, "partial")):
        kw = {} if tail is None else {"tail": tail}
        # the README's evaluation loader (its transform left out: the test images are 8x8)
        val_loader = stoker.torch.DataLoader(dataset, batch_size=batch, num_workers=2, **kw)
        with val_loader:
            total, sizes, seen = evaluate(model, val_loader)
            gathered = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, {"sizes": sizes, "images": seen, "len": len(val_loader),
                                              "tail": val_loader.tail, "sampler": len(val_loader.sampler)})
            result[name] = {"counted": total, "dataset": len(val_loader.dataset), "ranks": gathered}
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
