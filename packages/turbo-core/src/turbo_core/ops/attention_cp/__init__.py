"""Context-parallel attention (Primus-Turbo's USP entry points): Ulysses all-to-all of heads inside,
ring attention outside, forward and backward on the dispatcher's attention primitives.

``flash_attn_usp_func`` / ``flash_attn_varlen_usp_func`` / ``flash_attn_fp8_usp_func`` take each
rank's shard of the sequence; ``usp_positions`` / ``usp_varlen_positions`` say which global
positions a rank holds. docs/context-parallel.md describes the semantics and the layouts.
"""

from turbo_core.ops.attention_cp.layout import usp_positions, usp_varlen_positions
from turbo_core.ops.attention_cp.usp import flash_attn_fp8_usp_func, flash_attn_usp_func, flash_attn_varlen_usp_func

__all__ = ["flash_attn_fp8_usp_func", "flash_attn_usp_func", "flash_attn_varlen_usp_func", "usp_positions",
           "usp_varlen_positions"]
