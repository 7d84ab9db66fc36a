"""docs/plugin-guide.md: its Primitives section is what ``turbo backends --primitives --markdown`` prints
now (the console script's output is compared in test_cli_script), and the generator's pieces: every
primitive with its args class, fields, options and in-place fields; enum defaults and unions written as a
reader writes them; a file's generated section replaced and nothing else."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from turbo_core.cli import primitive_docs
from turbo_core.dispatch.catalog import get_primitive, primitives

GUIDE = Path(__file__).resolve().parents[3] / "docs" / "plugin-guide.md"


def test_the_guides_primitives_section_is_current():
    section = primitive_docs.section_of(GUIDE.read_text())
    assert section == primitive_docs.markdown(), (
        "docs/plugin-guide.md is out of date: run python -m turbo_core.cli.primitive_docs docs/plugin-guide.md")


def test_every_primitive_has_its_section_with_every_field():
    text = primitive_docs.markdown()
    for prim in primitives():
        body = text.split(f"\n### `{prim.name}`\n", 1)[1].split("\n### ", 1)[0]
        assert f"- `args`: `{prim.args_type.__module__}.{prim.args_type.__qualname__}`" in body
        for field in dataclasses.fields(prim.args_type):
            assert f"\n| `{field.name}` | `" in body, (prim.name, field.name)
        for name in prim.mutates:
            assert f"- writes in place: `{name}`" in body or f", `{name}`" in body


def test_gemm_section_names_its_options_types_and_defaults():
    text = primitive_docs.markdown()
    gemm = text.split("\n### `gemm`\n", 1)[1].split("\n### ", 1)[0]
    assert "- family `gemm` (`TURBO_GEMM_BACKEND`), precision `BF16_FP16_FP32`" in gemm
    assert "- options (implement or decline in `check`): `trans_a`, `trans_b`, `out_dtype`, `trans_c`, `out`" in gemm
    assert "| `a` | `torch.Tensor` | required |" in gemm
    assert "| `out_dtype` | `torch.dtype \\| None` | `None` |" in gemm
    assert "``out``: when given, the kernel accumulates into it" in gemm  # the args class's docstring
    assert primitive_docs.options(get_primitive("gemm")) == ["trans_a", "trans_b", "out_dtype", "trans_c", "out"]
    fp8 = text.split("\n### `gemm_fp8`\n", 1)[1].split("\n### ", 1)[0]
    assert "| `granularity` | `ScalingGranularity \\| str` | `ScalingGranularity.TENSORWISE` |" in fp8
    dispatch = text.split("\n### `moe_dispatch`\n", 1)[1].split("\n### ", 1)[0]
    assert ", not auto-tuned (a collective)" in dispatch


def test_write_section_replaces_only_the_generated_part(tmp_path):
    page = tmp_path / "guide.md"
    page.write_text(f"# head\n\n{primitive_docs.BEGIN}\nstale\n{primitive_docs.END}\ntail\n")
    primitive_docs.write_section(page)
    assert page.read_text() == f"# head\n\n{primitive_docs.BEGIN}\n{primitive_docs.markdown()}{primitive_docs.END}\ntail\n"
    (tmp_path / "plain.md").write_text("no markers\n")
    with pytest.raises(ValueError, match="no generated section"):
        primitive_docs.write_section(tmp_path / "plain.md")
