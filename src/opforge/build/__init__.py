"""Building targets from recipes: fingerprints, steps, the manifest and the build engine."""
