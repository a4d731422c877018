#!/usr/bin/env bash
# One run on a CUDA machine without network or nox: the gpu profile (built here, or carried in
# dist/ with OPFORGE_GPU_PREBUILT=1: the wheels and libraries a machine without a GPU built),
# then
#   - the WHOLE PyTorch adapter suite (CPU- and CUDA-device tests, error tests included) against
#     the GPU wheel: a GPU build serves CPU tensors too;
#   - the suite's CPU tests against the CPU wheel, when dist/ has one;
#   - the kernel library's GPU tests through its C ABI (conformance in every layout, each CUDA
#     path) and the MindSpore AOT CUDA entry points through theirs (MindSpore GPU needs CUDA 11);
#   - compute-sanitizer memcheck over the CUDA kernel paths;
#   - the benchmarks (bench/gpu.py, bench/gpu_new_ops.py, bench/torch_overhead.py on CUDA).
# OPFORGE_GPU_STEPS picks among "torch kernels memcheck bench" (default: all four; "tests" is
# torch and kernels), so a run that would outlast one call of a lent machine can be split.
# Wheels the machine lacks may be carried in .carry/wheels, the download cache (pinned inputs,
# fetched elsewhere with `opforge pins fetch`) in .carry/cache. Results go to $OUT (default
# bench/results): build.log, tests-*.log, the memcheck logs and the benchmark JSON files.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench/results}
mkdir -p "$out"

# $1 in front of PYTHONPATH, which may be unset (set -u) or empty.
pythonpath() { echo "$1${PYTHONPATH:+:$PYTHONPATH}"; }

if compgen -G ".carry/wheels/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/opforge-deps .carry/wheels/*.whl || exit 1
  export PYTHONPATH=$(pythonpath /tmp/opforge-deps)
fi
export OPFORGE_CACHE=${OPFORGE_CACHE:-$PWD/.carry/cache}
export PYTHONUNBUFFERED=1
base_path=${PYTHONPATH:-}

PYTHONPATH=$(pythonpath "$PWD/src") python3 -m opforge doctor
if [ "${OPFORGE_GPU_PREBUILT:-0}" = 1 ]; then
  echo "gpu_run.sh: testing the carried dist/ (built elsewhere, not rebuilt here)" | tee "$out/build.log"
else
  PYTHONPATH=$(pythonpath "$PWD/src") python3 -m opforge build --profile gpu 2>&1 | tee "$out/build.log" | grep '^\[\|built\|error' | tail -8
  if [ "${PIPESTATUS[0]}" != 0 ]; then
    echo "gpu_run.sh: the gpu build failed; see $out/build.log" >&2
    exit 1
  fi
fi

# opforge and an adapter wheel, in one pip call: both fill the opforge/ package directory.
site_with() {
  rm -rf "$1"
  python3 -m pip install -q --no-deps --no-index --no-build-isolation --target "$1" . "$2" || exit 1
}
parallel=""
python3 -c "import xdist" 2>/dev/null && parallel="-n 8"
status=0
steps=" ${OPFORGE_GPU_STEPS:-torch kernels memcheck bench} "
steps=${steps/ tests / torch kernels }
step() { [[ "$steps" == *" $1 "* ]]; }

site_with /tmp/opforge-gpu "$(ls dist/opforge_torch-*+gpu-*.whl | head -1)"
export PYTHONPATH="/tmp/opforge-gpu:$PWD${base_path:+:$base_path}"
export OPFORGE_TEST_DIST=gpu  # the kernel tests load the GPU build in dist/gpu, for CPU and CUDA alike
if step torch; then
  python3 -m pytest tests/torch_adapter $parallel -q -p no:cacheprovider -rfs 2>&1 | tee "$out/tests-torch-gpu-wheel.log" | tail -6
  status=$((status | PIPESTATUS[0]))
  if compgen -G "dist/opforge_torch-*+cpu-*.whl" >/dev/null; then
    site_with /tmp/opforge-cpu "$(ls dist/opforge_torch-*+cpu-*.whl | head -1)"
    PYTHONPATH="/tmp/opforge-cpu:$PWD${base_path:+:$base_path}" python3 -m pytest tests/torch_adapter -m "not gpu" \
      $parallel -q -p no:cacheprovider -rfs 2>&1 | tee "$out/tests-torch-cpu-wheel.log" | tail -6
    status=$((status | PIPESTATUS[0]))
  fi
fi
if step kernels; then
  python3 -m pytest tests/kernels tests/mindspore_aot -m gpu $parallel -q -p no:cacheprovider -rfs 2>&1 | tee "$out/tests-kernels-gpu.log" | tail -6
  status=$((status | PIPESTATUS[0]))
fi

if step memcheck && command -v compute-sanitizer >/dev/null; then
  compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest tests/mindspore_aot -m gpu -q \
    -p no:cacheprovider -k "float32 and not 40000 and not 32771 and not 8195" 2>&1 | tee "$out/memcheck-mindspore-aot.log" | tail -4
  status=$((status | PIPESTATUS[0]))
  # Every CUDA kernel path (small sizes). Without torch's caching allocator each tensor is its
  # own allocation, so an access past its end is caught, not hidden in a cached block.
  # xdist workers are the sanitizer's target processes too: serially this outlasts a lent call.
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --target-processes all --error-exitcode 9 \
    python3 -m pytest tests/kernels/test_cuda_paths.py tests/kernels/test_new_ops_gpu.py $parallel -q -p no:cacheprovider \
    -k "not 150001 and not 600001 and not 40000" 2>&1 | tee "$out/memcheck-kernels.log" | tail -4
  status=$((status | PIPESTATUS[0]))
fi
if step bench; then
  python3 bench/gpu.py --library dist/gpu/lib/libopforge_kernels.so --out "$out" "$@" || status=1
  python3 bench/gpu_new_ops.py --library dist/gpu/lib/libopforge_kernels.so --out "$out" "$@" || status=1
  python3 bench/torch_overhead.py --device cuda --out "$out" || status=1
fi
exit "$status"
