"""What only a CUDA GPU can show: each variant on CUDA, NCCL, fp16/bf16 at O0-O3, loss-scale recovery.

Marked ``gpu``: skipped, with the reason printed, where torch sees no CUDA device.
"""
import warnings

import pytest
import torch

from hpc_imagenet.imagenet.model import precision as precision_module
from tests.helpers import BIN, TINY, explain, free_port, python, read_run, run, script
from tests.engine.dali_colours import check_solid_colour_batches, needs_dali

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")]

GPU_TINY = [a for a in TINY if a not in ("--dist-backend", "gloo")] + ["--channels-last"]


@pytest.mark.parametrize("name", ["imagenet_nd.py", "imagenet_dp.py", "imagenet_ddp.py", "imagenet_ddp_apex.py"])
def test_each_variant_trains_on_cuda(name, jpeg_data, tmp_path):
    proc = python(script(name), *GPU_TINY, "--epochs", "1", "--log-dir", tmp_path, jpeg_data)
    assert proc.returncode == 0, explain(proc)
    record = read_run(tmp_path)
    assert record["dist"]["device"] == "cuda" and record["environment"]["gpu_count"] >= 1


def test_no_accel_trains_on_the_cpu_beside_a_gpu(jpeg_data, tmp_path):
    """pytorch/examples' --no-accel ('disables accelerator') with its node-level launch: one CPU process, gloo."""
    proc = python(script("imagenet_ddp.py"), *TINY, "--no-accel", "--multiprocessing-distributed", "--dist-url",
                  f"tcp://127.0.0.1:{free_port()}", "--world-size", "1", "--rank", "0", "--epochs", "1",
                  "--log-dir", tmp_path, jpeg_data)
    assert proc.returncode == 0, explain(proc)
    dist = read_run(tmp_path)["dist"]
    assert dist["device"] == "cpu" and dist["world_size"] == 1


def test_ddp_under_torchrun_on_one_gpu(jpeg_data, tmp_path):
    proc = run([BIN / "torchrun", "--standalone", "--nproc_per_node=1", script("imagenet_ddp.py"), *GPU_TINY,
                "--dist-backend", "nccl", "--epochs", "1", "--log-dir", tmp_path, jpeg_data])
    assert proc.returncode == 0, explain(proc)
    dist = read_run(tmp_path)["dist"]
    # like pytorch/examples, a world of one trains without a process group
    assert dist["device"] == "cuda" and dist["world_size"] == 1 and dist["backend"] is None


def test_ddp_with_nccl_process_group_pytorch_examples_style(jpeg_data, tmp_path):
    """--multiprocessing-distributed always makes a process group: NCCL and DDP on the one GPU there is."""
    proc = python(script("imagenet_ddp.py"), *GPU_TINY, "--dist-backend", "nccl", "--multiprocessing-distributed",
                  "--dist-url", f"tcp://127.0.0.1:{free_port()}", "--world-size", "1", "--rank", "0",
                  "--epochs", "1", "--log-dir", tmp_path, jpeg_data)
    assert proc.returncode == 0, explain(proc)
    record = read_run(tmp_path)
    assert record["dist"]["backend"] == "nccl" and record["dist"]["world_size"] == torch.cuda.device_count()


@pytest.mark.skipif(precision_module.apex_amp() is None, reason="NVIDIA Apex (<= 25.05, with apex.amp) not importable")
@pytest.mark.parametrize("level", ["O1", "O2", "O3"])
def test_apex_amp_levels_on_cuda(level, jpeg_data, tmp_path):
    proc = python(script("imagenet_ddp_apex.py"), *GPU_TINY, "--opt-level", level, "--amp-backend", "apex",
                  "--epochs", "1", "--log-dir", tmp_path, jpeg_data)
    assert proc.returncode == 0, explain(proc)
    record = read_run(tmp_path)
    assert record["precision"]["backend"] == "apex" and record["precision"]["level"] == level
    assert all(row["train_loss"] == row["train_loss"] for row in record["epochs"])  # not NaN


