#!/bin/sh
# Make the CUDA toolkit and cuDNN findable where builds look for them, however the base image or
# the pip wheels laid them out: /usr/local/cuda/{bin,include,lib64} and an unversioned
# libcudnn.so (its absence broke the seed's builds, see context/000). Idempotent.
# Usage: expose-cuda.sh [PIP_NVIDIA_DIR]   (site-packages/nvidia of a venv, for the pip flavour)
set -eu
nvidia=${1:-}
if [ -n "$nvidia" ] && [ -d "$nvidia" ]; then
  toolkit=$(ls -d "$nvidia"/cu[0-9]* 2>/dev/null | head -n 1 || true)
  if [ -n "$toolkit" ] && [ ! -e /usr/local/cuda ]; then
    ln -s "$toolkit" /usr/local/cuda
  fi
fi
mkdir -p /usr/local/cuda/include
if [ -d /usr/local/cuda/lib ] && [ ! -e /usr/local/cuda/lib64 ]; then
  ln -s lib /usr/local/cuda/lib64
fi
mkdir -p /usr/local/cuda/lib64
lib=/usr/local/cuda/lib64
# cudart: the unversioned name the linker looks for.
for so in "$lib"/libcudart.so.[0-9]*; do
  [ -e "$so" ] && [ ! -e "$lib/libcudart.so" ] && ln -s "$(basename "$so")" "$lib/libcudart.so"
  break
done
# cuDNN: wherever it is (pip wheel, Debian multiarch dir, toolkit), exposed under the toolkit.
cudnn_lib=""
for dir in "$lib" /usr/lib/x86_64-linux-gnu /usr/lib64 ${nvidia:+"$nvidia/cudnn/lib"}; do
  found=$(ls "$dir"/libcudnn.so.[0-9]* 2>/dev/null | sort | head -n 1 || true)
  if [ -n "$found" ]; then cudnn_lib=$found; break; fi
done
if [ -n "$cudnn_lib" ]; then
  dir=$(dirname "$cudnn_lib")
  for so in "$dir"/libcudnn*.so.[0-9]*; do
    name=$(basename "$so")
    [ -e "$lib/$name" ] || ln -s "$so" "$lib/$name"
    base=${name%%.so.*}.so
    [ -e "$lib/$base" ] || ln -s "$name" "$lib/$base"
  done
fi
cudnn_include=""
for dir in /usr/local/cuda/include /usr/include /usr/include/x86_64-linux-gnu ${nvidia:+"$nvidia/cudnn/include"}; do
  if [ -e "$dir/cudnn.h" ] || ls "$dir"/cudnn_v[0-9]*.h >/dev/null 2>&1; then
    cudnn_include=$dir; break
  fi
done
if [ -n "$cudnn_include" ] && [ "$cudnn_include" != /usr/local/cuda/include ]; then
  for header in "$cudnn_include"/cudnn*.h; do
    name=$(basename "$header")
    [ -e "/usr/local/cuda/include/$name" ] || ln -s "$header" "/usr/local/cuda/include/$name"
  done
fi
# Debian-style versioned headers only (cudnn_v9.h): give them the plain names.
for header in /usr/local/cuda/include/cudnn*_v[0-9]*.h; do
  [ -e "$header" ] || continue
  plain=$(basename "$header" | sed 's/_v[0-9]*\.h$/.h/')
  [ -e "/usr/local/cuda/include/$plain" ] || ln -s "$(basename "$header")" "/usr/local/cuda/include/$plain"
done
if [ -n "$cudnn_lib" ]; then
  echo "expose-cuda: cuDNN library $cudnn_lib -> $lib/libcudnn.so"
else
  echo "expose-cuda: no cuDNN library found"
fi
