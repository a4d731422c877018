"""Container images: the devel (toolchain) and runtime images, their build contexts and builds."""
