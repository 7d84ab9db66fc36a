"""The reference backend TORCH: every primitive in plain PyTorch, on any device.

It is the oracle other backends are tested against and the fallback that makes turbo usable
anywhere. It registers through turbo-core's own ``turbo.backends`` entry point, like any plugin.
"""
