"""opforge: a containerised build-and-CI platform for multi-framework kernels."""

__version__ = "0.1.0"

# opforge.torch and opforge.mindspore are installed by their own wheels; let them join this
# package even when it is imported from elsewhere (a source checkout, an editable install).
__path__ = __import__("pkgutil").extend_path(__path__, __name__)
