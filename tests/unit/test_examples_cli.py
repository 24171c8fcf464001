"""pytorch/examples imagenet/main.py's command line as it is today (commit 77f55b9, 2025-08-25), every flag
with its meaning, and --no-accel ('disables accelerator'): the CPU, one process per node on --dist-url."""
import pytest
import torch

from hpc_imagenet.imagenet.config import ConfigError, batch as batches, parse_command
from hpc_imagenet.imagenet.run import distributed
from hpc_imagenet.launch import environment

# main.py's add_argument calls, in its order: the flag and a value (None: a switch)
MAIN_PY = [("-a", "resnet50"), ("-j", "3"), ("--epochs", "5"), ("--start-epoch", "2"), ("-b", "64"), ("--lr", "0.2"),
           ("--momentum", "0.8"), ("--wd", "5e-5"), ("-p", "7"), ("--resume", "x.pth"), ("-e", None),
           ("--pretrained", None), ("--world-size", "1"), ("--rank", "0"), ("--dist-url", "tcp://127.0.0.1:29500"),
           ("--dist-backend", "gloo"), ("--seed", "1"), ("--gpu", "0"), ("--no-accel", None),
           ("--multiprocessing-distributed", None), ("--dummy", None)]


def test_every_flag_of_todays_main_py_parses_with_its_meaning():
    argv = [word for flag, value in MAIN_PY for word in ((flag,) if value is None else (flag, value))]
    cfg = parse_command([*argv, "--print-config", "/data"], "ddp", launcher=environment.detect({})).settings
    assert (cfg.model.arch, cfg.data.workers, cfg.optim.epochs, cfg.optim.start_epoch) == ("resnet50", 3, 5, 2)
    assert (cfg.optim.lr, cfg.optim.momentum, cfg.optim.weight_decay, cfg.logging.print_freq) == (0.2, 0.8, 5e-5, 7)
    assert cfg.checkpoint.resume == "x.pth" and cfg.run.evaluate and cfg.model.pretrained and cfg.run.seed == 1
    assert (cfg.dist.world_size, cfg.dist.rank, cfg.dist.dist_backend, cfg.dist.gpu) == (1, 0, "gloo", 0)
    assert cfg.dist.no_accel and cfg.dist.multiprocessing_distributed and cfg.data.dummy
    assert cfg.batch.node_processes == 1 and cfg.batch.per_process == 64  # a CPU node: one process


def test_no_accel_chooses_the_cpu_and_one_process_per_node(tmp_path, monkeypatch):
    for gpu in range(4):
        (tmp_path / f"0000:0{gpu}:00.0").mkdir()
    monkeypatch.setattr(batches, "NVIDIA_GPUS", tmp_path)  # a node whose driver lists four GPUs
    node = dict(distributed=True, dist_url="tcp://h:1", multiprocessing_distributed=False, nodes=1,
                procs_per_node=None, launcher=environment.detect({}))
    assert batches.resolve(64, 4, **node).node_processes == 4
    assert batches.resolve(64, 4, **node, no_accel=True).node_processes == 1  # main.py: ngpus_per_node = 1
    # No GPU here (a mock in its place): --no-accel must not even ask CUDA for one.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: pytest.fail("--no-accel picked a GPU"))
    assert distributed.pick_device(0, no_accel=True) == torch.device("cpu")


def test_a_recipe_cannot_set_no_accel(tmp_path):
    config_file = tmp_path / "cpu.toml"
    config_file.write_text("[values]\nno_accel = true\n")
    with pytest.raises(ConfigError, match="no_accel"):
        parse_command(["--config", str(config_file), "--dummy"], "ddp", launcher=environment.detect({}))
