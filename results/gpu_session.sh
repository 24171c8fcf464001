#!/usr/bin/env bash
# One lease of a GPU machine, in stages: what the harness records there and what the GPU tests say.
#
#   results/gpu_session.sh [stage ...]
#     env        nvidia-smi, torch/CUDA/cuDNN/NCCL versions
#     synthetic  ResNet-50 step: baseline (pytorch/examples fp32 NCHW) vs engine fp32/bf16/fp16, synthetic data
#     tests      pytest -m gpu (TESTS_K selects, TESTS_N xdist workers sharing the GPU; Apex from .apex when no built Apex is installed)
#     jpeg       the same step fed from generated ImageNet-like JPEGs: baseline, fast (CPU), device (nvJPEG)
#                and dali decoding (JPEG_SETUPS overrides the list)
#     fewcores   fast vs device vs dali decoding with 4 loader workers, as on nodes with few cores per GPU
#     wheels     pip-installs the wheels carried in .whl/ (simplejpeg, cp312 manylinux: the fast backend's decoder)
#                and builds the fast backend's C region decoder where libjpeg headers exist
#     apexbuild  pip-installs Apex from .apex with its CUDA extensions (amp_C, fused optimizers) in the
#                background (setsid, cores BUILD_CPUS), log in $OUT/apex-build.log; apexwait waits for it
#     apex       Apex amp O1 and O2 through the harness
#     recipes    the large-batch recipes' step costs: engine-fp16 vs LARS, LAMB, EMA of the weights, synthetic data
#     compile    baseline vs engine-fp16: eager, torch.compile, and compile with CUDA graphs (~6 min)
#     profile    engine-fp16 and engine-bf16 (PROFILE_SETUPS) with --profile-steps: top kernels into the records
#     best       SETUPS at each of BATCHES (defaults: baseline engine-fp16-cudagraphs; 384 512)
#     autotune   engine-fp16 with --compile-mode max-autotune (kernel benchmarking, CUDA graphs; long compile)
#     logging    engine defaults printing + TensorBoard at every step vs once per epoch
#     parity     native vs Apex amp, O1 and O2, same seed and steps: the final losses side by side
#     batch      engine-fp16 at batch 256, 384 and 512
#     steptimes  engine-fp16 fed from the JPEGs with --step-times: the per-step spread behind the scaling
#                model's straggler term (python -m studies.published_model --check)
#     tta        the time-to-accuracy protocol round on one GPU with the CPU's recipe (docs/time-to-accuracy.md), one
#                command: TTA_PAIRS (3) pairs of main.py then this engine, alternating, seeds TTA_FIRST_SEED (1) on,
#                both seeded, main.py at its defaults and 4 loader workers for both (the protocol's; no --workers);
#                carried: the four Fashion-MNIST files in .fmnist/ and a pytorch/examples checkout in .examples/
#                (both git-ignored; no registry on the machine); records in $OUT/tta-$TAG.jsonl, each run's as it
#                ends; ~2.5 min a pair on an H200 (2026-11-28, 14 workers), so STAGE_LIMIT=540
#     graph      engine fp16/bf16 eager against the whole step as one CUDA graph (--cuda-graph), ResNet-50 synthetic
#     smallstep  the Fashion-MNIST race's step (ResNet-18, 32 px, batch 256, one epoch of 234 steps from its JPEGs):
#                the step breakdown eager and graphed (the record's data_wait_ms, host_ms, device_ms)
#     ttagpu     the protocol round with the GPU recipe (--recipe gpu), tuned and counted in one command: TTA_TRIALS
#                (default: the recipe as it is and --epochs 16, one a line) on the tuning split, the one best within
#                TTA_WITHIN_S (54: main.py's budget on the last lease) picked, then TTA_PAIRS (3) pairs as in tta;
#                ~1 min a trial and ~2.5 min a pair: about 10 minutes, run it alone with STAGE_LIMIT=590 (the same
#                carried files as tta)
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
JPEG_CLASSES=${JPEG_CLASSES:-20}
JPEG_PER_CLASS=${JPEG_PER_CLASS:-640}
JPEG_STEPS=${JPEG_STEPS:-$(( JPEG_CLASSES * JPEG_PER_CLASS / BATCH - 5 ))}  # one pass, no epoch wrap
APEX_SRC="$PWD/.apex"
# Outside the checkout (the next call of a lease replaces carried folders in it), kept between calls.
LEASE_DIR=${LEASE_DIR:-$HOME/.hpc-imagenet-lease}
mkdir -p "$LEASE_DIR"
JPEG_ROOT=${JPEG_ROOT:-$LEASE_DIR/imagenet_like}  # generated once per lease (jpeggen), read by later calls
# A pip-installed Apex (apexbuild) has amp_C; otherwise the Python-only source copy goes on PYTHONPATH.
# Asked by each stage that uses Apex, not once at the start: apexwait may finish the build in between
# (the lease of 2026-11-23 measured the Python-only copy because of that).
detect_apex() {
    if $PY -c "import amp_C, apex.amp" 2>/dev/null; then APEX_PATH=; APEX_KIND="Apex 25.05 built with CUDA extensions (amp_C)"
    else APEX_PATH="$APEX_SRC"; APEX_KIND="Apex 25.05 amp, Python-only (no amp_C)"; fi
}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"

