"""``turbo demo``: train a small Llama-style decoder (dense + MoE blocks) built from turbo modules on
synthetic Markov-chain text; print one line per step, then the backend and call count (and
profiled time) of every turbo primitive that ran. Exits 1 when the loss did not fall (the mean of
the last three losses must be below 0.9 x the first)."""

from __future__ import annotations

import json
import sys

import torch

#: The loss must end below this fraction of the first step's loss.
FALL_RATIO = 0.9
#: ``--fp8`` choices: ``turbo_core.demo.model.FP8_RECIPES``, as literals so that building the parser
#: does not import the demo model (and through it every op).
FP8_RECIPES = ("none", "tensorwise", "rowwise", "blockwise")


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="train a small dense+MoE decoder built from turbo modules; per-op backend table",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=30, help="training steps (default 30)")
    p.add_argument("--fp8", choices=FP8_RECIPES, default="none",
                   help="FP8 recipe of every projection and expert GEMM (E4M3; blockwise: 128-blocks)")
    p.add_argument("--device", help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"),
                   help="model dtype (default: bfloat16 on a GPU, float32 on the CPU)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and the data (default 0)")
    p.add_argument("--no-profile", action="store_true", help="skip the profiled extra step (no per-op times)")
    p.add_argument("--json", metavar="FILE", help="write the losses, step times and op table as JSON here")


def run(args) -> int:
    from turbo_core.demo import DemoConfig, op_table, train

    if args.steps < 1:
        print(f"turbo demo: --steps must be >= 1, got {args.steps}", file=sys.stderr)
        return 2
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = getattr(torch, args.dtype or ("float32" if device.type == "cpu" else "bfloat16"))
    cfg = DemoConfig()
    print(f"turbo demo: {cfg.layers} layers (dense, MoE {cfg.experts} experts top-{cfg.topk}), d_model {cfg.d_model},"
          f" vocab {cfg.vocab}; device {device}, {str(dtype).replace('torch.', '')}, fp8 {args.fp8}", flush=True)

    def log(step: int, loss: float, ms: float) -> None:
        print(f"step {step}  loss {loss:.3f}  ms {ms:.1f}", flush=True)

    result = train(cfg, steps=args.steps, fp8=args.fp8, device=device, dtype=dtype, seed=args.seed,
                   profile=not args.no_profile, log=log)
    print()
    print(op_table(result))
    tail = result.losses[-3:]
    final = sum(tail) / len(tail)
    first = result.losses[0]
    fell = final < FALL_RATIO * first
    print(f"\nloss {first:.3f} -> {final:.3f} (mean of the last {len(tail)}; chain entropy {result.floor:.3f});"
          f" mean step {sum(result.step_ms) / len(result.step_ms):.1f} ms")
    if args.json:
        rows = [{"primitive": p, "backend": b, "calls": n, "profiled_calls": result.op_us.get((p, b), (0, 0.0))[0],
                 "profiled_us": result.op_us.get((p, b), (0, 0.0))[1]} for (p, b), n in sorted(result.calls.items())]
        with open(args.json, "w") as fh:
            json.dump({"device": str(device), "dtype": str(dtype), "fp8": args.fp8, "seed": args.seed,
                       "config": cfg.__dict__, "losses": result.losses, "step_ms": result.step_ms,
                       "chain_entropy": result.floor, "ops": rows, "loss_fell": fell}, fh, indent=1)
        print(f"turbo demo: wrote {args.json}", file=sys.stderr)
    if not fell:
        print(f"turbo demo: the loss did not fall below {FALL_RATIO} x the first ({first:.3f})", file=sys.stderr)
        return 1
    return 0
