"""opforge: a containerised build-and-CI platform for multi-framework kernels."""

__version__ = "0.1.0"
