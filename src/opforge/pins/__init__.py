"""Pinned external inputs: the pins file, the content-addressed cache, fetching and re-pinning."""