@pytest.mark.parametrize("level", ["O0", "O1", "O2", "O3"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_precision_levels_on_cuda(level, dtype, jpeg_data, tmp_path):
    proc = python(script("imagenet_ddp_apex.py"), *GPU_TINY, "--opt-level", level, "--amp-dtype", dtype,
                  "--amp-backend", "native", "--epochs", "1", "--log-dir", tmp_path, jpeg_data)
    assert proc.returncode == 0, explain(proc)
    record = read_run(tmp_path)
    assert record["precision"]["level"] == level
    assert all(row["train_loss"] == row["train_loss"] for row in record["epochs"])  # not NaN


def test_loss_scale_recovers_from_injected_overflow_and_resume_restores_it():
    from torch import nn

    from hpc_imagenet.imagenet import config
    from hpc_imagenet.imagenet.model import precision

    cfg = config.parse(["--dummy", "--opt-level", "O1", "--amp-dtype", "float16", "--amp-backend", "native"],
                       "amp")
    device = torch.device("cuda")
    spec = precision.resolve(cfg.precision, device)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(8, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    prec = precision.build(spec, device)
    model, opt = prec.setup(model, opt)
    x, y = torch.randn(8, 3, 16, 16, device=device), torch.randint(0, 4, (8,), device=device)
    taken, scales = [], []
    for step in range(6):
        with prec.autocast():
            loss = nn.functional.cross_entropy(model(x).float(), y)
        prec.zero_grad(opt)
        prec.backward(loss, opt)
        scales.append(prec.loss_scale)
        if step == 1:
            model[0].weight.grad.fill_(float("inf"))  # injected overflow
        taken.append(prec.step(opt))
    taken = [bool(t) for t in taken]  # a device flag with the fused optimizer
    assert taken[1] is False and scales[2] == scales[1] / 2
    assert any(taken[2:]), "training must go on after the overflow"
    fresh = precision.build(spec, device)
    fresh.load_state_dict(prec.state_dict())
    assert fresh.loss_scale == prec.loss_scale and fresh.skipped_steps == prec.skipped_steps


@pytest.mark.parametrize("flags", [("--compile",), ("--compile-mode", "reduce-overhead")],
                         ids=["default", "cudagraphs"])
def test_compiled_model_trains_on_cuda(jpeg_data, tmp_path, flags):
    proc = python(script("imagenet_ddp_apex.py"), *GPU_TINY, "--opt-level", "O1", "--amp-dtype", "bfloat16",
                  *flags, "--epochs", "1", "--log-dir", tmp_path, jpeg_data, timeout=900)
    assert proc.returncode == 0, explain(proc)
    cfg = read_run(tmp_path)["config"]
    assert cfg["perf"]["compile"] is True or cfg["perf"]["compile_mode"] == "reduce-overhead"


def test_device_decode_backend_trains_on_cuda_and_matches_the_cpu_decode(jpeg_data, tmp_path):
    proc = python(script("imagenet_ddp_apex.py"), *GPU_TINY, "--data-backend", "device", "--epochs", "1",
                  "--log-dir", tmp_path, jpeg_data)
    assert proc.returncode == 0, explain(proc)
    from hpc_imagenet.imagenet.data.decode import device

    # TorchCodec's batched nvJPEG where it is installed, torchvision's decode_jpeg where not
    assert read_run(tmp_path)["data_decoder"]["device_decoder"] == device.decoder_name()
    paths = sorted(str(p) for p in (jpeg_data / "val").rglob("*.JPEG"))[:8]
    batch = device.collate([(device.EncodedVal(32)(open(p, "rb").read(), p), 0) for p in paths])[0]
    on_gpu, on_cpu = batch.decode(torch.device("cuda")).cpu().int(), batch.decode(torch.device("cpu")).int()
    # nvJPEG and libjpeg-turbo upsample chroma differently, and these 40x32 test images are all edges:
    # the H100 measured a mean difference of 4.5 grey levels. A wrong crop, flip or channel order
    # differs as much as two different images do, which the second check measures.
    same = (on_gpu - on_cpu).abs().float().mean()
    different = (on_gpu - on_cpu.roll(1, dims=0)).abs().float().mean()
    assert on_gpu.shape == on_cpu.shape and same < 8.0 and same < different / 4, (same, different)


def test_device_decode_syncs_the_host_only_inside_decode_jpeg(jpeg_data, monkeypatch):
    """Crops, flips and resizes queue on the device without waiting for it; whether the decoder's
    nvJPEG call itself (TorchCodec's, else torchvision's) synchronises is printed (run with -rP)."""
    from hpc_imagenet.imagenet.data.decode import device

    paths = sorted(str(p) for p in (jpeg_data / "train").rglob("*.JPEG"))[:8]
    batch = device.collate([(device.EncodedTrain(32)(open(p, "rb").read(), p), 0) for p in paths])[0]
    cuda = torch.device("cuda")
    batch.decode(cuda)  # the first call creates nvJPEG's handles
    torch.cuda.synchronize()
    inside: list = []
    original = device._decode_jpegs

    def decode_jpeg_watched(*args, **kwargs):
        torch.cuda.set_sync_debug_mode("warn")
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            try:
                return original(*args, **kwargs)
            finally:
                torch.cuda.set_sync_debug_mode("error")
                inside.extend(str(w.message).splitlines()[0] for w in seen)
    monkeypatch.setattr(device, "_decode_jpegs", decode_jpeg_watched)
    torch.cuda.set_sync_debug_mode("error")  # anything outside decode_jpeg that synchronises raises
    try:
        out = batch.decode(cuda)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert out.device.type == "cuda" and out.shape == (8, 3, 32, 32)
    print(f"{device.decoder_name()} decode_jpeg(device='cuda') on a batch of 8: {len(inside)} synchronising "
          f"call(s) {inside[:3]}")


@needs_dali
def test_dali_backend_trains_on_cuda_with_exact_validation(jpeg_data, tmp_path):
    """Mixed-device (nvJPEG region-of-interest) decoding feeds the GPU; validation sees all 21 images."""
    proc = python(script("imagenet_ddp_apex.py"), *GPU_TINY, "--data-backend", "dali", "--workers", "2",
                  "--epochs", "2", "--log-dir", tmp_path, jpeg_data, timeout=600)
    assert proc.returncode == 0, explain(proc)
    epochs = read_run(tmp_path)["epochs"]
    assert [e["val_samples"] for e in epochs] == [21, 21]


@needs_dali
def test_dali_gpu_batches_match_labels_and_stay_on_the_gpu(tmp_path):
    check_solid_colour_batches(tmp_path, torch.device("cuda", 0))


def test_profile_steps_records_cuda_kernels(tmp_path):
    proc = python(script("imagenet_ddp_apex.py"), *GPU_TINY, "--dummy", "--dummy-size", "640", "--epochs", "1",
                  "--val-steps", "1", "--profile-steps", "3", "--log-dir", tmp_path)
    assert proc.returncode == 0, explain(proc)
    prof = read_run(tmp_path)["profile"]
    assert prof["device"] == "cuda" and prof["device_ms_per_step"] > 0 and prof["kernels_per_step"] > 50
    assert "convolution" in prof["families"]


# The recipes' tiny overrides (as in test_recipes_train.py): 3 epochs of two steps, fixed 32 px, a ResNet
# (goyal and ffcv zero-initialise each residual block's last BatchNorm)
RECIPE_TINY = [*GPU_TINY, "-a", "resnet18", "--epochs", "3", "--steps-per-epoch", "2", "--val-steps", "1", "-p", "1",
               "--min-res", "32", "--max-res", "32", "--val-crop-size", "32", "--val-resize-size", "36"]


@pytest.mark.parametrize("name", ["goyal", "mlperf", "ffcv-16"])
def test_recipe_trains_on_cuda_in_fp16(name, jpeg_data, tmp_path):
    """LARS under the fp16 loss scaler, EMA kept on the device, the FFCV ramp: finite losses on CUDA."""
    proc = python(script("imagenet_ddp_apex.py"), *RECIPE_TINY, "--recipe", name, "--opt-level", "O1",
                  "--amp-dtype", "float16", "--amp-backend", "native", "--model-ema", "--log-dir", tmp_path,
                  jpeg_data)
    assert proc.returncode == 0, explain(proc)
    record = read_run(tmp_path)
    assert record["dist"]["device"] == "cuda" and record["config"]["run"]["recipe"] == name
    assert len(record["epochs"]) == 3 and all(row["train_loss"] == row["train_loss"] for row in record["epochs"])


@pytest.mark.parametrize("opt", ["lars", "lamb"])
def test_accumulation_and_mixing_with_layerwise_optimizers_on_cuda(opt, jpeg_data, tmp_path):
    """Two micro-batches per step under the fp16 scaler (one unscale per optimizer step), with CutMix."""
    proc = python(script("imagenet_ddp_apex.py"), *RECIPE_TINY, "--opt", opt, "--accum-steps", "2",
                  "--cutmix-alpha", "1.0", "--opt-level", "O1", "--amp-dtype", "float16", "--amp-backend", "native",
                  "--log-dir", tmp_path, jpeg_data)
    assert proc.returncode == 0, explain(proc)
    record = read_run(tmp_path)
    assert record["config"]["optim"]["opt"] == opt and record["config"]["optim"]["accum_steps"] == 2
    assert all(row["train_loss"] == row["train_loss"] for row in record["epochs"])
