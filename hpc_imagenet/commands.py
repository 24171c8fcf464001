"""The console scripts that need more than a module's ``main`` (pyproject.toml's ``[project.scripts]``).

Training: the stop-signal handler goes in before the slow imports (torch), as in the entry scripts
``imagenet/imagenet_*.py``, so that a preemption signal during start-up is not lost. The benchmark: a
``kill`` stops it as Ctrl-C does, as ``python -m hpc_imagenet.harness.bench`` does.
"""
import signal


def _train(variant: str) -> int:
    from hpc_imagenet.imagenet.process import preemption

    preemption.install_early()
    from hpc_imagenet.imagenet.run.train_command import main

    return main(variant)


def train() -> int:
    """``hpc-imagenet-train --variant nd|dp|ddp|amp ...``: ``python -m hpc_imagenet.imagenet``."""
    return _train("any")


def ddp() -> int:
    return _train("ddp")


def ddp_apex() -> int:
    return _train("amp")


def dp() -> int:
    return _train("dp")


def nd() -> int:
    return _train("nd")


def bench() -> int:
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    from hpc_imagenet.harness.bench import main

    return main()
