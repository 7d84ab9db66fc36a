"""``turbo bench``: model-shaped benchmark suites, every available backend beside the PyTorch
baselines in one process. Suites live in ``turbo_core.bench.suites``; a suite yields cases, each
with providers to time and an accuracy check."""
