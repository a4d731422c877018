"""The framework versions opforge builds and tests against: one place, read by the images, the
nox sessions (``noxfile.py`` loads this file by path, so it imports nothing) and the tests that
check the recipes and the CI matrix agree."""

# The torch the CPU adapter builds against, and the images carry by default.
TORCH = "torch==2.13.0"
# The MindSpore the adapter is tested with; it is built against NumPy 1.x (see README).
MINDSPORE = ("mindspore==2.10.0", "numpy<2")
