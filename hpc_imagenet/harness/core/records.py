"""Benchmark records: one JSON object per measured point, appended to ``results/records/*.jsonl``.

A record keeps the numbers next to everything needed to trust and rerun them: the point's
parameters, the environment (:func:`hpc_imagenet.imagenet.run.sysinfo.collect`), the command, and the units.
Failed points are records too (``status: "failed"`` plus ``error``), so a sweep's gaps are visible.

Each kind is declared in :mod:`hpc_imagenet.harness.core.kinds` (a frozen dataclass for its point and its metrics, one
:class:`~hpc_imagenet.harness.core.registry.Kind` with its units and report section);
:func:`validate` checks a record's fields (:data:`FIELDS`) and its metrics against its kind's class,
and the loaders return :class:`~hpc_imagenet.harness.core.kinds.Record` objects, so a field's name is written
once. Reading is strict but forgiving: a line that is not JSON, or a record that fails
:func:`validate`, is returned as a :class:`Problem` for the report to list, never silently dropped.

This is the bottom layer of ``results/`` (see results/README.md): the paths every layer shares,
record I/O and selection, and :func:`portable`, which keeps machine paths out of committed records.
"""
import datetime as _dt
import json
import logging
import os
import re
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from hpc_imagenet.imagenet.common import checkout, cputime
from hpc_imagenet.imagenet.common.files import append_line
from hpc_imagenet.harness.core.kinds import Record, from_dict, numeric, required
from hpc_imagenet.harness.core.registry import KINDS, units_for

log = logging.getLogger(__name__)

SCHEMA = 1
RESULTS_DIR = checkout.results_dir()  # the checkout's results/ by default; never site-packages
RECORDS_DIR = RESULTS_DIR / "records"
REFERENCE_DIR = Path(__file__).resolve().parents[1] / "reference"  # published numbers and cited links (package data)
SCRATCH_DIR = RESULTS_DIR / "scratch"  # git-ignored: checkpoints, generated JPEGs
RUNS_DIR = RESULTS_DIR / "runs"  # kept: run.json + TensorBoard events behind the learning curves
STATUSES = ("ok", "failed")


# The kinds are declared in hpc_imagenet.harness.core.registry; the JSON fields every record has:
FIELDS = ("schema", "kind", "status", "sweep", "time", "point", "metrics", "environment")

@dataclass
class Problem:
    """A record the report could not use, and why."""

    source: str
    line: int
    reason: str