gpu_name=$($PY -c "import torch; print(torch.cuda.get_device_name(0).split()[1].lower() if torch.cuda.is_available() else 'cpu')")
TAG=${TAG:-gpu-$gpu_name}
RECORDS="$OUT/$TAG.jsonl"

bench_train() {  # bench_train <stage> <data> <steps> <bench train flags...>
    local stage=$1 data=$2 steps=$3 stamp; shift 3
    stamp=$(mktemp)  # this stage's run folders are the ones newer than it
    $PY -m hpc_imagenet.harness.bench train --tag "$TAG" --records "$RECORDS" --procs 1 -a "$ARCH" --batch "$BATCH" \
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
    detect_apex
    PYTHONPATH="$APEX_PATH" $PY -m pytest -q -rP -p no:cacheprovider -m gpu --timeout 300 --durations 5 \
        ${TESTS_K:+-k "$TESTS_K"} ${TESTS_N:+-n "$TESTS_N"} tests/engine/test_gpu.py tests/engine/test_perf_flags.py tests/engine/test_step_times.py 2>&1 | tee "$OUT/pytest-gpu.log"
}

stage_jpeg() {
    bench_train jpeg "$JPEG_ROOT" "$JPEG_STEPS" \
        --setups ${JPEG_SETUPS:-baseline engine-fp16 engine-fp16-device-decode engine-fp16-dali}
}

stage_fewcores() {  # 4 loader workers per GPU, as on a node with few cores per GPU: CPU vs GPU decoding
    WORKERS=4 bench_train fewcores "$JPEG_ROOT" "$JPEG_STEPS" \
        --setups ${FEW_SETUPS:-engine-fp16 engine-fp16-device-decode engine-fp16-dali}
}

stage_jpeggen() {  # in the background (setsid), so a later call of the same lease finds the files
    [ -d "$JPEG_ROOT/train" ] && { echo "JPEGs already in $JPEG_ROOT"; return; }
    setsid nohup taskset -c "${GEN_CPUS:-10-15}" bash -c "rm -rf $JPEG_ROOT.tmp && $PY -m hpc_imagenet.harness.runners.jpegs $JPEG_ROOT.tmp \
        --classes $JPEG_CLASSES --per-class $JPEG_PER_CLASS --val-per-class 4 --processes 6 \
        && mv $JPEG_ROOT.tmp $JPEG_ROOT" > $LEASE_DIR/jpegs.log 2>&1 < /dev/null &
    echo "JPEG generation started in the background into $JPEG_ROOT"
}

