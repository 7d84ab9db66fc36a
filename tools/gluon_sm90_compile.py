"""Compile turbo-triton's Gluon sm90 FP8 GEMM kernels for Hopper without a GPU: the dense one, the grouped
forward and the grouped BLOCKWISE wgrad. Reports what ptxas says: shared memory, register spills and
the wgmma-serialization warning (C7514).

What it checks: that each configuration the launchers use compiles to sm_90a, fits its shared memory,
keeps 0 bytes of spills at the kernels' 168-register budget and has no ptxas C7514 (every wgmma
serialized). It does not run anything: results need a GPU (the kernels' ``@pytest.mark.gpu`` tests).

A script, not a test or a suite: it measures nothing, and it needs a Triton whose NVIDIA backend bundles
ptxas (CI's CPU Triton may not), and minutes of compiling; run it by hand after changing those kernels.

Usage (repository root, turbo-core and turbo-triton installed; no GPU needed):
  python3 tools/gluon_sm90_compile.py [--kernels dense,grouped] [--out compile.json]
Exit status 0 when every configuration compiled without spills or C7514.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource

from turbo_triton.gemm_fp8 import gluon_sm90 as dense
from turbo_triton.grouped_gemm_fp8 import gluon_sm90 as grouped
from turbo_triton.grouped_gemm_fp8 import gluon_variable_k_sm90 as variable_k

_TYPES = {"fp8e4nv": gl.float8e4nv, "bf16": gl.bfloat16, "fp16": gl.float16, "fp32": gl.float32}
_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
# (scaling mode, BLOCK_N, output type): what the launchers pick (BLOCKWISE and fp32 outputs at 128);
# mode 3 (dense only: BLOCKWISE with per-column b scales, wgrad's layout) runs with unit column stride,
# which Triton specializes to the constant 1 as the launch does
CONFIGS = [(0, 256, "bf16"), (1, 256, "bf16"), (1, 256, "fp16"), (2, 128, "bf16"), (1, 128, "fp32"),
           (2, 128, "fp32"), (3, 128, "bf16"), (3, 128, "fp32")]
#: the BLOCKWISE wgrad kernel's configurations (per-column scales, BLOCK_N 128): bf16 and fp32 results
VARIABLE_K = [(3, 128, "bf16"), (3, 128, "fp32")]


def _desc(dtype: str, shape: list[int]) -> str:
    layout = gl.NVMMASharedLayout.get_default_for(shape, _TYPES[dtype])
    return f"tensordesc<{dtype}[{shape[0]}, {shape[1]}],{layout!r}>"


def _common_sig(bn: int, out: str) -> dict:
    return {"a_desc": _desc("fp8e4nv", [128, 128]), "b_desc": _desc("fp8e4nv", [bn, 128]),
            "c_desc": _desc(out, [64, 64])}


def _dense(mode: int, bn: int, out: str, stages: int):
    sig = {**_common_sig(bn, out), "sa_ptr": "*fp32", "sb_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32",
           "s_am": "i32", "s_ak": "i32", "s_bk": "i32", "s_bn": "i32"}
    const = {"SCALING": mode, "A_ROW_DIV": 1, "STAGES": stages, "GROUP_M": 16, "NUM_PROGRAMS": 132,
             "PRODUCER_REGS": 40, "CONSUMER_REGS": 232, "DECOUPLED": True, "num_warps": 4}
    if mode == 3:
        const["s_bn"] = 1
    return dense.gemm_fp8_ws_kernel, sig, const


def _grouped(mode: int, bn: int, out: str, stages: int):
    sig = {**_common_sig(bn, out), "c_ptr": f"*{out}", "stride_cm": "i32", "sa_ptr": "*fp32", "sb_ptr": "*fp32",
           "offs_ptr": "*i64", "G": "i32", "M": "i32", "N": "i32", "K": "i32", "s_am": "i32", "s_ak": "i32",
           "s_bg": "i32", "s_bk": "i32", "s_bn": "i32"}
    const = {"SCALING": mode, "STAGES": stages, "GROUP_M": 8, "NUM_PROGRAMS": 132, "PRODUCER_REGS": 40,
             "CONSUMER_REGS": 232, "num_warps": 4}
    return grouped.grouped_gemm_fp8_ws_kernel, sig, const


def _variable_k(mode: int, bn: int, out: str, stages: int, accumulate: bool = False):
    sig = {"x_desc": _desc("fp8e4nv", [128, 128]), "y_desc": _desc("fp8e4nv", [bn, 128]),
           "c_desc": _desc(out, [64, 64]), "c_ptr": f"*{out}", "stride_cg": "i32", "stride_cr": "i32",
           "sx_ptr": "*fp32", "sy_ptr": "*fp32", "offs_ptr": "*i64", "G": "i32", "M": "i32", "R": "i32", "C": "i32",
           "s_xr": "i32", "s_xb": "i32", "s_yb": "i32"}
    const = {"s_xr": 1, "ACCUMULATE": accumulate, "STAGES": stages, "GROUP_M": 8, "NUM_PROGRAMS": 132,
             "PRODUCER_REGS": 40, "CONSUMER_REGS": 232, "num_warps": 4}
    return variable_k.grouped_gemm_fp8_variable_k_ws_kernel, sig, const


def compile_one(kernel: str, mode: int, bn: int, out: str, tmp: str) -> dict:
    stages = dense.stages_for(bn, 0 if kernel == "variable_k+acc" else _BYTES[out])  # as the launchers count
    if kernel.startswith("variable_k"):
        fn, sig, const = _variable_k(mode, bn, out, stages, kernel.endswith("+acc"))
    else:
        fn, sig, const = (_dense if kernel == "dense" else _grouped)(mode, bn, out, stages)
    sig = {**sig, **{k: "constexpr" for k in const}}
    names = fn.arg_names
    src = GluonASTSource(fn, sig, {(names.index(k),): v for k, v in const.items()})
    row = {"kernel": kernel, "scaling": mode, "block_n": bn, "out": out, "stages": stages}
    try:
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "maxnreg": 168})
    except Exception as exc:  # noqa: BLE001 - the row says why
        return {**row, "ok": False, "error": f"{type(exc).__name__}: {str(exc)[:400]}"}
    ptx = os.path.join(tmp, f"{kernel}_{mode}_{bn}_{out}.ptx")
    with open(ptx, "w") as fh:
        fh.write(compiled.asm["ptx"])
    ptxas = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")
    r = subprocess.run([ptxas, "-arch=sm_90a", "-v", "--maxrregcount", "168", ptx, "-o", ptx + ".cubin"],
                       capture_output=True, text=True)
    spills = [int(x) for x in re.findall(r"(\d+) bytes spill (?:stores|loads)", r.stderr)]
    c7514 = "C7514" in r.stderr
    ok = r.returncode == 0 and not any(spills) and not c7514 and compiled.metadata.shared <= dense._SMEM_BYTES
    return {**row, "ok": ok, "shared_bytes": compiled.metadata.shared, "spill_bytes": sum(spills),
            "c7514": c7514, "ptxas_rc": r.returncode}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernels", default="dense,grouped,variable_k,variable_k+acc",
                        help="dense, grouped (forward), variable_k (wgrad), variable_k+acc (wgrad accumulating)")
    parser.add_argument("--out", default=None, help="JSON rows to write")
    opts = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kernel in opts.kernels.split(","):
            for mode, bn, out in CONFIGS:
                if kernel.startswith("variable_k"):
                    if (mode, bn, out) not in VARIABLE_K:
                        continue
                elif kernel == "grouped" and mode == 3:  # per-column BLOCKWISE: the dense kernel's wgrad mode
                    continue
                row = compile_one(kernel, mode, bn, out, tmp)
                rows.append(row)
                print(json.dumps(row), flush=True)
    if opts.out:
        with open(opts.out, "w") as fh:
            json.dump({"triton": triton.__version__, "rows": rows}, fh, indent=1)
    bad = [r for r in rows if not r["ok"]]
    print(f"triton {triton.__version__}: {len(rows) - len(bad)} of {len(rows)} configurations ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
