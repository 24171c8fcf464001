"""Place the training process(es) of checked settings, run them, exit cleanly (hpc_imagenet.imagenet.run.train_command
comes first).

User mistakes found on the device (bad data, an unreachable master, a missing Apex) end with one line
on stderr and exit status 2; a peer lost in mid-collective (killed, node or network down) ends with one
line naming it and status 1; a preempted run exits 75 after saving its checkpoint; Ctrl-C exits 130.

A process that made a process group and fails with status 1 or 2 leaves with ``os._exit`` once its
line is out, skipping the interpreter's finalisation: two processes started with ``--dist-url`` on
bad data printed their line, destroyed their group and then both hung for good in the final garbage
collection (faulthandler: "Garbage-collecting", no Python frame), seen twice in full test runs on a
loaded machine. Finalisation freezes every other thread, and a C++ destructor run by that last
collection can wait on one of them. Only that last collection is skipped: run.json and TensorBoard are
closed by the run itself, and a checkpoint write in flight finishes first (``_leave``).

Where destroying the group itself can hang (``group.cleanup``: gloo before torch 2.10, seen with torch 2.6,
whose destructor joins a worker thread that waits for the interpreter lock the destructor holds), the group
is left to the system and every exit takes that same way out.
"""
from __future__ import annotations

import atexit
import logging
import os
import sys
import threading

import torch

from hpc_imagenet.launch import environment, launchers

from hpc_imagenet.imagenet import config
from hpc_imagenet.imagenet.model import network, precision
from hpc_imagenet.imagenet.process import group
from hpc_imagenet.imagenet.run import distributed
from hpc_imagenet.imagenet.train import checkpoint
from hpc_imagenet.imagenet.data import staging
from hpc_imagenet.imagenet.common import exit_codes, startup
from hpc_imagenet.imagenet.common.errors import DataError, one_line
from hpc_imagenet.imagenet.common.exit_codes import EXIT_INTERRUPTED, EXIT_LOST_PEER, EXIT_PREEMPTED, EXIT_USAGE

log = logging.getLogger(__name__)

USER_ERRORS = (config.ConfigError, DataError, network.ModelError, precision.PrecisionError,
               distributed.DistError, checkpoint.CheckpointError, environment.LaunchError, staging.StagingError)


def _setup_logging(primary: bool) -> None:
    logging.basicConfig(level=logging.INFO if primary else logging.WARNING, format="%(levelname)s: %(message)s",
                        force=True)


# set once this process has made a process group: its failures leave without finalisation
_group_made = False
_group_left = False  # the group was not destroyed (group.cleanup): the process leaves as _leave says


def _run(cfg: config.Settings, info: group.DistInfo) -> int:
    from hpc_imagenet.imagenet.run import build  # imported late: the spawning parent never needs it

    global _group_made, _group_left
    _setup_logging(info.is_primary)
    distributed.init(info, cfg.dist.dist_timeout, cfg.dist.collective_timeout)
    startup.mark("process group")
    _group_made = group.initialized()
    try:
        return _elastic_exit(build.run(build.build(cfg, info)))
    except Exception as e:
        hang = distributed.hang_message(e, info.rank, cfg.dist.collective_timeout)
        lost = hang if hang is not None else distributed.lost_peer_message(e, info.rank)
        if lost is None:
            raise
        if lost:  # "": another rank prints the line
            print(f"error: {lost}", file=sys.stderr, flush=True)  # not a traceback per rank
        return EXIT_LOST_PEER
    finally:
        _group_left = not group.cleanup()


def _elastic_exit(code: int) -> int:
    """A preempted trainer's status under its launcher (exit_codes.preempted_status; run.json says "preempted")."""
    return exit_codes.preempted_status() if code == EXIT_PREEMPTED else code


def _guarded(fn, *args) -> int:
    try:
        return fn(*args)
    except USER_ERRORS as e:
        print(f"error: {one_line(e)}", file=sys.stderr, flush=True)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED


def _leave(code: int) -> int:
    """CODE, or no return at all: a failed process that made a process group exits without the
    interpreter's finalisation (see the module docstring). What an ordinary exit does before it still
    happens, in its order: the non-daemon threads finish (a checkpoint write in flight), then the
    atexit handlers run (loader workers stopped, logs flushed)."""
    if _group_made and (code in (EXIT_USAGE, EXIT_LOST_PEER) or _group_left):
        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon:
                thread.join()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _spawned_worker(index: int, cfg: config.Settings, procs: int) -> None:
    code = _leave(_guarded(lambda: _run(cfg, distributed.for_spawned(cfg.dist, index, procs))))
    if code:
        sys.exit(code)


def _spawn_node(cfg: config.Settings) -> int:
    """pytorch/examples' node-level launch: one process per local GPU (1 on a CPU node); the
    settings' Batch already holds the per-process batch and workers."""
    procs, node = cfg.batch.node_processes, cfg.optim
    visible = 0 if cfg.dist.no_accel else torch.cuda.device_count()
    if cfg.dist.procs_per_node is None and visible and visible != procs:
        raise config.ConfigError(f"torch sees {visible} GPU(s) but the driver lists {procs}; "
                                 f"pass --procs-per-node {visible}")
    print(f"=> -b {node.batch_size} and -j {cfg.data.workers} are per node on this launch: each of the "
          f"{procs} process(es) gets batch {cfg.batch.per_process} and {cfg.batch.workers} loader worker(s)",
          flush=True)
    if procs == 1:
        return _run(cfg, distributed.for_spawned(cfg.dist, 0, 1))
    try:
        torch.multiprocessing.spawn(_spawned_worker, args=(cfg, procs), nprocs=procs, join=True)
    except torch.multiprocessing.ProcessExitedException as e:
        return e.exit_code if e.exit_code and e.exit_code > 0 else 1
    except torch.multiprocessing.ProcessRaisedException as e:
        print(f"error: a training process failed: {one_line(e)}", file=sys.stderr)
        return 1
    return 0


def start(cfg: config.Settings, launcher: environment.ClusterEnvironment) -> int:
    """Run the training process(es) of validated settings, whose batch was resolved for LAUNCHER;
    returns the exit status."""
    return _leave(_guarded(_start, cfg, launcher))


def _start(cfg: config.Settings, launcher: environment.ClusterEnvironment) -> int:
    if cfg.batch.launcher == launchers.DIST_URL:
        return _spawn_node(cfg)
    return _run(cfg, distributed.from_environment(cfg, launcher))
