"""Model shapes (Hugging Face configs; see the benchmark reference)."""

from __future__ import annotations

#: Dense layers per model: (name, out_features, in_features).
DENSE = {
    "llama3.1-8b": [("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 28672, 4096), ("down", 4096, 14336)],
    "llama3.1-70b": [("qkv", 10240, 8192), ("o", 8192, 8192), ("gate_up", 57344, 8192), ("down", 8192, 28672)],
    "llama3.1-405b": [("qkv", 18432, 16384), ("o", 16384, 16384), ("gate_up", 106496, 16384),
                      ("down", 16384, 53248)],
}

#: Tiny shapes for --quick (CPU smoke runs).
QUICK = {"tiny": [("qkv", 96, 64), ("down", 64, 160)]}
