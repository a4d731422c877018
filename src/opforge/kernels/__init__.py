"""The kernel library's description (the op table) and what is generated from it.

``optable`` reads ``kernels/ops.yaml``; ``gen_c``, ``gen_torch`` and ``gen_mindspore`` write the
C ABI and the two framework adapters from it; ``abi`` calls the built library with ctypes.
"""
