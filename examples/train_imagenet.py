#!/usr/bin/env python3
"""examples/train_imagenet.py - ImageNet-style classification training fed by stoker.torch.DataLoader.

    pack --size 256 imagenet/train packed/train && pack --size 256 imagenet/val packed/val
    .venv/bin/python examples/train_imagenet.py packed --model resnet50 --epochs 90 --batch-size 256
    .venv/bin/python -m torch.distributed.run --nproc_per_node 8 examples/train_imagenet.py packed \
        --output-dir run1                                                       # DDP (torchrun)
    .venv/bin/python -m torch.distributed.run --nproc_per_node 8 examples/train_imagenet.py packed \
        --output-dir run1 --resume run1/checkpoint.pth

DATA holds two packed datasets, DATA/train and DATA/val (or give --train and --val).
A torchvision model trained from scratch with SGD (momentum, weight decay), a cosine
learning rate per step, label smoothing, AMP on a GPU and DistributedDataParallel
under torchrun (NCCL on GPUs, gloo on CPUs). The loaders are stoker's: the training
one random-resized-crops, flips and normalises (on the GPU's stream with a GPU, on the
reader's threads without one), the evaluation one centre-crops and reads every record
exactly once across ranks (tail="partial": no padding to discard). Every epoch ends with
an evaluation and a line splitting the time between waiting for data (fetch) and the
rest of the step.

Checkpoints (--output-dir, rank 0, written atomically) hold the model, optimizer,
scheduler, scaler, epoch and the training loader's state_dict(), every
--checkpoint-every steps and at each epoch's end, so --resume continues with the very
batch that came next. --log-batches FILE appends one line per step (epoch, step, a
hash of the batch, the loss) and --crash-at-step N kills the process (SIGKILL) after
step N: together they show that a resumed run reads what an uninterrupted one reads.

Run it with the Python of the README's venv (.venv/bin/python: Debian's python3-torch
and the installed package), or from the tree with /usr/bin/python3 and
PYTHONPATH=python STOKER_LIB=build/reader/libstoker.so.
"""
import argparse
import hashlib
import math
import os
import signal
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torchvision
    import stoker.torch
except ImportError as e:  # another Python than the venv's: say how to run it
    sys.exit(f"train_imagenet: {e}: run it with the README's venv, .venv/bin/python examples/train_imagenet.py\n"
             "(made by: /usr/bin/python3 -m venv --system-site-packages .venv && .venv/bin/pip install ./python)")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", nargs="?", help="folder with the packed datasets train/ and val/")
    ap.add_argument("--train", help="packed training set (default DATA/train)")
    ap.add_argument("--val", help="packed evaluation set (default DATA/val)")
    ap.add_argument("--model", default="resnet50", help="a torchvision classification model (default resnet50)")
    ap.add_argument("--epochs", type=int, default=90)
    ap.add_argument("--batch-size", type=int, default=256, help="per process")
    ap.add_argument("--image-size", type=int, default=224, help="training crop; evaluation centre crop")
    ap.add_argument("--workers", type=int, default=None, help="the loader's threads (default: the CPUs, up to 8)")
    ap.add_argument("--lr", type=float, default=0.1, help="for a global batch of 256, scaled linearly")
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=1e-4)
    ap.add_argument("--label-smoothing", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0, help="model init and the data order")
    ap.add_argument("--device", default="auto", help="auto (cuda when there is one), cpu or cuda")
    ap.add_argument("--no-amp", action="store_true", help="float32 on the GPU too")
    ap.add_argument("--output-dir", help="where checkpoint.pth goes")
    ap.add_argument("--checkpoint-every", type=int, default=1000, help="steps between checkpoints")
    ap.add_argument("--resume", help="a checkpoint.pth to continue from")
    ap.add_argument("--print-every", type=int, default=50)
    ap.add_argument("--log-batches", help="append 'epoch step batch-hash loss' per step to this file")
    ap.add_argument("--crash-at-step", type=int, default=0, help="SIGKILL this process after that step (a test)")
    a = ap.parse_args()
    if not (a.train and a.val) and not a.data:
        ap.error("give DATA (with train/ and val/) or --train and --val")
    a.train = a.train or os.path.join(a.data, "train")
    a.val = a.val or os.path.join(a.data, "val")
    return a


