"""The container layer, above the build engine and the images: a whole ``opforge build`` (or a
recipe's tests) inside an opforge image.

The build runs in the devel image as ``opforge build --runner host``, so tool discovery, input
fingerprints and the build record describe the environment the compilers actually ran in; what
the inner run needs to know is handed to it as one ``--handoff`` argument (``opforge.handoff``).
"""
