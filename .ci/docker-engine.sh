#!/usr/bin/env bash
# A Docker engine and a local base image for the docker tests, on a CI machine that has neither
# (and reaches no container registry): Debian's docker.io, dockerd in the background, and
# `debootstrap bookworm | docker import` as opforge-base:bookworm (BASE_IMAGE of the pip images).
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
if ! docker image inspect opforge-base:bookworm >/dev/null 2>&1; then
  rootfs=$(mktemp -d)
  debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >/tmp/debootstrap.log 2>&1 \
    || { echo "debootstrap failed:"; tail -20 /tmp/debootstrap.log; exit 1; }
  tar -C "$rootfs" -c . | docker import - opforge-base:bookworm >/dev/null
  rm -rf "$rootfs"
fi
echo "docker engine ready; base image opforge-base:bookworm"