def setup_distributed(a):
    """torchrun sets WORLD_SIZE, RANK and LOCAL_RANK; one process otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    cuda = torch.cuda.is_available() if a.device == "auto" else a.device.startswith("cuda")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world > 1:
        dist.init_process_group("nccl" if cuda else "gloo")
    return device, (dist.get_rank() if world > 1 else 0), world


def batch_hash(image, target):
    h = hashlib.sha1(image.detach().cpu().contiguous().numpy().tobytes())
    h.update(target.cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def save_checkpoint(path, state):
    tmp = path + ".tmp"
    torch.save(state, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)  # a kill at any moment leaves the old checkpoint or the new one


def evaluate(model, loader, criterion, device, amp, world):
    model.eval()
    sums = torch.zeros(4, dtype=torch.float64, device=device)  # loss, top-1, top-5, samples
    with torch.no_grad():
        for image, target in loader:
            if not target.numel():  # tail="partial" across ranks: a rank's last batch may be empty
                continue
            image, target = image.to(device, non_blocking=True), target.to(device, non_blocking=True)
            with torch.autocast(device.type, enabled=amp):
                out = model(image)
            k = min(5, out.shape[1])
            top = out.topk(k, 1).indices
            sums += torch.stack([criterion(out.float(), target).double() * target.numel(),
                                 (top[:, 0] == target).sum().double(),
                                 (top == target[:, None]).any(1).sum().double(),
                                 torch.tensor(float(target.numel()), dtype=torch.float64, device=device)])
    if world > 1:
        dist.all_reduce(sums)
    loss, top1, top5, n = sums.tolist()
    model.train()
    return loss / max(n, 1), 100 * top1 / max(n, 1), 100 * top5 / max(n, 1), int(n)


def main():
    a = parse_args()
    device, rank, world = setup_distributed(a)
    amp = device.type == "cuda" and not a.no_amp
    torch.manual_seed(a.seed)
    say = print if rank == 0 else (lambda *x, **k: None)

    on = device if device.type == "cuda" else None  # CUDA: the reader uploads and transforms on the GPU
    train_loader = stoker.torch.DataLoader(
        a.train, batch_size=a.batch_size, shuffle=True, drop_last=True, num_workers=a.workers, seed=a.seed,
        transform=stoker.Transform.imagenet(train=True, size=a.image_size), device=on)
    val_loader = stoker.torch.DataLoader(
        a.val, batch_size=a.batch_size, num_workers=a.workers, tail="partial",
        transform=stoker.Transform.imagenet(train=False, size=a.image_size), device=on)
    classes = len(train_loader.dataset.classes) or 1000

    model = torchvision.models.get_model(a.model, weights=None, num_classes=classes).to(device)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.index is not None
                                                    else None)
    criterion = nn.CrossEntropyLoss(label_smoothing=a.label_smoothing)
    lr = a.lr * a.batch_size * world / 256
    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]  # biases and norms
    optimizer = torch.optim.SGD([{"params": decay, "weight_decay": a.weight_decay},
                                 {"params": no_decay, "weight_decay": 0.0}], lr=lr, momentum=a.momentum)
    steps = a.epochs * len(train_loader)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))
    scaler = torch.cuda.amp.GradScaler(enabled=amp)

    start_epoch, step = 0, 0
    if a.resume:
        ck = torch.load(a.resume, map_location="cpu")
        (model.module if world > 1 else model).load_state_dict(ck["model"])
        optimizer.load_state_dict(ck["optimizer"])
        scheduler.load_state_dict(ck["scheduler"])
        scaler.load_state_dict(ck["scaler"])
        train_loader.load_state_dict(ck["loader"])  # the next iter() continues with the batch that came next
        start_epoch, step = ck["epoch"], ck["step"]
        say(f"resumed from {a.resume}: epoch {start_epoch}, step {step}")
    say(f"{a.model}: {classes} classes, {world} process(es) on {device}, AMP {'on' if amp else 'off'}; train "
        f"{len(train_loader.dataset)} records, {len(train_loader)} steps/epoch; val {len(val_loader.dataset)}",
        flush=True)

    def checkpoint(epoch):
        if a.output_dir and rank == 0:
            save_checkpoint(os.path.join(a.output_dir, "checkpoint.pth"), {
                "model": (model.module if world > 1 else model).state_dict(), "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(), "epoch": epoch, "step": step,
                "loader": train_loader.state_dict(), "args": vars(a)})

    if a.output_dir and rank == 0:
        os.makedirs(a.output_dir, exist_ok=True)
    log = open(a.log_batches, "a") if a.log_batches and rank == 0 else None
    model.train()
    for epoch in range(start_epoch, a.epochs):
        train_loader.sampler.set_epoch(epoch)  # keeps a resumed mid-epoch position
        fetch = compute = saving = 0.0
        n_steps = images = 0
        it = iter(train_loader)
        t_end = time.perf_counter()
        while True:
            try:
                image, target = next(it)  # blocks only while the loader is behind
            except StopIteration:
                break
            t_got = time.perf_counter()
            image, target = image.to(device, non_blocking=True), target.to(device, non_blocking=True)
            with torch.autocast(device.type, enabled=amp):
                loss = criterion(model(image), target)
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()
            step += 1
            if log or step % a.print_every == 0:
                lv = loss.item()  # a device sync: only when it is printed or logged
                if log:
                    log.write(f"{epoch} {step} {batch_hash(image, target)} {lv:.6f}\n")
                    log.flush()
                if step % a.print_every == 0:
                    say(f"epoch {epoch} step {step} loss {lv:.4f} lr {scheduler.get_last_lr()[0]:.4f}", flush=True)
            now = time.perf_counter()
            fetch += t_got - t_end
            compute += now - t_got
            n_steps += 1
            images += target.numel()
            if step % a.checkpoint_every == 0:
                checkpoint(epoch)
                saving += time.perf_counter() - now
            if step == a.crash_at_step:
                os.kill(os.getpid(), signal.SIGKILL)
            t_end = time.perf_counter()  # what follows next() is the step's, checkpoints apart
        loss, top1, top5, n = evaluate(model, val_loader, criterion, device, amp, world)
        wall = fetch + compute
        say(f"epoch {epoch}: {n_steps} steps, fetch {1e3 * fetch / max(n_steps, 1):.2f} ms + step "
            f"{1e3 * compute / max(n_steps, 1):.2f} ms per step ({100 * fetch / wall if wall else 0:.1f}% waiting "
            f"for data), {images * world / wall if wall else 0:.0f} images/s"
            + (f", checkpoints {saving:.1f} s" if saving else "")
            + f"; eval on {n} records: loss {loss:.4f}, top-1 {top1:.2f}%, top-5 {top5:.2f}%", flush=True)
        checkpoint(epoch + 1)
    if log:
        log.close()
    train_loader.close()
    val_loader.close()
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
