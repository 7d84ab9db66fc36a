"""``turbo_triton._runtime.gpu_tiles``: the CPU tests' way to run the GPU's tile choices through the
interpreter."""

from turbo_triton import _runtime


def test_gpu_tiles_switch_the_tile_heuristics_only():
    """Under the interpreter the tile heuristics pick large tiles (its cost is per program);
    ``gpu_tiles()`` makes them pick the GPU's, and ends with its block."""
    from turbo_triton.activation import fp8_launch
    from turbo_triton.quantization import common

    assert _runtime.interpreting() and _runtime.interpreter_tiles()
    interp = common.pick(128, 128, 32, 32, cap_n=128, target=4096)
    with _runtime.gpu_tiles():
        assert _runtime.interpreting() and not _runtime.interpreter_tiles()
        gpu = common.pick(128, 128, 32, 32, cap_n=128, target=4096)
    assert _runtime.interpreter_tiles()
    assert (interp.block_m, interp.block_n) == (128, 128) and (gpu.block_m, gpu.block_n) == (32, 128)
    assert fp8_launch.pick(1, fp8_launch.G.MX_BLOCKWISE, 32, False).block_m == 128
