#!/usr/bin/env bash
# One run on a CUDA machine without network: build the gpu profile, run the GPU tests, benchmark.
# Wheels opforge needs that the machine lacks may be carried in .carry/wheels, and the download
# cache (pinned inputs, fetched elsewhere with `opforge pins fetch`) in .carry/cache.
# Results go to $OUT (default bench/results): tests.log, build.log and the benchmark JSON.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bench/results}
mkdir -p "$out"
if compgen -G ".carry/wheels/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/opforge-site .carry/wheels/*.whl || exit 1
  export PYTHONPATH=/tmp/opforge-site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD/src:$PWD:${PYTHONPATH:-}
export OPFORGE_CACHE=${OPFORGE_CACHE:-$PWD/.carry/cache}
export PYTHONUNBUFFERED=1

python3 -m opforge doctor
python3 -m opforge build --profile gpu 2>&1 | tee "$out/build.log" | tail -4
python3 -m pytest tests/kernels -m gpu -q -p no:cacheprovider 2>&1 | tee "$out/tests.log" | tail -15
python3 bench/gpu.py --out "$out" "$@"
