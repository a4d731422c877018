"""Building targets from recipes: fingerprints, steps and their execution, the build record and
the build engine."""
