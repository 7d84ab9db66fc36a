"""float64 math of the grouped GEMMs, shared by the tests of the grouped ops."""

import torch


def variable_k_float64(a, b, lens, trans_c=False):
    """float64 ``[G, K, N]`` (``[G, N, K]`` with ``trans_c``): group g's rows of a, transposed, times the
    same rows of b (a zero matrix for an empty group)."""
    out, start = [], 0
    for length in lens:
        c = a[start:start + length].double().t() @ b[start:start + length].double()
        out.append(c.t() if trans_c else c)
        start += length
    return torch.stack(out)
