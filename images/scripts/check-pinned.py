"""Fail the image build when installing the requirements displaced a pinned wheel or brought
another cuDNN: a framework that depends on its own cuDNN (PyPI's CUDA builds of torch do) would
otherwise replace the combination's cuDNN in site-packages/nvidia without a word.
Usage: python check-pinned.py PINNED_LIST   (the context's pinned-<kind>.txt)
"""

import re
import sys
from importlib import metadata
from pathlib import Path


def canonical(name: str) -> str:
    """PEP 503 name."""
    return re.sub(r"[-_.]+", "-", name).lower()


pinned = {}
for line in Path(sys.argv[1]).read_text().splitlines():
    if line.strip():
        name, version = Path(line.split()[0]).name.split("-")[:2]
        pinned[canonical(name)] = version
installed = {canonical(d.metadata["Name"]): d.version for d in metadata.distributions()}
problems = [
    f"{name} {version} (pinned) is now {installed.get(name, 'gone')}"
    for name, version in pinned.items()
    if installed.get(name) != version
]
problems += [
    f"{name} {version} came with the requirements besides the pinned cuDNN"
    for name, version in installed.items()
    if name.startswith("nvidia-cudnn") and name not in pinned
]
if problems:
    print("check-pinned: the image's requirements changed its CUDA/cuDNN:", file=sys.stderr)
    for problem in problems:
        print(f"  {problem}", file=sys.stderr)
    print("check-pinned: choose a framework build that needs no CUDA wheels", file=sys.stderr)
    sys.exit(1)
print(f"check-pinned: {len(pinned)} pinned wheels intact, no other cuDNN")
