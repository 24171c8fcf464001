"""The GPU sections from fixture records: the one-off benches' Apex/native parity table, whose per-step losses
are real TensorBoard event files (written with torch's SummaryWriter, as the engine's rank 0 writes
them, and read back with TensorBoard's reader), and a tag's report's kernel-bound verdict of a compiled profile.
"""
from pathlib import Path
from typing import List

from hpc_imagenet.harness.core import kinds, records
from hpc_imagenet.harness.report import gpu_step
from studies.benches import amp_parity

GPU_ENV = {"hostname": "gpu1", "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_count": 1, "nodes": 1}


def _losses(run_dir: Path, losses: List[float]) -> None:
    from torch.utils.tensorboard import SummaryWriter
    w = SummaryWriter(str(run_dir))
    for step, loss in enumerate(losses):
        w.add_scalar("Step/loss", loss, step)
    w.close()


def _parity_run(tmp_path: Path, backend: str, level: str, losses: List[float], n: int) -> dict:
    run_dir = tmp_path / f"{backend}-{level}"
    _losses(run_dir, losses)
    point = {"precision": level, "batch_size": 256, "extra_args": ["--amp-backend", backend, "--seed", "0",
                                                                    "--deterministic", "-p", "1"]}
    rec = records.make_record("train", "parity", point, {"images_per_s": 4000.0 + n, "device": "cuda"}, GPU_ENV,
                              run_dir=str(run_dir), note=f"{backend} parity run")
    rec.update(_source=f"gpu.jsonl:{n}", time=f"2026-11-23T00:00:0{n}")
    return kinds.from_dict(rec)


def test_parity_table_compares_every_logged_step(tmp_path):
    same = [7.06, 7.06, 6.21, 5.86, 5.57]
    off = [7.06, 7.06, 6.21 * 1.01, 5.86, 5.57]  # one step 1 % away
    recs = [_parity_run(tmp_path, "native", "O1", same, 1), _parity_run(tmp_path, "apex", "O1", same, 2),
            _parity_run(tmp_path, "native", "O2", same, 3), _parity_run(tmp_path, "apex", "O2", off, 4)]
    rows = {line.split("|")[2].strip(): [c.strip() for c in line.split("|")[1:-1]]
            for line in amp_parity.parity_section(recs).splitlines() if line.startswith("| NVIDIA")}
    assert rows["O1"][2:6] == ["5", "5/5", "0.00e+00", "yes"]
    assert rows["O2"][2:6] == ["5", "4/5", "1.00e-02", "no"]


def test_parity_table_is_left_out_without_both_backends(tmp_path):
    assert amp_parity.parity_section([_parity_run(tmp_path, "native", "O1", [1.0, 0.9], 1)]) == ""


def _speed(setup: str, rate: float, profiled: bool = False) -> dict:
    point = {"setup": setup, "batch_size": 256, "extra_args": ["--profile-steps", "10"] if profiled else []}
    return kinds.from_dict(records.make_record("train", "s", point, {"images_per_s": rate, "device": "cuda"}, GPU_ENV))


def test_compiled_profile_is_judged_kernel_bound_only_when_the_measured_speed_reaches_it():
    profiled = _speed("engine-fp16-compile", 900.0, profiled=True)
    profile = {"device_ms_per_step": 40.0, "families": {"batchnorm": {"ms_per_step": 20.0},
                                                        "convolution": {"ms_per_step": 16.0}}}
    runs = [(profiled, profile)]  # 40 ms per step of 256 images: 6400 images/s if never idle
    bound = gpu_step._kernel_bound(runs, [profiled, _speed("engine-fp16-cudagraphs", 6350.0)])
    assert "is kernel-bound" in bound and "6400 images/s" in bound and "batchnorm 20.0 ms (50.0%)" in bound
    idle = gpu_step._kernel_bound(runs, [profiled, _speed("engine-fp16-compile", 5000.0)])
    assert "leaves the device idle" in idle
