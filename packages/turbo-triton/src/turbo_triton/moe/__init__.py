"""MoE data movement in Triton: ``moe_permute_preprocess`` (the row map, by a deterministic
two-level prefix sum), ``moe_permute`` / ``moe_unpermute`` / ``moe_unpermute_bwd`` (bit-exact row
copies, fp32 sums in the row map's copy order), ``indices_to_multihot(_bwd)`` and
``tokens_per_expert_to_mask``. No host syncs: shapes decide grids and tiles."""
