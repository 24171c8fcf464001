"""Records as types: one frozen dataclass per kind's point and metrics, one :class:`Record` around them.

A record is read from JSON once (:func:`from_dict`, called by the loaders of
:mod:`hpc_imagenet.harness.core.records`) and from then on read by attribute: ``r.metrics.images_per_s``,
``r.point.batch_size``, ``r.environment.gpu_name``, and the derived facts defined here once
(``r.world_size``, ``r.nodes``, ``r.profiled``, ``r.on_gpu``). A field a record lacks reads as None.
The metrics classes are also the schema :func:`hpc_imagenet.harness.core.records.validate` checks: a field typed
:data:`Req` must be a number in every ok record of its kind, one typed :data:`Num` must be a number
where present.

Each of the harness's kinds is declared here once (:func:`hpc_imagenet.harness.core.registry.declare`, at the end of the
classes): its point and metrics classes, the units of its new metric names and the report section that
draws it; a study declares its own kinds the same way.

The JSON on disk is unchanged: ``Record.raw`` keeps the object as read, for the report's "as
recorded" tables and for the runners' tests, which read records as dicts.
"""
# No ``from __future__ import annotations``: required() reads the evaluated Annotated markers.

from dataclasses import dataclass, field, fields
from typing import Annotated, Any, Dict, Mapping, Optional, Tuple, get_type_hints

from hpc_imagenet.harness.core.registry import KINDS, Kind, declare

Req = Annotated[Optional[float], "required"]  # a number every ok record of the kind carries
Num = Annotated[Optional[float], "number"]  # a number where recorded
Text = Optional[str]
Value = Optional[Any]  # any JSON value
QUIET_SHARE = 0.10  # a point counts when other processes used at most this share of the machine's CPU time


def required(cls: type) -> Tuple[str, ...]:
    """The metrics every ok record of CLS's kind must carry as numbers, in field order."""
    return _marked(cls, "required")


def numeric(cls: type) -> Tuple[str, ...]:
    """The metrics CLS types as numbers (required or where present), in field order."""
    return _marked(cls, "required", "number")


def _marked(cls: type, *marks: str) -> Tuple[str, ...]:
    hints = get_type_hints(cls, include_extras=True)
    return tuple(f.name for f in fields(cls) if set(getattr(hints[f.name], "__metadata__", ())) & set(marks))


# ---------------------------------------------------------------- points: a kind's parameters

@dataclass(frozen=True)
class TrainPoint:
    variant: Text = None
    arch: Text = None
    batch_size: Optional[int] = None  # per process
    precision: Text = None
    amp_dtype: Text = None
    data: Text = None
    image_size: Optional[int] = None
    workers: Optional[int] = None
    setup: Text = None
    world_size: Optional[int] = None
    nodes: Optional[int] = None
    procs_per_node: Optional[int] = None
    epochs: Optional[int] = None
    steps_per_epoch: Optional[int] = None
    val_steps: Optional[int] = None
    extra_args: Optional[list] = None


@dataclass(frozen=True)
class IoPoint:
    backend: Text = None
    batch_size: Optional[int] = None
    cache: Text = None
    data: Text = None
    dataset_images: Optional[int] = None
    image_size: Optional[int] = None
    images_per_reader: Optional[int] = None
    readers: Optional[int] = None
    threads: Optional[int] = None
    workers: Optional[int] = None


@dataclass(frozen=True)
class AllreducePoint:
    backend: Text = None
    bytes: Optional[int] = None
    transport: Text = None
    world_size: Optional[int] = None


@dataclass(frozen=True)
class PipelinePoint:
    """``backend`` names what decoded; ``variant``, where set, the source and backend of the shards bench (fast+folder,
    fast+shards, ...); ``loader``, where set, the loader a user's script takes (``bench loaders``: baseline, fast,
    fast-float32, dali). ``auto_augment``: the policy every backend applied after its crop (None: none)."""

    backend: Text = None
    auto_augment: Text = None
    batch_size: Optional[int] = None
    data: Text = None
    image_size: Optional[int] = None
    images: Optional[int] = None
    split: Text = None
    workers: Optional[int] = None
    variant: Text = None
    loader: Text = None