def new_sweep_id(kind: str, tag: str) -> str:
    """Unique and sortable by time: ``<tag>-<kind>-<UTC time>-<4 hex>``."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{tag}-{kind}-{stamp}-{uuid.uuid4().hex[:4]}"


def make_record(kind: str, sweep: str, point: Dict[str, Any], metrics: Dict[str, Any],
                environment: Dict[str, Any], status: str = "ok", error: Optional[str] = None,
                **extra: Any) -> dict:
    """Build a record dict (the JSON line); ``extra`` holds kind-specific context (run_dir, command, notes)."""
    if kind not in KINDS or status not in STATUSES:
        raise ValueError(f"bad record kind/status {kind!r}/{status!r}")
    rec = {"schema": SCHEMA, "kind": kind, "status": status, "error": error, "sweep": sweep,
           "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "point": point,
           "metrics": metrics, "units": units_for(metrics), "environment": environment,
           "host_load_1m": _load()}  # a busy shared node explains outliers
    rec.update(extra)
    return rec


def _load() -> Optional[float]:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def add_metrics(record: dict, **values: Any) -> None:
    """Add VALUES to the metrics of RECORD, a record dict not yet appended (a value known only later)."""
    record["metrics"].update(values)


def identity(record: dict) -> tuple:
    """What tells a record dict apart from every other: its sweep and its point (results/gpu_collect.sh files
    a lease's records once each by it)."""
    return record["sweep"], json.dumps(record["point"], sort_keys=True)


def append(path: Path, record: dict) -> None:
    """Append one record as one line, atomically (hpc_imagenet.imagenet.common.files): a crash loses at most this point.

    The line is :func:`portable`: whatever a runner put in it, a committed record names no path of
    the machine that recorded it."""
    append_line(path, json.dumps(portable(record), sort_keys=True))
    log.debug("recorded %s %s point %s -> %s", record["kind"], record["status"], record["point"], path)


class Sweep:
    """One sweep of a runner: its id, environment and records file. ``add`` builds a record with them and
    appends it; ``done`` holds the records in the order they were written."""

    def __init__(self, kind: str, tag: str, path: Path, environment: Dict[str, Any]) -> None:
        self.kind, self.path, self.environment = kind, path, environment
        self.id = new_sweep_id(kind, tag)
        self.done: List[dict] = []
        self.others, self.share = cputime.OtherWork(), None  # the machine's other work since the last measured point

    def add(self, point: Dict[str, Any], metrics: Dict[str, Any], status: str = "ok", error: Optional[str] = None,
            kind: Optional[str] = None, **extra: Any) -> dict:
        """Record one point (of KIND where the sweep writes more than its own kind), measured on this machine by
        this process and its children since the previous point; points recorded together (no time between them)
        were measured together and share their other_cpu_share."""
        share = self.others.share()
        if share is not None:
            self.share = share
            self.others.mark()
        record = make_record(kind or self.kind, self.id, point, metrics, self.environment, status, error,
                             other_cpu_share=self.share, **extra)
        append(self.path, record)
        self.done.append(record)
        return record


def validate(rec: Any) -> Optional[str]:
    """None when ``rec`` is a usable record, else the reason it is not: the one check of a record's
    fields against :data:`FIELDS` and, for an ok record, of its metrics against its kind's class."""
    if not isinstance(rec, dict):
        return "not a JSON object"
    missing = [k for k in FIELDS if k not in rec]
    if missing:
        return f"missing field(s) {', '.join(missing)}"
    if rec["schema"] != SCHEMA:
        return f"schema {rec['schema']!r} is not {SCHEMA}"
    if rec["kind"] not in KINDS:
        return f"unknown kind {rec['kind']!r}"
    if rec["status"] not in STATUSES:
        return f"unknown status {rec['status']!r}"
    if not isinstance(rec["metrics"], dict) or not isinstance(rec["point"], dict):
        return "point and metrics must be objects"
    if rec["status"] == "ok":
        typed = KINDS[rec["kind"]].metrics
        lacking = [m for m in numeric(typed) if not _is_number(rec["metrics"].get(m))
                   and (m in required(typed) or m in rec["metrics"])]
        if lacking:
            return f"ok {rec['kind']} record lacks numeric metric(s) {', '.join(lacking)}"
    elif not rec.get("error"):
        return "failed record without an error message"
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def read_records(path: Path) -> Tuple[List[Record], List[Problem]]:
    """Parse one JSONL file into (valid records, problems); each record knows its line (``source``)."""
    good, bad = [], []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                bad.append(Problem(str(path), lineno, f"not valid JSON ({e.msg} at column {e.colno})"))
                continue
            reason = validate(rec)
            if reason:
                bad.append(Problem(str(path), lineno, reason))
            else:
                rec["_source"] = f"{path.name}:{lineno}"
                good.append(replace(from_dict(rec), folder=str(path.parent)))
    return good, bad


def load_by_file(paths: Iterable[Path]) -> List[Tuple[Path, List[Record], List[Problem]]]:
    """Each records file's (path, records, unusable lines), in file order; an unusable line is logged once.
    PATHS name records files: a file as given, a directory's ``*.jsonl`` in name order."""
    files = [f for p in map(Path, paths) for f in (sorted(p.glob("*.jsonl")) if p.is_dir() else [p])]
    loaded = [(f, *read_records(f)) for f in files]
    for _, _, bad in loaded:
        for pr in bad:
            log.warning("skipping record %s:%d: %s", pr.source, pr.line, pr.reason)
    return loaded


def load_typed(paths: Iterable[Path]) -> Tuple[List[Record], List[Problem]]:
    """All records from files or directories (``*.jsonl`` inside), in file then line order."""
    loaded = load_by_file(paths)
    return [r for _, good, _ in loaded for r in good], [pr for _, _, bad in loaded for pr in bad]


def load(paths: Iterable[Path]) -> Tuple[List[dict], List[Problem]]:
    """:func:`load_typed`, each record as its JSON object plus ``_source``: the one way in for the code
    that still reads records as dicts (tests of the runners)."""
    good, bad = load_typed(paths)
    return [r.raw for r in good], bad


# ---------------------------------------------------------------- selection (shared by analysis and report)

def by_kind(recs: Sequence[Record], kind: str) -> List[Record]:
    """The ok records of KIND."""
    return [r for r in recs if r.kind == kind and r.ok]


def group_by(items: Iterable[Any], key: Callable[[Any], Any]) -> Dict[Any, List[Any]]:
    """ITEMS in lists by KEY(item), keys and items in the order first met."""
    groups: Dict[Any, List[Any]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


def newest_sweep(items: Sequence[Any], record_of=lambda x: x) -> List[Any]:
    """The items of the newest sweep among ITEMS: by record time (sweep ids start with their tag, so
    they sort by tag first), the sweep id breaking ties."""
    if not items:
        return []
    newest = max(items, key=lambda x: (record_of(x).time, record_of(x).sweep))
    return [x for x in items if record_of(x).sweep == record_of(newest).sweep]


# ---------------------------------------------------------------- no machine paths in records

# A path through a checkout (any machine's, e.g. ~/hpc-imagenet or a GPU node's copy) up to one of its
# top-level folders; and any other absolute path, except the kernel's own (/dev/shm, /proc/self/io),
# which name the same thing on every Linux machine.
_TOP_FOLDERS = "hpc_imagenet|imagenet|results|launch|slurm|studies|tests|\\.venv"
_CHECKOUT_PATH = re.compile(r"(?<![\w.])/[^\s\"'=:]*?/(?=(?:%s)/)" % _TOP_FOLDERS)
_ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?!(?:dev|proc|sys)/)(?:[^\s\"'=:/]+/)+(?=[^\s\"'=:/]+)")


def portable(value: object) -> object:
    """``value`` (JSON) with no absolute machine paths: a path inside a checkout becomes relative to
    it, any other absolute path keeps its last component (a data set's name)."""
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v) for v in value]
    if isinstance(value, str):
        return _ABSOLUTE_PATH.sub("", _CHECKOUT_PATH.sub("", value))
    return value
