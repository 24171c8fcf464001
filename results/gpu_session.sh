#!/usr/bin/env bash
# One lease of a GPU machine, in stages: what the harness records there and what the GPU tests say.
#
#   results/gpu_session.sh [stage ...]
#     env        nvidia-smi, torch/CUDA/cuDNN/NCCL versions
#     synthetic  ResNet-50 step: baseline (pytorch/examples fp32 NCHW) vs engine fp32/bf16/fp16, synthetic data
#     tests      pytest -m gpu (with Apex when .apex holds a Python-only copy; see README)
#     jpeg       the same step fed from generated ImageNet-like JPEGs: baseline, fast (CPU) and device (nvJPEG) decoding
#     fewcores   fast vs device decoding with 4 loader workers, as on nodes with few cores per GPU
#     apex       Apex amp O1 and O2 through the harness
#     compile    baseline vs engine-fp16: eager, torch.compile, and compile with CUDA graphs (~6 min)
#     logging    engine defaults printing + TensorBoard at every step vs once per epoch
#     parity     native vs Apex amp, O1 and O2, same seed and steps: the final losses side by side
#     batch      engine-fp16 at batch 256, 384 and 512
#   default: env synthetic tests jpeg
#
# Records go to $OUT/<tag>.jsonl and the kept run folders to $OUT/runs-<stage>.tgz, so a lease that
# ends early still returns every finished point; results/gpu_collect.sh files them in here.
# The JPEG files are written in the background from the start (CPU only) while earlier stages run.
set -uo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-results/scratch/gpu_out}
PY=${PYTHON:-python3}
ARCH=${ARCH:-resnet50}
BATCH=${BATCH:-256}
STEPS=${STEPS:-60}
IMAGE=${IMAGE:-224}
WORKERS=${WORKERS:-$(( $(nproc) - 2 ))}
JPEG_ROOT=${JPEG_ROOT:-/tmp/imagenet_like}
JPEG_CLASSES=${JPEG_CLASSES:-20}
JPEG_PER_CLASS=${JPEG_PER_CLASS:-640}
JPEG_STEPS=${JPEG_STEPS:-$(( JPEG_CLASSES * JPEG_PER_CLASS / BATCH - 5 ))}  # one pass, no epoch wrap
APEX_PATH="$PWD/.apex"
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"

gpu_name=$($PY -c "import torch; print(torch.cuda.get_device_name(0).split()[1].lower() if torch.cuda.is_available() else 'cpu')")
TAG=${TAG:-gpu-$gpu_name}
RECORDS="$OUT/$TAG.jsonl"

bench_train() {  # bench_train <stage> <data> <steps> <bench train flags...>
    local stage=$1 data=$2 steps=$3 stamp; shift 3
    stamp=$(mktemp)  # this stage's run folders are the ones newer than it
    $PY -m results.bench train --tag "$TAG" --records "$RECORDS" --procs 1 -a "$ARCH" --batch "$BATCH" \
        --image-size "$IMAGE" --steps-per-epoch "$steps" --val-steps 2 --workers "$WORKERS" --data "$data" \
        --timeout 300 --note "${NOTE:-one $gpu_name, results/gpu_session.sh stage $stage}" "$@"
    find results/runs -maxdepth 1 -name "$TAG-train-*" -newer "$stamp" -print0 \
        | tar czf "$OUT/runs-$stage.tgz" --null -T - 2>/dev/null
}

stage_env() {
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv
    $PY -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__,
'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'nccl', torch.cuda.nccl.version())"
    nproc
}

stage_synthetic() { bench_train synthetic dummy "$STEPS" --setups baseline engine engine-bf16 engine-fp16; }

stage_tests() {
    PYTHONPATH="$APEX_PATH" $PY -m pytest -q -p no:cacheprovider -m gpu --timeout 300 --durations 5 \
        ${TESTS_K:+-k "$TESTS_K"} tests/test_gpu.py tests/test_perf_flags.py 2>&1 | tee "$OUT/pytest-gpu.log"
}

