#!/bin/sh
# initializeCommand of the devcontainer: runs on the host before the image builds, with nothing
# but a POSIX shell (no Python, no opforge). It gathers the image's build context in
# build/devcontainer/: the checkout's files opforge needs to assemble the devel image's context
# inside the build (.devcontainer/Dockerfile, first stage), the CA bundle a TLS-intercepting proxy
# needs ($OPFORGE_EXTRA_CA, else $PIP_CERT; empty when neither is set), and the local wheels of
# $PIP_FIND_LINKS (e.g. a CPU torch), which the host's pip would use too. And the container's
# proxy variables in build/devcontainer.env (devcontainer.json's runArgs): both spellings of each
# one the host sets, the lower-case one's value where it holds one, as requests reads them.
# devcontainer.json alone could only pass each spelling as the host has it, and an empty
# lower-case one makes requests and pip in the container ignore the upper-case one.
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
(
  umask 077  # a proxy's URL may hold a password
  rm -f build/devcontainer.env
  : > build/devcontainer.env
  for name in HTTP_PROXY HTTPS_PROXY NO_PROXY FTP_PROXY ALL_PROXY; do
    lower=$(printf '%s' "$name" | tr 'A-Z' 'a-z')
    eval "value=\${$lower:-\${$name:-}}"
    case $value in
      '') continue ;;
      *'
'*) echo "prepare.sh: $lower/$name holds a line break; not passed to the container" >&2; continue ;;
    esac
    printf '%s=%s\n%s=%s\n' "$name" "$value" "$lower" "$value" >> build/devcontainer.env
  done
)
echo "devcontainer build context ready in $out"
