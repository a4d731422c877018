#!/usr/bin/env bash
# One run on a CUDA machine without network or nox: build the gpu profile (kernel library, PyTorch
# adapter, MindSpore AOT libraries), install opforge and the torch adapter wheel, run the GPU
# tests (the MindSpore CUDA entry points through their ABI: MindSpore GPU needs CUDA 11) against
# the library just built, run compute-sanitizer memcheck over the CUDA kernel paths, then
# benchmark unless OPFORGE_GPU_BENCH=0.
# Wheels the machine lacks may be carried in .carry/wheels, the download cache (pinned inputs,
# fetched elsewhere with `opforge pins fetch`) in .carry/cache. Results go to $OUT (default
# bench/results): build.log, tests.log, the memcheck logs and the benchmark JSON files.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench/results}
site=/tmp/opforge-site
mkdir -p "$out"

# $1 in front of PYTHONPATH, which may be unset (set -u) or empty.
pythonpath() { echo "$1${PYTHONPATH:+:$PYTHONPATH}"; }

if compgen -G ".carry/wheels/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/opforge-deps .carry/wheels/*.whl || exit 1
  export PYTHONPATH=$(pythonpath /tmp/opforge-deps)
fi
export OPFORGE_CACHE=${OPFORGE_CACHE:-$PWD/.carry/cache}
export PYTHONUNBUFFERED=1

PYTHONPATH=$(pythonpath "$PWD/src") python3 -m opforge doctor
PYTHONPATH=$(pythonpath "$PWD/src") python3 -m opforge build --profile gpu 2>&1 | tee "$out/build.log" | grep '^\[\|built\|error' | tail -8
if [ "${PIPESTATUS[0]}" != 0 ]; then
  echo "gpu_run.sh: the gpu build failed; see $out/build.log" >&2
  exit 1
fi
# One pip call: opforge and the adapter wheel both fill the opforge/ package directory.
python3 -m pip install -q --no-deps --no-index --no-build-isolation --target "$site" . dist/opforge_torch-*+gpu-*.whl || exit 1
export PYTHONPATH=$(pythonpath "$site:$PWD")
export OPFORGE_TEST_DIST=1  # the kernel tests load the library built above
python3 -m pytest tests/kernels tests/torch_adapter tests/mindspore_aot -m gpu -q -p no:cacheprovider 2>&1 | tee "$out/tests.log" | tail -15
if command -v compute-sanitizer >/dev/null; then
  compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest tests/mindspore_aot -m gpu -q \
    -p no:cacheprovider -k "float32 and not 40000 and not 32771 and not 8195" 2>&1 | tee "$out/memcheck-mindspore-aot.log" | tail -4
  # Every CUDA kernel path (small sizes). Without torch's caching allocator each tensor is its
  # own allocation, so an access past its end is caught, not hidden in a cached block.
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 9 \
    python3 -m pytest tests/kernels/test_cuda_paths.py -q -p no:cacheprovider 2>&1 | tee "$out/memcheck-kernels.log" | tail -4
fi
[ "${OPFORGE_GPU_BENCH:-1}" = 0 ] && exit 0
python3 bench/gpu.py --out "$out" "$@"
python3 bench/torch_overhead.py --device cuda --out "$out"