stage_dalipart() {  # DALI (~165 MB packed) travels in parts, one per call of a lease: .dali/part.NN
    mkdir -p $LEASE_DIR/dali && cp .dali/part.* $LEASE_DIR/dali/ && ls -la $LEASE_DIR/dali
}

stage_wheels() {  # carried wheels (.whl/, git-ignored), e.g. simplejpeg for the fast backend: the machine has no registry
    $PY -m pip install -q --no-index --no-deps --no-cache-dir .whl/*.whl && $PY -c "import simplejpeg" 2>/dev/null \
        && echo "simplejpeg installed" || echo "no simplejpeg: the fast backend decodes with PIL"
    # the fast backend's C region decoder, where the machine has libjpeg-turbo's headers (optional)
    $PY setup.py -q build_ext --inplace > $LEASE_DIR/build_ext.log 2>&1 && $PY -c "import hpc_imagenet.imagenet.data.decode._jpeg_region" \
        && echo "region decoder built" || echo "no region decoder (see $LEASE_DIR/build_ext.log): rows are decoded"
}

stage_daliinstall() {  # unpack the parts into the interpreter's site-packages (the nvidia/ namespace is there)
    local site; site=$($PY -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    cat $LEASE_DIR/dali/part.* | xz -d | tar x -C "$site" && $PY -c "import nvidia.dali as d; print('DALI', d.__version__)"
}

stage_profile() {  # profiled steps run slower: these records explain where time goes, they are not speeds
    bench_train profile dummy 30 --setups ${PROFILE_SETUPS:-engine-fp16 engine-bf16} --extra=--profile-steps --extra=10
}

stage_best() {  # the fp32 baseline at each batch too: issue 13's ratio is taken within one sweep
    bench_train best dummy "$STEPS" --batch ${BATCHES:-384 512} --setups ${SETUPS:-baseline engine-fp16-cudagraphs}
}

stage_autotune() { bench_train autotune dummy "$STEPS" --batch ${AUTOTUNE_BATCH:-256} --setups engine-fp16-max-autotune; }

stage_apexbuild() {  # a copy outside the checkout: the next call's carry replaces .apex under a running build
    rm -rf $LEASE_DIR/apex-src && cp -r "$APEX_SRC" $LEASE_DIR/apex-src
    # Apex 25.05-25.09 hard-code "-gencode arch=compute_70,code=sm_70" for three extensions; CUDA 13's
    # nvcc dropped Volta and stops there ("Unsupported gpu architecture 'compute_70'", seen on this
    # machine after ~20 min of building). Drop those two-word flags from the build copy only.
    $PY - $LEASE_DIR/apex-src/setup.py <<'PYEOF'
import os, re, sys
path = sys.argv[1]
text = open(path).read()
text, n = re.subn(r'\n\s*cc_flag\.append\("-gencode"\)\n\s*cc_flag\.append\("arch=compute_70,code=sm_70"\)', "", text)
# Build only the extensions amp and the fused optimizers use (APEX_EXTENSIONS): the other twenty
# (attention, MLP, norms for transformers) add ~15 minutes of nvcc that a ResNet never calls.
keep = os.environ.get("APEX_EXTENSIONS", "apex_C amp_C").split()
text = text.replace("\nsetup(", f"\next_modules = [e for e in ext_modules if e.name in {keep!r}]\nsetup(", 1)
open(path, "w").write(text)
print(f"apex setup.py: {n} sm_70 target(s) dropped, building {keep}")
PYEOF
    setsid nohup taskset -c "${BUILD_CPUS:-6-15}" env MAX_JOBS="${BUILD_JOBS:-10}" TORCH_CUDA_ARCH_LIST=9.0 \
        $PY -m pip install -v --no-build-isolation --no-deps --no-cache-dir \
        --config-settings "--build-option=--cpp_ext" --config-settings "--build-option=--cuda_ext" \
        $LEASE_DIR/apex-src > $LEASE_DIR/apex-build.log 2>&1 < /dev/null &
    echo "Apex build started in the background (log $LEASE_DIR/apex-build.log)"
}

stage_apexwait() {
    for _ in $(seq "${APEX_WAIT:-60}"); do
        pgrep -f "pip install -v --no-build-isolation" > /dev/null || break
        sleep 5  # polling a build we do not own: no other signal of its end exists in this shell
    done
    tail -3 $LEASE_DIR/apex-build.log; cp $LEASE_DIR/apex-build.log "$OUT/apex-build.log" 2>/dev/null
    $PY -c "import amp_C, apex.amp; from apex.optimizers import FusedSGD; print('Apex with amp_C:', amp_C.__file__)"
}

stage_apex() {  # the built Apex when installed (apexbuild), else the Python-only copy in .apex
    detect_apex
    PYTHONPATH="$APEX_PATH" NOTE="one $gpu_name, $APEX_KIND" \
        bench_train apex dummy "$STEPS" --variants amp --precision O1 O2 --amp-dtype float16 \
        --extra=--amp-backend --extra=apex
}

stage_compile() {
    bench_train compile dummy "$STEPS" --setups baseline engine-fp16 engine-fp16-compile engine-fp16-cudagraphs
}

stage_parity() {  # native vs Apex amp at O1 and O2, same seed and steps (deterministic cuDNN): final losses
    detect_apex
    for backend in native apex; do
        PYTHONPATH="$APEX_PATH" NOTE="one $gpu_name, $backend amp parity run, --seed 0, $APEX_KIND" \
            bench_train "parity-$backend" dummy 50 --variants amp --precision O1 O2 --amp-dtype float16 \
            --extra=--amp-backend --extra=$backend --extra=--seed --extra=0 --extra=--deterministic --extra=-p --extra=1
    done
    for f in results/runs/"$TAG"-train-*/amp_*/run.json; do
        $PY -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['precision']['backend'], r['precision']['label'],
'seed', r['config'].get('seed'), 'losses', [round(e['train_loss'], 4) for e in r['epochs']])" "$f"
    done | tee "$OUT/parity.txt"
}

