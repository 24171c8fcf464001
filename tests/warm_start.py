"""Engine runs forked from a process that has already imported torch, torchvision and the engine.

A fresh interpreter spends about 3.5 CPU seconds importing torch and torchvision (torchvision's ops
import torch._dynamo) before the engine reads its first flag; on 2 cores that was most of what a
small engine test cost. Here each run is forked from multiprocessing's fork server, started once
per pytest worker with those modules preloaded. The run is still a process of its own: its own
argv, environment, working folder, exit status and captured output, the entry script run as
``__main__`` (``-m MODULE`` as a module); only the imports are shared. A test about start-up itself
(how soon a bad flag fails, what is imported before the checks) starts a fresh interpreter with
``tests.helpers.python`` instead.

Written here rather than taken from a library: pytest-xdist and the fork-server libraries we know
preload for tests or tasks, not for running a command line as ``__main__`` with its own streams.
"""
from __future__ import annotations

import atexit
import io
import multiprocessing
import multiprocessing.forkserver
import os
import runpy
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Dict, List, Optional

from tests.helpers import PYTHON, REPO, child_env

PRELOAD = ["torch", "torchvision", "hpc_imagenet.imagenet.run.processes"]  # what an entry script imports first
_context: Optional[multiprocessing.context.BaseContext] = None


def warm_python(*args: object, timeout: float = 300, env: Optional[Dict[str, str]] = None,
                cwd: Path = REPO) -> subprocess.CompletedProcess:
    """``python ARGS`` (a script path or ``-m MODULE``, then its arguments), forked warm; as
    tests.helpers.python, it returns the CompletedProcess with stdout and stderr as text."""
    argv = [str(arg) for arg in args]
    with tempfile.TemporaryDirectory(prefix="warm-") as tmp:
        out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
        proc = _fork_server().Process(target=_run, args=(argv, env or child_env(), str(cwd), str(out), str(err)))
        proc.start()
        proc.join(timeout)
        if proc.exitcode is None:
            proc.kill()
            proc.join()
            raise subprocess.TimeoutExpired([PYTHON, *argv], timeout, _read(out), _read(err))
        return subprocess.CompletedProcess([PYTHON, *argv], proc.exitcode, _read(out), _read(err))


def _fork_server() -> multiprocessing.context.BaseContext:
    """The fork-server context; its server starts on the first run, with torch's threads at 1 as the
    test children have them (torch reads OMP_NUM_THREADS when it is imported)."""
    global _context
    if _context is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        threads = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = "1"
        try:
            multiprocessing.forkserver.ensure_running()
        finally:
            if threads is None:
                del os.environ["OMP_NUM_THREADS"]
            else:
                os.environ["OMP_NUM_THREADS"] = threads
        _context = context
    return _context


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _run(argv: List[str], env: Dict[str, str], cwd: str, out: str, err: str) -> None:
    """In the forked child: become ``python ARGV`` in CWD with ENV, output to OUT and ERR."""
    _redirect(1, out)
    _redirect(2, err)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    code = _main(argv)
    sys.exit(code)


def _redirect(fd: int, path: str) -> None:
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(handle, fd)
    os.close(handle)


def _main(argv: List[str]) -> object:
    """What the interpreter does with ARGV: run it, print an uncaught exception, run atexit."""
    try:
        if argv[0] == "-m":
            sys.argv = argv[1:]
            sys.path.insert(0, os.getcwd())
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = argv
            sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
            runpy.run_path(argv[0], run_name="__main__")
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    except BaseException:  # the interpreter's own way: the traceback, exit 1
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    return code