stage_jpeg() {
    bench_train jpeg "$JPEG_ROOT" "$JPEG_STEPS" --setups ${JPEG_SETUPS:-baseline engine-fp16 engine-fp16-device-decode}
}

stage_fewcores() {  # 4 loader workers per GPU, as on a node with few cores per GPU: CPU vs GPU decoding
    WORKERS=4 bench_train fewcores "$JPEG_ROOT" "$JPEG_STEPS" --setups engine-fp16 engine-fp16-device-decode
}

stage_apex() {  # Apex carried Python-only in .apex (never committed: no amp_C, so Python fallbacks)
    PYTHONPATH="$APEX_PATH" NOTE="one $gpu_name, Apex 25.05 amp, Python-only (no amp_C)" \
        bench_train apex dummy "$STEPS" --variants amp --precision O1 O2 --amp-dtype float16 \
        --extra=--amp-backend --extra=apex
}

stage_compile() {
    bench_train compile dummy "$STEPS" --setups baseline engine-fp16 engine-fp16-compile engine-fp16-cudagraphs
}

stage_parity() {  # native vs Apex amp at O1 and O2, same seed and steps (deterministic cuDNN): final losses
    for backend in native apex; do
        PYTHONPATH="$APEX_PATH" NOTE="one $gpu_name, $backend amp parity run, --seed 0" \
            bench_train "parity-$backend" dummy 30 --variants amp --precision O1 O2 --amp-dtype float16 \
            --extra=--amp-backend --extra=$backend --extra=--seed --extra=0
    done
    for f in results/runs/"$TAG"-train-*/amp_*/run.json; do
        $PY -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['precision']['backend'], r['precision']['label'],
'seed', r['config'].get('seed'), 'losses', [round(e['train_loss'], 4) for e in r['epochs']])" "$f"
    done | tee "$OUT/parity.txt"
}

stage_batch() { bench_train batch dummy "$STEPS" --batch 256 384 512 --setups engine-fp16; }  # largest that fits

stage_logging() { bench_train logging dummy "$STEPS" --setups engine-log-epoch engine-log-step; }

stages=${*:-env synthetic tests jpeg}
gen_pid=
if [[ " $stages " == *" jpeg "* || " $stages " == *" fewcores "* ]] && [[ ! -d "$JPEG_ROOT/train" ]]; then
    $PY -m results.jpegs "$JPEG_ROOT" --classes "$JPEG_CLASSES" --per-class "$JPEG_PER_CLASS" \
        --val-per-class 4 --processes "${GEN_PROCS:-$WORKERS}" > "$OUT/jpegs.log" 2>&1 &
    gen_pid=$!
fi
for s in $stages; do
    if [[ ($s == jpeg || $s == fewcores) && -n $gen_pid ]]; then
        wait "$gen_pid"; gen_pid=; echo "JPEGs: $(tail -1 "$OUT/jpegs.log")"
    fi
    echo "=== stage $s ($(date -u +%H:%M:%S))"
    timeout "${STAGE_LIMIT:-400}" bash -c "$(declare -p OUT PY ARCH BATCH STEPS IMAGE WORKERS JPEG_ROOT JPEG_STEPS \
        APEX_PATH TAG RECORDS gpu_name); $(declare -f bench_train stage_$s); stage_$s" \
        || echo "=== stage $s failed or timed out (rc $?)"
done
echo "=== done ($(date -u +%H:%M:%S))"
$PY - "$RECORDS" <<'PYEOF'
import json, sys
try:
    rows = [json.loads(line) for line in open(sys.argv[1])]
except FileNotFoundError:
    rows = []
for r in rows:
    p, m = r["point"], r["metrics"]
    print(f"{p.get('setup') or p['variant']:>19} {p['precision']:>3} {str(p.get('amp_dtype')):>8} "
          f"{p['data'][-12:]:>12} {r['status']:>6} {m.get('images_per_s') or 0:7.1f} img/s "
          f"{m.get('step_time_ms') or 0:6.1f} ms/step data {m.get('data_time_ms') or 0:5.1f} ms "
          f"{(r.get('error') or '')[:100]}")
PYEOF
