"""The chain's batch files and their submission: one per stage, each with the site's options.

Training is the batch file ``hpc_imagenet.slurm.generate`` writes for the given options (``render``), with DATA the
prepared shards and LOG_DIR the chain's run folder. Every other stage is that spec's directives,
settings and software setup (``render_step``) on one node, running ``python -m hpc_imagenet.slurm.jobchain.tasks``
(the report: the harness's ``python -m hpc_imagenet.harness.jobchain_report``) as one job step (inside the container
where there is one). Each job depends on the one before
(``afterok``; the report ``afterany`` on training and export) with ``--kill-on-invalid-dep=yes``, so
when a stage fails SLURM cancels the rest rather than leaving them pending forever.

A resubmission starts at the first stage that is not done (only the unfinished tasks of the prepare
array) and submits everything after it again.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from hpc_imagenet.imagenet.common import checkout, files
from hpc_imagenet.imagenet.data import DEFAULT_SHARD_MB
from hpc_imagenet.slurm import client, containers
from hpc_imagenet.slurm.generate import CPUS_PER_PROCESS, JobSpec, render, render_step

from hpc_imagenet.slurm.jobchain import state as st
from hpc_imagenet.slurm.jobchain.state import ChainError, Layout

REPO = checkout.root() or Path.cwd()  # the checkout whose entry scripts the tasks run


@dataclass(frozen=True)
class Chain:
    """One chain: its inputs, the training job's spec and the prepare array's shape."""
    archives: Path
    layout: Layout
    spec: JobSpec  # the training job, as hpc_imagenet.slurm.generate's options gave it
    prepare_tasks: int = 8
    prepare_workers: int = 8
    prepare_time: str = "4:00:00"
    shard_mb: float = DEFAULT_SHARD_MB
    tag: str = "jobchain"

    @property
    def eval_args(self) -> List[str]:
        """The training flags an evaluation of the run's weights needs (model, sizes, recipe)."""
        return ["-a", self.spec.arch, "-b", str(self.spec.batch_size), "--workers", str(self.spec.workers),
                *self.spec.train_args]


def with_mounts(spec: JobSpec, archives: Path, out: Path) -> JobSpec:
    """SPEC with the archives and the output folder mounted in its container (where it has one)."""
    if not spec.container:
        return spec
    if spec.resolved_runtime == "charliecloud":
        # ch-run binds onto the image's /mnt/N (hpc_imagenet/slurm/containers.py), so the stages' host paths are not the
        # container's; the training file generated alone maps them
        raise ChainError("--container-runtime charliecloud: the chain's stages name host paths, which ch-run "
                         "binds under /mnt/N; use apptainer, pyxis or podman-hpc for the chain, or run "
                            "the training file of python -m hpc_imagenet.slurm.generate in Charliecloud")
    extra = [str(p) for p in (archives, out) if str(p) not in spec.container_mounts]
    return replace(spec, container_mounts=(*spec.container_mounts, *extra))


def _step_spec(chain: Chain, name: str, cpus: int, time: str, gpus: int = 0, array: bool = False) -> JobSpec:
    pattern = "%A_%a" if array else "%j"
    return replace(chain.spec, name=f"{chain.spec.name}-{name}", nodes=1, gpus_per_node=gpus, tasks_per_node=1,
                   procs_per_node=None, cpus_per_task=cpus, variant="nd", launcher="srun", requeue=False, sweep=(),
                   time=time, output=str(chain.layout.logs / f"{name}-{pattern}.out"), error=None, stage_dir=None,
                   data=str(chain.layout.data),
                   train_args=(), command=())


TASKS = "hpc_imagenet.slurm.jobchain.tasks"
# The report stage is the harness's command: rendered here as a command line, never imported (slurm/ sits
# below results/)
REPORT = "hpc_imagenet.harness.jobchain_report"


def _task_line(spec: JobSpec, stage: str, command: Sequence[str]) -> List[str]:
    """The job step that runs the stage's COMMAND (python's arguments; in the container, where the spec has one)."""
    runtime = spec.resolved_runtime
    flags, inside = containers.wrap(runtime, "srun", spec.gpus_per_node > 0) if runtime else ("", "")
    srun = " ".join(x for x in ('srun --ntasks=1 --cpus-per-task="$SLURM_CPUS_PER_TASK"', flags, inside) if x)
    return [f"# the {stage} stage of python -m hpc_imagenet.slurm.jobchain (its marker says how it went)",
            f'{srun} "$PYTHON" {shlex.join(command)}']


def scripts(chain: Chain) -> Dict[str, str]:
    """Each stage's batch file text."""
    c, w, out = chain, str(chain.prepare_workers), str(chain.layout.out)
    cpu = c.spec.cpus_per_task or CPUS_PER_PROCESS
    gpus = 1 if c.spec.gpus_per_node else 0

    def task(stage: str, *args: str) -> List[str]:
        return ["-m", TASKS, stage, out, *args]
    steps = {
        "plan": (_step_spec(c, "plan", c.prepare_workers, "1:00:00"),
                 task("plan", "--archives", str(c.archives), "--workers", w, "--shard-size", str(c.shard_mb))),
        "prepare": (_step_spec(c, "prepare", c.prepare_workers, c.prepare_time, array=True),
                    task("convert", "--tasks", str(c.prepare_tasks), "--workers", w)),
        "check": (_step_spec(c, "check", c.prepare_workers, "2:00:00"), task("check", "--workers", w)),
        "evaluate": (_step_spec(c, "evaluate", cpu, "1:00:00", gpus), task("evaluate", "--", *c.eval_args)),
        "export": (_step_spec(c, "export", 1, "0:30:00"), task("export")),
        "report": (_step_spec(c, "report", 1, "0:30:00"), ["-m", REPORT, out, "--tag", c.tag]),
    }
    texts = {name: render_step(spec, _task_line(spec, name, command)) for name, (spec, command) in steps.items()}
    train = replace(c.spec, data=str(c.layout.data), output=str(c.layout.logs / "train-%j.out"), error=None)
    texts["train"] = render(train)
    return {name: texts[name] for name in st.STAGES}


