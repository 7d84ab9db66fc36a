"""Benchmark suites by name. Each module ``turbo_core.bench.suites.<name>`` has
``run(*, quick, tokens, models, providers, include_reference, warmup, iters, device, progress)``
returning JSON-ready rows, and may have ``print_table(rows, console)`` (else the TFLOP/s table of
``turbo_core.bench.console`` is used). ``gemm``/``grouped_gemm`` are scored in TFLOP/s, ``norm`` and
``activation`` and ``quant`` (memory-bound) in GB/s and the fraction of the measured copy bandwidth. The FP8
suites ``gemm-fp8`` / ``grouped-gemm-fp8`` (modules ``gemm_fp8`` / ``grouped_gemm_fp8``) also take
``granularities``, ``fp8_format`` and ``passes``. ``attention`` (flash attention, forward and
backward) is scored in TFLOP/s against SDPA's cuDNN and flash backends and also takes ``passes``
(``fwd``, ``bwd``). ``moe`` (the router and the token permutation, forward and backward, at
DeepSeek-V3 / Qwen3-235B / Mixtral shapes) is memory-bound, scored like ``norm``; its fused-layer
cases (``fused_mega_moe`` against the eager loop over experts and its ``torch.compile``, module
``moe_mega``) in TFLOP/s by the wall clock. ``norm`` and
``activation`` also time liger-kernel where it has the op and is importable. ``moe-dispatch``
(module ``moe_dispatch``) starts its own processes (NCCL over the visible GPUs; gloo on the CPU) and
scores expert-parallel dispatch/combine in GB/s against a raw ``all_to_all_single`` of the same rows.
``async-tp`` (module ``async_tp``) starts its processes the same way and scores the async
tensor-parallel ops in TFLOP/s against the unfused collective + ``torch.matmul``. ``cp-attention``
(module ``cp_attention``) starts its processes the same way and scores context-parallel attention
(Ulysses, ring, both; bf16 and FP8; also ``passes``) in TFLOP/s against the single-GPU kernel's
ideal scaling and ``torch.distributed.tensor.experimental.context_parallel``. The suites that start
their own processes also take ``world`` (the number of ranks). ``host`` times
what the host pays per eager call (tiny shapes, wall clock) for turbo's ops beside the PyTorch call
a user would write instead. ``linear-fp8`` (module ``linear_fp8``) times a linear layer's whole training step
(forward, backward, SGD) per FP8 recipe beside bf16 ``nn.Linear`` and torchao's float8 training.
``train`` times whole training steps (forward, loss, backward, AdamW) of real-width models
(Llama-3.1-8B, Mixtral-8x7B and Qwen3-30B-A3B at 2 layers, one DeepSeek-V3 MoE layer of an
expert-parallel rank): plain PyTorch eager and ``torch.compile``, turbo bf16 and its FP8 recipes,
torchao's float8 training; wall clock per step, tokens/s, peak memory and the loss after a fixed
number of steps beside plain PyTorch's. ``train --hf`` (:mod:`turbo_core.bench.hf_train`) times
Hugging Face Transformers models instead: unpatched, Liger-Kernel's patch, turbo's ``apply_turbo``.
``sparse-mla`` (module ``sparse_mla``) times DeepSeek-V3.2's sparse MLA attention (forward and backward,
also ``passes``) against dense masked SDPA, by the device clock and the wall clock. ``cross-entropy``
(module ``cross_entropy``) times the loss over a model's vocabulary (fwd and fwd+bwd, bf16 logits) against
eager ``F.cross_entropy`` on fp32 logits, its ``torch.compile`` and liger-kernel, by the wall clock, in GB/s of
the logits read and written."""

SUITES = ("gemm", "grouped_gemm", "norm", "activation", "quant", "gemm-fp8", "grouped-gemm-fp8", "attention",
          "moe", "moe-dispatch", "async-tp", "cp-attention", "host", "linear-fp8", "train",
          "sparse-mla", "cross-entropy")
