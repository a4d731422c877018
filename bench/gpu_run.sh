#!/usr/bin/env bash
# One run on a CUDA machine without network or nox: build the gpu profile (kernel library, PyTorch
# adapter, MindSpore AOT libraries), install opforge and the torch adapter wheel, run the GPU
# tests (the MindSpore CUDA entry points through their ABI: MindSpore GPU needs CUDA 11), then
# benchmark unless OPFORGE_GPU_BENCH=0.
# Wheels the machine lacks may be carried in .carry/wheels, the download cache (pinned inputs,
# fetched elsewhere with `opforge pins fetch`) in .carry/cache. Results go to $OUT (default
# bench/results): build.log, tests.log and the benchmark JSON files.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench/results}
site=/tmp/opforge-site
mkdir -p "$out"
if compgen -G ".carry/wheels/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/opforge-deps .carry/wheels/*.whl || exit 1
  export PYTHONPATH=/tmp/opforge-deps:${PYTHONPATH:-}
fi
export OPFORGE_CACHE=${OPFORGE_CACHE:-$PWD/.carry/cache}
export PYTHONUNBUFFERED=1

PYTHONPATH=$PWD/src:$PYTHONPATH python3 -m opforge doctor
PYTHONPATH=$PWD/src:$PYTHONPATH python3 -m opforge build --profile gpu 2>&1 | tee "$out/build.log" | grep '^\[\|built\|error' | tail -8
# One pip call: opforge and the adapter wheel both fill the opforge/ package directory.
python3 -m pip install -q --no-deps --no-index --no-build-isolation --target "$site" . dist/opforge_torch-*+gpu-*.whl || exit 1
export PYTHONPATH=$site:$PWD:$PYTHONPATH
python3 -m pytest tests/kernels tests/torch_adapter tests/mindspore_aot -m gpu -q -p no:cacheprovider 2>&1 | tee "$out/tests.log" | tail -15
if command -v compute-sanitizer >/dev/null; then
  compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest tests/mindspore_aot -m gpu -q \
    -p no:cacheprovider -k "float32 and not 40000 and not 32771 and not 8195" 2>&1 | tee "$out/memcheck-mindspore-aot.log" | tail -4
fi
[ "${OPFORGE_GPU_BENCH:-1}" = 0 ] && exit 0
python3 bench/gpu.py --out "$out" "$@"
python3 bench/torch_overhead.py --device cuda --out "$out"