def _dependency(name: str, ids: Dict[str, str]) -> Optional[str]:
    """The stage's dependency on the jobs submitted in this pass (none on stages already done)."""
    if name == "report":
        after = [ids[s] for s in ("train", "export") if s in ids]
        return f"afterany:{':'.join(after)}" if after else None
    before = st.STAGES[st.STAGES.index(name) - 1] if name != "plan" else None
    return f"afterok:{ids[before]}" if before in ids else None


def sbatch_args(chain: Chain, name: str, ids: Dict[str, str], tasks: Sequence[int]) -> List[str]:
    args = ["--kill-on-invalid-dep=yes"]
    dep = _dependency(name, ids)
    if dep:
        args.append(f"--dependency={dep}")
    if name == "prepare":
        args.append(f"--array={_ranges(tasks)}")
    if name == "train":
        args.append(f"--export=ALL,LOG_DIR={chain.layout.run}")
    return args


def _ranges(tasks: Sequence[int]) -> str:
    """0,1,2,5 -> 0-2,5 (sbatch --array's form)."""
    out, start = [], None
    for i, t in enumerate(tasks):
        if start is None:
            start = t
        if i == len(tasks) - 1 or tasks[i + 1] != t + 1:
            out.append(f"{start}-{t}" if t != start else str(t))
            start = None
    return ",".join(out)


# ---------------------------------------------------------------- where to start

def resume_point(chain: Chain, state: Optional[dict]) -> tuple:
    """(first stage to submit, the prepare tasks to run); (None, []) when every stage is done."""
    every = list(range(chain.prepare_tasks))
    if state is None:
        return "plan", every
    now = st.stages(chain.layout, state)
    running = [s for s in now if s.state == "running" or s.state.startswith("pending")]
    if running:
        raise ChainError(f"the chain is still going (stage {running[0].name}: {running[0].state}); see "
                         f"`python -m hpc_imagenet.slurm.jobchain status {chain.layout.out}`, or cancel it first")
    first = next((s.name for s in now if s.state != "done"), None)
    if first == "prepare" and state.get("prepare_tasks") == chain.prepare_tasks:
        every = [t for t in every if (st.read_marker(chain.layout.marker("prepare", t)) or {}).get("status") != "done"]
    return first, every


def submit(chain: Chain, argv: Sequence[str], dry_run: bool = False, print_=print) -> Optional[dict]:
    """Submit the chain from its resume point; returns the new state (None for a dry run)."""
    layout = chain.layout
    old = st.load(layout)
    first, tasks = resume_point(chain, old)
    if first is None:
        print_(f"every stage is done; nothing to submit (see {layout.report})")
        return old
    texts = scripts(chain)
    names = st.STAGES[st.STAGES.index(first):]
    if not dry_run:
        files.make_dirs(layout.logs)  # SLURM cannot start a job whose output folder is missing
    if old and not dry_run:  # jobs of these stages still queued behind a failed one would never run
        client.cancel([old["jobs"][n]["id"] for n in names if n in old["jobs"]])
    ids, submitted = _submit_stages(chain, names, texts, tasks, dry_run, print_)
    if dry_run:
        return None
    jobs = {**(old["jobs"] if old else {}), **submitted}
    state = {"schema": 1, "archives": str(chain.archives), "command": list(argv), "epochs": chain.spec.epochs,
             "prepare_tasks": chain.prepare_tasks, "jobs": jobs, "cancelled": False}
    st.save(layout, state)
    print_(f"submitted {', '.join(f'{n} {ids[n]}' for n in names)}; follow it with "
           f"`python -m hpc_imagenet.slurm.jobchain status {layout.out}`")
    return state


def _submit_stages(chain: Chain, names: Sequence[str], texts: Dict[str, str], tasks: Sequence[int], dry_run: bool,
                   print_) -> tuple:
    """sbatch each stage of NAMES (print only, for a dry run); (their job ids, their state entries). When
    sbatch refuses one, the jobs this pass submitted are cancelled: a chain is submitted whole or not at all."""
    layout, ids, jobs = chain.layout, {}, {}
    for name in names:
        script = layout.jobs / f"{name}.sh"
        args = sbatch_args(chain, name, ids, tasks)
        print_(f"sbatch {shlex.join(args)} {script}")
        if dry_run:
            ids[name] = f"<{name}>"
            continue
        files.write_text(script, texts[name])
        try:
            ids[name] = client.submit(script, ["--chdir", str(REPO), *args], cwd=REPO)
        except client.SlurmError:
            client.cancel(list(ids.values()))
            raise
        log = f"{name}-{ids[name]}.out" if name != "prepare" else f"prepare-{ids[name]}_*.out"
        jobs[name] = {"id": ids[name], "log": str(layout.logs / log),
                      **({"tasks": list(tasks)} if name == "prepare" else {})}
    return ids, jobs


def cancel(layout: Layout, print_=print) -> int:
    state = st.load(layout)
    if state is None:
        raise ChainError(f"no chain in {layout.out} (no {st.STATE}); pass the output folder of a submitted chain")
    ids = [job["id"] for job in state["jobs"].values()]
    client.cancel(ids)
    state["cancelled"] = True
    st.save(layout, state)
    print_(f"cancelled jobs {', '.join(ids)}; run the same submit command again to resume")
    return 0
