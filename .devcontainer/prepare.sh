#!/bin/sh
# initializeCommand of the devcontainer: runs on the host before the image builds, with nothing
# but a POSIX shell (no Python, no opforge). It gathers the image's build context in
# build/devcontainer/: the checkout's files opforge needs to assemble the devel image's context
# inside the build (.devcontainer/Dockerfile, first stage), the CA bundle a TLS-intercepting proxy
# needs ($OPFORGE_EXTRA_CA, else $PIP_CERT; empty when neither is set), and the local wheels of
# $PIP_FIND_LINKS (e.g. a CPU torch), which the host's pip would use too.
set -eu
cd "$(dirname "$0")/.."
out=build/devcontainer
rm -rf "$out"
mkdir -p "$out/wheels"
cp -R src images checksums.yaml pyproject.toml README.md "$out/"
find "$out/src" -name __pycache__ -prune -exec rm -rf {} +
ca=${OPFORGE_EXTRA_CA:-${PIP_CERT:-}}
if [ -n "$ca" ] && [ -f "$ca" ]; then cp "$ca" "$out/extra-ca.pem"; else : > "$out/extra-ca.pem"; fi
for dir in ${PIP_FIND_LINKS:-}; do
  [ -d "$dir" ] || continue
  for wheel in "$dir"/*.whl; do
    [ -f "$wheel" ] || continue
    ln "$wheel" "$out/wheels/" 2>/dev/null || cp "$wheel" "$out/wheels/"
  done
done
echo "devcontainer build context ready in $out"
