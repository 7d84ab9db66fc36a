"""Shrink-and-retry on OutOfResources (the GPU compiler's shared-memory limit), without a GPU."""

import pytest
from triton.runtime.errors import OutOfResources

from turbo_triton import _runtime
from turbo_triton.gemm.configs import GemmConfig, shrink


def test_shrinks_until_it_fits_and_remembers():
    calls = []

    def fake_launch(cfg, payload):
        calls.append(cfg)
        if cfg.num_stages > 2 or cfg.block_n > 128:
            raise OutOfResources(300000, 232448, "shared memory")
        payload.append(cfg)

    start = GemmConfig(128, 256, 64, 8, 8, 4)
    done = []
    _runtime.launch_fitted(fake_launch, start, ("key-a",), done, shrink=shrink)
    assert [(c.num_stages, c.block_n) for c in calls] == [(4, 256), (3, 256), (2, 256), (2, 128)]
    assert done == [GemmConfig(128, 128, 64, 8, 8, 2)]
    calls.clear()
    _runtime.launch_fitted(fake_launch, start, ("key-a",), done, shrink=shrink)  # remembered: no retries
    assert [(c.num_stages, c.block_n) for c in calls] == [(2, 128)]


def test_gives_up_with_the_error_when_nothing_fits():
    def never(cfg):
        raise OutOfResources(1, 0, "shared memory")

    with pytest.raises(OutOfResources):
        _runtime.launch_fitted(never, GemmConfig(64, 64, 32, 4, 4, 2), ("key-b",), shrink=shrink)


def test_takes_the_launcher_s_own_shrink_rule():
    # The attention launchers shrink their (block_m, block_n, warps, stages) tiles by their own rule.
    from turbo_triton.attention.configs import Tile
    from turbo_triton.attention.launch import _shrink

    calls = []

    def fake_launch(tile):
        calls.append(tile)
        if tile.num_stages > 1 or tile.block_n > 64:
            raise OutOfResources(300000, 232448, "shared memory")

    _runtime.launch_fitted(fake_launch, Tile(128, 128, 8, 3), ("key-c",), shrink=_shrink)
    assert calls == [Tile(128, 128, 8, 3), Tile(128, 128, 8, 2), Tile(128, 128, 8, 1), Tile(128, 64, 8, 1)]