stage_recipes() { bench_train recipes dummy "$STEPS" --setups engine-fp16 engine-fp16-lars engine-fp16-lamb engine-fp16-ema; }

stage_batch() { bench_train batch dummy "$STEPS" --batch 256 384 512 --setups engine-fp16; }  # largest that fits

stage_steptimes() {  # one GPU, loader-fed like the published clusters; each step's time from CUDA events
    bench_train steptimes "$JPEG_ROOT" "$JPEG_STEPS" --setups engine-fp16 --extra=--step-times
}

tta_round() {  # tta_round <flags...>: the protocol round in one command (studies.fashion_mnist_race run --phase round)
    $PY -m studies.fashion_mnist_race run --phase round --pairs "${TTA_PAIRS:-3}" --seed "${TTA_FIRST_SEED:-1}" \
        --examples "${TTA_EXAMPLES:-.examples}" --fashion-mnist "${TTA_SOURCE:-.fmnist}" --cache "$LEASE_DIR/tta-data" \
        --work "$OUT/tta-work" --tag "tta-$TAG" --records "$OUT/tta-$TAG.jsonl" "$@" ${TTA_FLAGS:-}
}

stage_tta() { tta_round --recipe cpu; }  # main.py seeded: its --seed also sets cuDNN's deterministic mode, as for its users

stage_graph() {  # the whole step in one CUDA graph against eager and compiled, ResNet-50 synthetic, no compiling
    bench_train graph dummy "$STEPS" --setups engine-fp16 engine-bf16 engine-bf16-graph engine-fp16-graph
}