@dataclass(frozen=True)
class StoragePoint:
    cache: Text = None
    data: Text = None
    format: Text = None
    nodes: Optional[int] = None
    readers_per_node: Optional[int] = None
    seconds: Optional[float] = None


@dataclass(frozen=True)
class DataOpensPoint:
    batch: Optional[int] = None
    data: Text = None
    epochs: Optional[int] = None
    seeded: Value = None
    source: Text = None
    strace: Value = None
    workers: Optional[int] = None


@dataclass(frozen=True)
class IndexMemoryPoint:
    index: Text = None
    samples: Optional[int] = None
    workers: Optional[int] = None


@dataclass(frozen=True)
class FaultPoint:
    fault: Text = None
    launcher: Text = None
    nodes: Optional[int] = None


# ---------------------------------------------------------------- metrics: what a point measured

@dataclass(frozen=True)
class TrainMetrics:
    images_per_s: Req = None
    images_per_s_per_process: Req = None
    step_time_ms: Req = None
    world_size: Req = None
    data_time_ms: Optional[float] = None
    compute_time_ms: Optional[float] = None
    data_wait_ms: Optional[float] = None  # medians of the steady steps: waiting for the loader...
    host_ms: Optional[float] = None  # ...the host's time in the loop with the batch in hand...
    device_ms: Optional[float] = None  # ...and the step's span on the GPU's stream (None on a CPU)
    peak_memory_bytes: Optional[float] = None
    epoch_time_s: Optional[float] = None
    elapsed_s: Optional[float] = None
    nodes: Optional[int] = None
    global_batch: Optional[int] = None
    measured_steps: Optional[int] = None
    warmup_steps: Optional[int] = None
    epochs_run: Optional[int] = None
    parameters: Optional[int] = None
    precision_label: Text = None
    backend: Text = None
    device: Text = None
    engine_status: Value = None
    best_top1: Optional[float] = None
    val_top1: Optional[float] = None
    val_top5: Optional[float] = None
    step_times_ms: Optional[list] = None
    checkpoint_saves: Optional[int] = None
    checkpoint_periodic: Optional[int] = None
    checkpoint_every_steps: Optional[int] = None
    checkpoint_stall_ms_mean: Optional[float] = None
    checkpoint_stall_ms_max: Optional[float] = None
    checkpoint_write_s_mean: Optional[float] = None
    checkpoint_bytes_written: Optional[float] = None
    scaling_efficiency: Optional[float] = None  # hpc_imagenet.harness.analysis.efficiency.with_efficiency sets it
    baseline_world_size: Optional[int] = None


@dataclass(frozen=True)
class IoMetrics:
    images_per_s: Req = None
    mb_per_s: Req = None
    elapsed_s: Req = None
    images: Req = None
    files_per_s: Optional[float] = None
    bytes_per_image: Optional[float] = None
    cache_method: Text = None
    cold_verified: Value = None
    cores_busy: Optional[float] = None
    cpu_ms_per_image: Optional[float] = None
    cpu_s: Optional[float] = None
    first_batch_s: Optional[float] = None
    images_per_cpu_s: Optional[float] = None
    rchar: Optional[int] = None
    read_bytes: Optional[int] = None
    storage_mb_per_s: Optional[float] = None
    syscr: Optional[int] = None
    syscr_per_s: Optional[float] = None


@dataclass(frozen=True)
class AllreduceMetrics:
    bytes: Req = None
    time_us: Req = None
    algbw_gbps: Req = None
    busbw_gbps: Req = None
    world_size: Req = None
    iters: Optional[int] = None


