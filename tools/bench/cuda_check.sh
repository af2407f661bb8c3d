#!/bin/bash
# The GPU check: xladev's tests that hold on any backend, mixed precision, Pallas kernels, then the three step
# benchmarks, on PJRT_DEVICE=CUDA.
#
#   tools/bench/cuda_check.sh OUTDIR
#
# For a machine with a GPU, jax's CUDA plugin and torch's CUDA build, where the pinned set-up (make install)
# may not be possible: xladev runs from this checkout (PYTHONPATH) with the Python found as `python3`
# (PYTHON=... to choose another). Each part has a time limit, so one that hangs leaves the rest their turn, and
# the whole check stays within TOTAL_S seconds (480 by default).
# Writes one log per part, and the benchmarks' JSON, into OUTDIR; prints a summary as it goes.
set -u
out=${1:?usage: tools/bench/cuda_check.sh OUTDIR}
mkdir -p "$out"
cd "$(dirname "$0")/../.."
py=${PYTHON:-python3}
# Run from the checkout, not installed: torch.compile finds backend="xladev" through its entry point, so a
# distribution record naming it goes on the path too (importlib.metadata reads any *.dist-info there).
entry=$(mktemp -d)/xladev_checkout-0.dist-info
mkdir -p "$entry"
printf 'Metadata-Version: 2.1\nName: xladev-checkout\nVersion: 0\n' > "$entry/METADATA"
printf '[torch_dynamo_backends]\nxladev = xladev.compile_backend:backend\n' > "$entry/entry_points.txt"
# Eager CUDA cannot train beside the registered xla device under torch 2.11 (bench_runtime.eager_device): the
# eager column runs on the CPU unless XLADEV_BENCH_EAGER_DEVICE says otherwise.
export XLADEV_BENCH_EAGER_DEVICE=${XLADEV_BENCH_EAGER_DEVICE:-cpu}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$(dirname "$entry")${PYTHONPATH:+:$PYTHONPATH} PJRT_DEVICE=CUDA
start=$(date +%s)
total=${TOTAL_S:-480}  # the whole check's budget: issue 41 gives a GPU check at most 8 minutes
part() { echo "=== $1 (at +$(( $(date +%s) - start )) s of $total)"; }
exec 3>&1  # the summary: a part's own output goes to its log
# run_part LIMIT COMMAND...: the command under the smaller of its own limit and what is left of the budget; skipped
# (exit 124, as a timeout) when less than 10 s is left.
run_part() {
  local left=$(( total - ($(date +%s) - start) ))
  local limit=$(( $1 < left ? $1 : left ))
  shift
  if (( limit < 10 )); then echo "skipped: ${left} s of the check's ${total} s left (TOTAL_S)" >&3; return 124; fi
  timeout "$limit" "$@"
}

part versions
nvidia-smi -L 2>&1 | head -4
$py -c "import torch, jax; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), '| jax', \
jax.__version__, jax.devices())" 2>&1 | tail -1

part tests
run_part "${TESTS_S:-150}" $py -m pytest -q -p no:cacheprovider tests/runtime/test_any_backend.py \
  tests/runtime/test_dynamo_backend.py > "$out/tests.log" 2>&1
echo "exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/tests.log" | tail -15

part amp
# Mixed precision on the GPU: every autocast op in float16 and bfloat16, and float16 training with the scaler
# (no host read in scaler.step/update, the skipped overflow step, losses against eager CPU).
run_part "${AMP_S:-150}" $py -m pytest -q -p no:cacheprovider tests/runtime/test_grad_scaling.py \
  tests/runtime/test_autocast.py -k "float16 or lower_precision or syncfree" > "$out/amp.log" 2>&1
echo "exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/amp.log" | tail -15

part pallas
# Pallas on the GPU: call_jax, make_kernel_from_pallas's kernels through Pallas's GPU backend (on the CPU they run in
# interpret mode), and flash_attention on jax's Pallas flash-attention kernel, forward and backward, against eager.
run_part "${PALLAS_S:-120}" $py -m pytest -q -p no:cacheprovider -m "not torch_xla" tests/runtime/test_pallas_kernels.py \
  tests/runtime/test_jax_call.py > "$out/pallas.log" 2>&1
echo "exit $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$out/pallas.log" | tail -15

part bench_compile
run_part "${COMPILE_S:-240}" $py tools/bench/bench_compile.py --quick --steps 15 --warmup 3 \
  --json "$out/compile.json" > "$out/compile.log" 2>&1
echo "exit $?"; tail -22 "$out/compile.log"

part bench_runtime
run_part "${RUNTIME_S:-120}" $py tools/bench/bench_runtime.py --steps 20 --ops 5000 \
  --json "$out/runtime.json" > "$out/runtime.log" 2>&1
echo "exit $?"; grep -A4 "ms/step: median" "$out/runtime.log"; grep -A3 "step split" "$out/runtime.log"

part bench_models
run_part "${MODELS_S:-120}" $py tools/bench/bench_models.py --quick --steps 10 \
  --json "$out/models.json" > "$out/models.log" 2>&1
echo "exit $?"; tail -9 "$out/models.log"
part done
