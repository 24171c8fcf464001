"""Gradient accumulation equals the large batch for a model without BatchNorm: in one process, and
under DDP over 2 real gloo ranks (no_sync on all but the last micro-batch) against one process."""
import gc

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from hpc_imagenet.imagenet.train.accumulation import accumulate

BATCH, STEPS = 8, 3


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 4 * 4, 5))


def _data(step):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(BATCH, 3, 6, 6, generator=g), torch.randint(0, 5, (BATCH,), generator=g)


def _train(model, micro_batches, rank=0, world=1):
    """STEPS SGD steps; each step's global batch is split over WORLD ranks, then MICRO_BATCHES."""
    opt = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    for step in range(STEPS):
        images, target = _data(step)
        mine = BATCH // world
        images, target = images[rank * mine:(rank + 1) * mine], target[rank * mine:(rank + 1) * mine]
        batches = list(zip(images.chunk(micro_batches), target.chunk(micro_batches)))
        opt.zero_grad()

        def forward_loss(x, y):
            out = model(x)
            return loss_fn(out, y), out, y
        accumulate(model, batches, forward_loss, lambda loss: loss.backward())
        opt.step()
    module = model.module if hasattr(model, "module") else model
    return [p.detach().clone() for p in module.parameters()]


def test_accumulated_micro_batches_equal_the_large_batch():
    whole = _train(_model(), 1)
    for got, want in zip(_train(_model(), 4), whole):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def _rank(rank, world, init_file, out):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        weights, allreduces = _train_ddp(rank, world)
        if rank == 0:
            out.put(([w.numpy() for w in weights], allreduces))
        # both ranks past every collective before the group goes: a rank tearing gloo down while its
        # peer still finishes the last asynchronous all-reduce aborted ('terminate called') under load
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _train_ddp(rank, world):
    """(weights, bucket all-reduces) of the DDP run. The DDP object and its reducer (which holds the Python
    comm hook and its last future) are collected before this returns, while the group and the interpreter are
    whole: a rank still aborted once in a loaded suite after _rank's barrier ('terminate called without an
    active exception' at the interpreter's exit), and the DDP object left to that exit was the one thing still
    holding gloo's work."""
    model = torch.nn.parallel.DistributedDataParallel(_model())
    calls = []
    model.register_comm_hook(None, lambda state, bucket: (calls.append(1), _allreduce(bucket))[1])
    weights = _train(model, 2, rank, world)
    del model
    gc.collect()
    return weights, len(calls)


def _allreduce(bucket):
    tensor = bucket.buffer().div_(dist.get_world_size())
    return dist.all_reduce(tensor, async_op=True).get_future().then(lambda fut: fut.value()[0])


def test_ddp_two_gloo_ranks_with_accumulation_equal_one_process(tmp_path):
    ctx = mp.get_context("spawn")  # fork would inherit torch's thread pools and can hang
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, 2, str(tmp_path / "store"), out)) for r in range(2)]
    for p in procs:
        p.start()
    weights, allreduces = out.get(timeout=120)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    for got, want in zip(weights, _train(_model(), 1)):
        torch.testing.assert_close(torch.from_numpy(got), want, rtol=1e-5, atol=1e-6)
    assert allreduces == STEPS  # one bucket all-reduce per optimizer step: no_sync held the first micro-batch