@dataclass(frozen=True)
class PipelineMetrics:

    images_per_cpu_s: Req = None
    images_per_s: Req = None
    cpu_ms_per_image: Req = None
    rounds: Req = None
    ratio_per_core: Optional[float] = None
    ratio_min: Optional[float] = None
    ratio_max: Optional[float] = None


@dataclass(frozen=True)
class StorageMetrics:
    mb_per_s: Req = None
    files_per_s: Req = None
    elapsed_s: Req = None
    bytes: Req = None
    files: Req = None
    bytes_per_file: Optional[float] = None
    complete: Value = None
    files_per_s_per_node: Optional[float] = None
    mb_per_s_per_node: Optional[float] = None
    min_node_mb_per_s: Optional[float] = None
    nodes: Optional[int] = None
    readers: Optional[int] = None
    storage_mb_per_s: Optional[float] = None


@dataclass(frozen=True)
class DataOpensMetrics:
    images: Req = None
    rchar: Req = None
    syscr: Req = None
    dataset_opens: Optional[int] = None
    epochs: Optional[int] = None
    max_opens_per_file: Optional[int] = None
    opening_processes: Optional[int] = None
    opens: Optional[int] = None
    shards: Optional[int] = None


@dataclass(frozen=True)
class IndexMemoryMetrics:
    rank_rss_bytes: Req = None
    worker_private_bytes: Req = None
    worker_pss_bytes: Req = None
    workers: Req = None
    rank_index_bytes: Optional[int] = None
    touched: Optional[int] = None
    worker_rss_bytes: Optional[int] = None


@dataclass(frozen=True)
class FaultMetrics:
    survived: Req = None
    steps_trained_twice: Req = None
    checkpoints_lost: Req = None
    detect_s: Num = None  # absent when not timed
    recover_s: Optional[float] = None
    recovered: Value = None
    seconds_lost: Optional[float] = None


# The harness's kinds, each declared once (hpc_imagenet.harness.core.registry): a new kind is its two classes above and
# one
# declaration here (its units, the report section that draws it); the lists of kinds are derived from these.
TRAIN = declare(Kind("train", TrainPoint, TrainMetrics, section="hpc_imagenet.harness.report.training:draw"))
STORAGE = declare(Kind("storage", StoragePoint, StorageMetrics,
                       section="hpc_imagenet.harness.report.data:draw_storage"))
IO = declare(Kind("io", IoPoint, IoMetrics, section="hpc_imagenet.harness.report.data:draw_loader"))
PIPELINE = declare(Kind("pipeline", PipelinePoint, PipelineMetrics,
                        section="hpc_imagenet.harness.report.data:draw_pipeline"))
ALLREDUCE = declare(Kind("allreduce", AllreducePoint, AllreduceMetrics,
                         section="hpc_imagenet.harness.report.comm:draw"))
DATA_OPENS = declare(Kind("data_opens", DataOpensPoint, DataOpensMetrics,
                          section="hpc_imagenet.harness.report.data_scale:draw"))
INDEX_MEMORY = declare(Kind("index_memory", IndexMemoryPoint, IndexMemoryMetrics,
                            section="hpc_imagenet.harness.report.data_scale:draw"))
FAULT = declare(Kind("fault", FaultPoint, FaultMetrics, section="hpc_imagenet.harness.report.faults:draw"))


# ---------------------------------------------------------------- the record

@dataclass(frozen=True)
class Environment:
    """What a point ran on and with (hpc_imagenet.imagenet.run.sysinfo.collect(), rank 0's for a SLURM job)."""

    hostname: Text = None
    # this boot of the machine (hpc_imagenet.imagenet.run.sysinfo.machine_id): tells VMs and leases apart
    machine_id: Text = None
    platform: Text = None
    cpu_model: Text = None
    cpu_count: Optional[int] = None
    torch_threads: Optional[int] = None
    gpu_name: Text = None
    gpu_count: Optional[int] = None
    nodes: Optional[int] = None
    torch: Text = None
    torchvision: Text = None
    cuda: Text = None
    cudnn: Value = None
    nccl: Value = None
    python: Text = None
    git_commit: Text = None
    source_digest: Text = None  # a hash of the engine's sources (a copied checkout's commit can predate them)
    slurm_job_id: Text = None
    command: Text = None

    @property
    def code(self) -> Text:
        """The code that ran: the source digest where recorded, else the git commit."""
        return self.source_digest or self.git_commit