stage_smallstep() {  # the Fashion-MNIST race's step (ResNet-18, 32 px, batch 256) from its JPEGs: where it goes,
    # eager and graphed; needs the carried .fmnist (converted once per lease)
    local data="$LEASE_DIR/tta-data/fashion-mnist"
    [ -d "$data/train" ] || $PY -c "from studies.fashion_mnist_race import fashion_mnist as f; from pathlib import Path; \
        f.convert(f.SOURCE_DIR if not Path('.fmnist').is_dir() else Path('.fmnist'), Path('$LEASE_DIR/tta-data'))"
    ARCH=resnet18 IMAGE=32 bench_train smallstep "$data" 234 --setups engine-bf16 engine-bf16-graph \
        --workers "${SMALL_WORKERS:-$WORKERS}"
}

stage_ttagpu() {  # the GPU recipe tuned on the tuning split first (TTA_TRIALS, one a line), then counted, one command
    local trial tune=()
    while IFS= read -r trial; do tune+=("--tune=$trial"); done <<< "${TTA_TRIALS:-$(printf '%s\n' '' '--epochs 16')}"
    # main.py's budget on this machine is not known before its runs: the last lease's (54 s on an H200)
    tta_round --recipe gpu "${tune[@]}" --within-s "${TTA_WITHIN_S:-54}"
}

stage_logging() { bench_train logging dummy "$STEPS" --setups engine-log-epoch engine-log-step; }

stages=${*:-env synthetic tests jpeg}
gen_pid=
if [[ " $stages " == *" jpeg "* || " $stages " == *" fewcores "* || " $stages " == *" steptimes "* ]] \
    && [[ ! -d "$JPEG_ROOT/train" ]]; then
    $PY -m hpc_imagenet.harness.runners.jpegs "$JPEG_ROOT" --classes "$JPEG_CLASSES" --per-class "$JPEG_PER_CLASS" \
        --val-per-class 4 --processes "${GEN_PROCS:-$WORKERS}" > "$OUT/jpegs.log" 2>&1 &
    gen_pid=$!
fi
stage_sid=
# the script stopped (Ctrl-C, the lease's end): its running stage goes with it
trap '[[ -n $stage_sid ]] && pkill -9 -s "$stage_sid"; exit 130' INT TERM
for s in $stages; do
    if [[ ($s == jpeg || $s == fewcores || $s == steptimes) && -n $gen_pid ]]; then
        wait "$gen_pid"; gen_pid=; echo "JPEGs: $(tail -1 "$OUT/jpegs.log")"
    fi
    echo "=== stage $s ($(date -u +%H:%M:%S))"
    # each stage in a session of its own, so that what is left of a failed one is killed and nothing else on the
    # machine is: a timed-out trainer treats TERM as preemption, so KILL follows 20 s later
    setsid timeout -k 20 "${STAGE_LIMIT:-400}" bash -c "$(declare -p OUT PY ARCH BATCH STEPS IMAGE WORKERS JPEG_ROOT \
        JPEG_STEPS JPEG_CLASSES JPEG_PER_CLASS APEX_SRC LEASE_DIR TAG RECORDS gpu_name); $(declare -f bench_train \
        detect_apex tta_round stage_$s); stage_$s" &
    stage_sid=$!
    wait "$stage_sid" || { echo "=== stage $s failed or timed out (rc $?)"; pkill -9 -s "$stage_sid" || true; }
done
echo "=== done ($(date -u +%H:%M:%S))"
$PY - "$RECORDS" <<'PYEOF'
import sys
from pathlib import Path
from hpc_imagenet.harness.core import records
path = Path(sys.argv[1])
for r in (records.load_typed([path])[0] if path.exists() else []):
    if r.kind != "train":
        continue
    p, m = r.point, r.metrics
    print(f"{p.setup or p.variant:>19} {p.precision:>3} {str(p.amp_dtype):>8} {str(p.data)[-12:]:>12} {r.status:>6} "
          f"{m.images_per_s or 0:7.1f} img/s {m.step_time_ms or 0:6.1f} ms/step data {m.data_time_ms or 0:5.1f} ms "
          f"{(r.error or '')[:100]}")
PYEOF
