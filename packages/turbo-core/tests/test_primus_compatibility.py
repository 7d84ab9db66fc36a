"""``docs/primus-compatibility.md`` against the code: every turbo_core name that a row marked available
or differs promises imports, and every op Primus-Turbo's ``ops`` package exports is in the table and in
``turbo_core.ops``."""

from __future__ import annotations

from pathlib import Path

import pytest

from turbo_core.testing.compat_doc import promised_names, resolve

DOC = Path(__file__).resolve().parents[3] / "docs" / "primus-compatibility.md"
#: ``primus_turbo.pytorch.ops.__all__`` (Primus-Turbo's exported op names).
PRIMUS_OPS = (
    "gemm gemm_fp8 gemm_fp4 grouped_gemm grouped_gemm_fp8 grouped_gemm_fp4 quantize_fp8 quantize_fp8_with_trans "
    "dequantize_fp8 quantize_fp4 quantize_fp4_with_trans dequantize_fp4 grouped_quantize_fp8 "
    "grouped_quantize_fp8_with_trans grouped_dequantize_fp8 grouped_quantize_fp4 grouped_dequantize_fp4 "
    "flash_attn_func flash_attn_varlen_func flash_attn_fp8_func flash_attn_usp_func flash_attn_varlen_usp_func "
    "flash_attn_fp8_usp_func sparse_mla_func swiglu_with_probs geglu_with_probs rmsnorm rmsnorm_residual "
    "fused_group_topk_routing_with_aux_score moe_permute moe_unpermute token_permute token_unpermute "
    "indices_to_multihot tokens_per_expert_to_mask moe_dispatch moe_combine fused_mega_moe fused_mega_moe_stage1 "
    "fused_mega_moe_stage2 FusedMegaMoEFunction fused_all_gather_matmul fused_all_gather_scaled_matmul "
    "fused_matmul_reduce_scatter"
).split()
PROMISED = promised_names(DOC, "turbo_core")


def test_the_table_promises_names_from_every_section():
    assert len(PROMISED) > 60
    assert {"turbo_core.ops.flash_attn_usp_func", "turbo_core.ops.sparse_mla_func", "turbo_core.TurboStream",
            "turbo_core.modules.DeepEPTokenDispatcher"} <= set(PROMISED)


@pytest.mark.parametrize("name", PROMISED)
def test_every_promised_name_imports(name):
    assert resolve(name) is not None


@pytest.mark.parametrize("name", PRIMUS_OPS)
def test_every_primus_op_is_listed_and_exported(name):
    import turbo_core.ops

    assert f"`{name}`" in DOC.read_text()
    assert callable(getattr(turbo_core.ops, name))


def test_a_name_that_does_not_exist_fails_to_resolve(tmp_path):
    doc = tmp_path / "c.md"
    doc.write_text("## x\n\n| name | turbo | status |\n|---|---|---|\n| `a` | `turbo_core.ops.no_such_op` | available |\n"
                   "| `b` | `turbo_core.ops.gemm` | missing |\n")
    assert promised_names(doc, "turbo_core") == ["turbo_core.ops.no_such_op"]
    with pytest.raises(AttributeError):
        resolve("turbo_core.ops.no_such_op")
