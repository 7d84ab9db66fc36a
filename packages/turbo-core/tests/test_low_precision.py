"""Low-precision configs, enums and the per-device FP8/FP4 dtypes (turbo_core.low_precision)."""

import subprocess
import sys

import pytest
import torch

import turbo_core
from turbo_core import low_precision as lp
from turbo_core.low_precision import (
    Float4QuantConfig,
    Float8QuantConfig,
    Format,
    ScaleDtype,
    ScalingGranularity,
    ScalingRecipe,
    ScalingStrategy,
)
from turbo_core.platform import Platform


def test_enums_are_strings_and_exported_from_turbo_core():
    for enum_type in (Format, ScalingGranularity, ScaleDtype, ScalingStrategy):
        assert getattr(turbo_core, enum_type.__name__) is enum_type
        for member in enum_type:
            assert isinstance(member.value, str) and member == member.value and str(member) == member.value
            assert enum_type(member.value) is member
    assert [f.value for f in Format] == ["E4M3", "E5M2", "E2M1_X2", "HYBRID"]
    assert [g.value for g in ScalingGranularity] == ["TENSORWISE", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE"]
    assert [s.value for s in ScaleDtype] == ["FP32", "E8M0"] and [s.value for s in ScalingStrategy] == ["DYNAMIC"]
    assert lp.as_granularity("rowwise") is ScalingGranularity.ROWWISE
    assert lp.as_format("e5m2") is Format.E5M2
    with pytest.raises(ValueError, match="^granularity: expected one of"):
        lp.as_granularity("COLUMNWISE")
    with pytest.raises(ValueError, match="^format: expected one of"):
        lp.as_format(3)


def test_scaling_recipe_and_constants():
    r = ScalingRecipe()
    assert r._fields == ("use_2d_block", "use_sr", "use_rht", "shuffle_scale", "shuffle_out")
    assert tuple(r) == (False,) * 5 and ScalingRecipe(use_2d_block=True).use_2d_block
    assert turbo_core.ScalingRecipe is ScalingRecipe
    assert lp.MXFP8_BLOCK_SIZE == lp.MXFP4_BLOCK_SIZE == 32
    assert lp.MXFP8_PADDING_ALIGN_SIZE == lp.MXFP4_PADDING_ALIGN_SIZE == 128
    assert lp.DEFAULT_BLOCK_SIZE == 128
    assert lp.as_recipe(None) == ScalingRecipe()
    with pytest.raises(TypeError, match="^scaling_recipe: expected a ScalingRecipe"):
        lp.as_recipe((False,) * 5)
    with pytest.raises(TypeError, match=r"^scaling_recipe.use_sr: expected a bool"):
        lp.as_recipe(ScalingRecipe(use_sr=1))


@pytest.mark.parametrize("arch, fnuz", [(None, False), ("gfx942", True), ("gfx950", False), ("sm90", False)])
def test_fp8_dtypes_are_chosen_per_device_at_call_time(monkeypatch, arch, fnuz):
    fake = Platform("cpu") if arch is None else Platform("rocm" if arch.startswith("gfx") else "cuda", arch)
    monkeypatch.setattr(lp, "platform_of", lambda device: fake)
    e4m3 = torch.float8_e4m3fnuz if fnuz else torch.float8_e4m3fn
    e5m2 = torch.float8_e5m2fnuz if fnuz else torch.float8_e5m2
    assert lp.float8_e4m3_dtype("cuda:0") == e4m3 and lp.float8_e5m2_dtype("cuda:0") == e5m2
    assert lp.fp8_dtype_for(Format.E4M3, "cuda:0") == e4m3
    assert lp.fp8_dtype_for("E5M2", "cuda:0") == e5m2
    assert lp.fp8_dtype_for(Format.HYBRID, "cuda:0", is_fwd_stage=True) == e4m3
    assert lp.fp8_dtype_for(Format.HYBRID, "cuda:0", is_fwd_stage=False) == e5m2
    assert Float8QuantConfig(format=Format.HYBRID).dtype("cuda:0", is_fwd_stage=False) == e5m2


def test_cpu_uses_ocp_dtypes_and_fp4_is_rejected_as_fp8():
    assert lp.float8_e4m3_dtype() == torch.float8_e4m3fn
    assert lp.float8_e5m2_dtype(torch.device("cpu")) == torch.float8_e5m2
    with pytest.raises(ValueError, match="^format: E2M1_X2 is not an FP8 format"):
        lp.fp8_dtype_for(Format.E2M1_X2)


def test_import_does_not_touch_the_gpu():
    # Any device query at import would raise here.
    code = (
        "import torch\n"
        "def boom(*a, **k): raise RuntimeError('device queried at import')\n"
        "torch.cuda.get_device_properties = boom\n"
        "torch.cuda.current_device = boom\n"
        "torch.cuda.is_available = boom\n"
        "import turbo_core, turbo_core.low_precision, turbo_core.quantized_tensor, turbo_core.ops\n"
        "print(turbo_core.low_precision.float8_e4m3_dtype())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "torch.float8_e4m3fn"


def test_fp4_and_e8m0_dtypes_exist_in_this_torch():
    assert lp.FLOAT4_E2M1FN_X2 is torch.float4_e2m1fn_x2
    assert lp.float4_e2m1_dtype() is torch.float4_e2m1fn_x2
    assert lp.E8M0_DTYPE is torch.float8_e8m0fnu
    assert lp.is_fp4_dtype(torch.float4_e2m1fn_x2) and not lp.is_fp4_dtype(torch.uint8)
    assert Float4QuantConfig().dtype() is torch.float4_e2m1fn_x2


@pytest.mark.parametrize("dtype, vmax, emax", [
    (torch.float8_e4m3fn, 448.0, 8), (torch.float8_e5m2, 57344.0, 15),
    (torch.float8_e4m3fnuz, 240.0, 7), (torch.float8_e5m2fnuz, 57344.0, 15),
    (torch.float4_e2m1fn_x2, 6.0, 2),
])
def test_max_values_and_mx_emax(dtype, vmax, emax):
    assert lp.fp8_max(dtype) == vmax
    assert lp.mx_emax(dtype) == emax


def test_format_of_and_fp8_max_reject_other_dtypes():
    assert lp.format_of(torch.float8_e4m3fnuz) is Format.E4M3
    assert lp.format_of(torch.float8_e5m2) is Format.E5M2
    assert lp.format_of(torch.float4_e2m1fn_x2) is Format.E2M1_X2
    with pytest.raises(ValueError, match="^dtype:"):
        lp.format_of(torch.bfloat16)
    with pytest.raises(ValueError, match="^dtype:"):
        lp.fp8_max(torch.float16)


def test_float8_config_defaults_and_normalisation():
    c = Float8QuantConfig()
    assert (c.format, c.granularity, c.strategy, c.scale_dtype, c.block_size) == (
        Format.E4M3, ScalingGranularity.TENSORWISE, ScalingStrategy.DYNAMIC, ScaleDtype.FP32, None)
    mx = Float8QuantConfig(format="e5m2", granularity="MX_BLOCKWISE")
    assert mx.format is Format.E5M2 and mx.scale_dtype is ScaleDtype.E8M0 and mx.block_size == 32
    blk = Float8QuantConfig(granularity=ScalingGranularity.BLOCKWISE, block_size=128)
    assert blk.block_size == 128 and blk.scale_dtype is ScaleDtype.FP32
    explicit = Float8QuantConfig(format=Format.E5M2, granularity="MX_BLOCKWISE", block_size=32,
                                 scale_dtype=ScaleDtype.E8M0)
    assert explicit == mx
    with pytest.raises(TypeError, match="unhashable"):  # mutable (assignment: test_quant_config_assign.py)
        hash(c)


@pytest.mark.parametrize("kwargs, match", [
    (dict(granularity="BLOCKWISE"), "^block_size: BLOCKWISE needs a block size"),
    (dict(granularity="BLOCKWISE", block_size=0), "^block_size: expected a positive int"),
    (dict(granularity="BLOCKWISE", block_size=True), "^block_size: expected a positive int"),
    (dict(granularity="MX_BLOCKWISE", block_size=64), "^block_size: MX_BLOCKWISE needs 32"),
    (dict(granularity="MX_BLOCKWISE", scale_dtype=ScaleDtype.FP32), "^scale_dtype: MX_BLOCKWISE needs E8M0"),
    (dict(granularity="ROWWISE", scale_dtype="E8M0"), "^scale_dtype: ROWWISE uses FP32"),
    (dict(granularity="TENSORWISE", block_size=128), "^block_size: TENSORWISE has no blocks"),
    (dict(format=Format.E2M1_X2), "^format: E2M1_X2 is FP4; use Float4QuantConfig"),
    (dict(format="E3M4"), "^format: expected one of"),
    (dict(granularity="PER_CHANNEL"), "^granularity: expected one of"),
    (dict(strategy="DELAYED"), "^strategy: only DYNAMIC"),
    (dict(scale_dtype="FP16"), "^scale_dtype: expected FP32 or E8M0"),
])
def test_float8_config_validation_names_the_field(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Float8QuantConfig(**kwargs)


def test_float4_config():
    c = Float4QuantConfig(use_gradient_sr=True)
    assert (c.format, c.granularity, c.scale_dtype, c.block_size, c.use_gradient_sr, c.use_preshuffle) == (
        Format.E2M1_X2, ScalingGranularity.MX_BLOCKWISE, ScaleDtype.E8M0, 32, True, False)
    for kwargs, exc, match in [
        (dict(format=Format.E4M3), ValueError, "^format: Float4QuantConfig needs E2M1_X2"),
        (dict(granularity="BLOCKWISE"), ValueError, "^granularity: Float4QuantConfig needs MX_BLOCKWISE"),
        (dict(block_size=16), ValueError, "^block_size: Float4QuantConfig needs 32"),
        (dict(scale_dtype=ScaleDtype.FP32), ValueError, "^scale_dtype: Float4QuantConfig needs E8M0"),
        (dict(strategy="STATIC"), ValueError, "^strategy: only DYNAMIC"),
        (dict(use_preshuffle="yes"), TypeError, "^use_preshuffle: expected a bool"),
    ]:
        with pytest.raises(exc, match=match):
            Float4QuantConfig(**kwargs)