@dataclass(frozen=True)
class Record:
    """One record as read: the fields every kind shares, its kind's point and metrics, and context
    a runner added (``runner``, ``note``, ``command``, ...)."""

    kind: str
    status: str
    sweep: str
    time: str
    point: Any  # the kind's point class
    metrics: Any  # the kind's metrics class
    environment: Environment
    error: Text = None
    source: str = ""  # file:line, set by the loader
    folder: str = ""  # the records file's folder on this machine, set by the loader (never written)
    host_load_1m: Optional[float] = None
    other_cpu_share: Optional[float] = None  # of the machine's CPU time, used by processes not the point's
    not_counted: Text = None  # why a point taken on a crowded machine is no measurement (set once, by the migration)
    runner: Text = None  # "slurm" for points that ran as SLURM jobs
    note: Text = None
    command: Text = None
    run_dir: Text = None  # the kept run folder, relative to the checkout
    profile: Value = None  # a --profile-steps summary
    scaling_key: Value = None  # the scaling sweep's settings, by which a rerun resumes it
    curve: Value = None  # time_to_accuracy: top-1 after each evaluation, against wall seconds
    notes: Value = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def world_size(self) -> Optional[int]:
        return self.metrics.world_size if hasattr(self.metrics, "world_size") else self.point.world_size

    @property
    def nodes(self) -> int:
        return getattr(self.metrics, "nodes", None) or getattr(self.point, "nodes", None) or 1

    @property
    def profiled(self) -> bool:
        """A --profile-steps run: its steps were slowed by the profiler, so it is no speed measurement."""
        return "--profile-steps" in (getattr(self.point, "extra_args", None) or [])

    def counted(self, quiet_share: float = QUIET_SHARE) -> bool:
        """A measurement, not noise: other processes used at most QUIET_SHARE of the machine's CPU while it
        ran (where measured), and no older record was marked crowded. Uncounted points stay out of figures."""
        crowded = self.other_cpu_share is not None and self.other_cpu_share > quiet_share
        return not (crowded or self.not_counted)

    @property
    def on_gpu(self) -> bool:
        return getattr(self.metrics, "device", None) == "cuda"

    @property
    def local(self) -> bool:
        """Ran on this machine (not as a SLURM job)."""
        return self.runner in (None, "local")

    def point_values(self, keys: Tuple[str, ...]) -> tuple:
        """The point's values of KEYS (names of its fields), e.g. the parameters that group a series."""
        return tuple(getattr(self.point, k, None) for k in keys)

    def recorded(self, part: str) -> Dict[str, Any]:
        """The point or metrics ("point" or "metrics") exactly as recorded, for tables that show them whole."""
        value = self.raw.get(part)
        return dict(value) if isinstance(value, dict) else {}


_SHARED = {f.name for f in fields(Record)} - {"point", "metrics", "source", "folder", "raw"}


def _build(cls: type, values: Mapping[str, Any]) -> Any:
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def from_dict(rec: Mapping[str, Any]) -> Record:
    """The typed record of a record dict: one the loaders validated
    (:func:`hpc_imagenet.harness.core.records.validate`),
    or one a runner just made."""
    kind = KINDS[rec["kind"]]
    shared = {k: v for k, v in rec.items() if k in _SHARED}
    shared["environment"] = _build(Environment, rec.get("environment") or {})
    return Record(point=_build(kind.point, rec["point"]), metrics=_build(kind.metrics, rec["metrics"]),
                  source=rec.get("_source", ""), raw=rec, **shared)
