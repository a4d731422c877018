"""The nightly CI: the CUDA x cuDNN x framework matrix, its rendered workflow, cells, reports."""
