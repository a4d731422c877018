#!/usr/bin/env bash
# A Docker engine and a local base image for the docker tests, on a CI machine that has neither
# (and reaches no container registry): Debian's docker.io, dockerd in the background, and
# `debootstrap SUITE | docker import` as opforge-base:SUITE for bookworm (BASE_IMAGE of the pip
# images; the deb flavour's CUDA 11.8) and trixie (the deb flavour's CUDA 12.4).
set -euo pipefail
if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap >/dev/null
fi
if ! docker info >/dev/null 2>&1; then
  (dockerd >/tmp/dockerd.log 2>&1 &)
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "dockerd did not start:"; tail -20 /tmp/dockerd.log; exit 1; }
fi
for suite in bookworm trixie; do
  docker image inspect "opforge-base:$suite" >/dev/null 2>&1 && continue
  rootfs=$(mktemp -d)
  # The host's keyring verifies the suite's signed Release file, as apt does later in the images.
  debootstrap --variant=minbase --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
      "$suite" "$rootfs" http://deb.debian.org/debian >"/tmp/debootstrap-$suite.log" 2>&1 \
    || { echo "debootstrap $suite failed:"; tail -20 "/tmp/debootstrap-$suite.log"; exit 1; }
  tar -C "$rootfs" -c . | docker import - "opforge-base:$suite" >/dev/null
  rm -rf "$rootfs"
done
echo "docker engine ready; base images opforge-base:bookworm, opforge-base:trixie"
