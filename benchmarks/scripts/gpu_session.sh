#!/usr/bin/env bash
# One GPU-machine call that checks and measures everything at once (run from the repository root
# of a clean snapshot; OUT is the folder results go to). Parts run one after another, each under its
# own time limit, and a failing part does not stop the next.
#   OUT=/some/dir bash benchmarks/scripts/gpu_session.sh [part ...]
# Parts: gputests fp8check normcheck normsweep normbench groupedcheck groupedbench
#        tritonfp8check fp8bench gg8check gg8gluon gg8bench conformance fp8acc issue5rest issue5gaps1 issue5gaps2 permutesweep wtsweep fp4deq s15final gqfast mhprobe rmsprobe writemix opstep dispatch quantcheck quantsweep quantbench gquant moecheck attncheck attnspeed routerfp4 attnbench attntiles hipblaslt
#        attnfp8 tunegemm demoparity moebench tunehipblaslt hbbench hbbwd hbgap hbalgotests accuracy profile
#        deepepkernels moedispatch nccltests asynctp epcheck (the last four on the two-GPU kind)
set -u
OUT=${OUT:?set OUT}
ROOT=$(pwd)
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export PYTHONPATH=$ROOT/packages/turbo-core/src:$ROOT/packages/turbo-triton/src
export TURBO_PLUGINS=turbo_core.reference.plugin,turbo_triton.plugin
# turbo-hipblaslt from the snapshot, its plugin loaded, the extension built by the JIT into one cache per machine
hb_env() {
  export PYTHONPATH=$PYTHONPATH:$ROOT/packages/turbo-hipblaslt/src TURBO_PLUGINS=$TURBO_PLUGINS,turbo_hipblaslt.plugin \
         TURBO_HIPBLASLT_JIT=1 TURBO_HIPBLASLT_CACHE_DIR=/tmp/turbo_hb_jit
}
parts=${*:-gputests fp8check normcheck normbench groupedcheck groupedbench}
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)"
} > "$OUT/environment.txt" 2>&1
for part in $parts; do
  echo "=== $part $(date +%T)"
  case $part in
    gputests)  # GPU-marked tests of turbo-core, with the packages installed (entry points) from the carried wheels
      (python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/bt .whl/*.whl \
        && PYTHONPATH=/tmp/bt python3 -m pip install -q --no-build-isolation --no-deps --no-index -e packages/turbo-core \
        && env -u TURBO_PLUGINS PYTHONPATH= timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider packages/turbo-core/tests \
        ) > "$OUT/gputests.log" 2>&1; tail -5 "$OUT/gputests.log" ;;
    fp8check) timeout 150 python3 benchmarks/scripts/gemm_fp8_gpu_check.py --out "$OUT/gemm_fp8_check.json" > "$OUT/gemm_fp8_check.log" 2>&1; tail -5 "$OUT/gemm_fp8_check.log" ;;
    normcheck) timeout 180 python3 benchmarks/scripts/norm_act_h200.py --out "$OUT/norm_check.json" --parts check,graph > "$OUT/norm_check.log" 2>&1; tail -5 "$OUT/norm_check.log" ;;
    normsweep) timeout 400 python3 benchmarks/scripts/norm_act_h200.py --out "$OUT/norm_sweep.json" --parts sweep_norm,sweep_glu > "$OUT/norm_sweep.log" 2>&1; grep -E "heuristic|copy" "$OUT/norm_sweep.log" | tail -30 ;;
    normbench) timeout 200 python3 benchmarks/scripts/norm_act_h200.py --out "$OUT/norm_bench.json" --parts bench --tokens 16384 > "$OUT/norm_bench.log" 2>&1; tail -30 "$OUT/norm_bench.log" ;;
    groupedcheck) timeout 150 python3 benchmarks/scripts/grouped_gemm_h200.py --out "$OUT/grouped_check.json" --check-only > "$OUT/grouped_check.log" 2>&1; tail -8 "$OUT/grouped_check.log" ;;
    groupedbench) timeout 240 python3 benchmarks/scripts/grouped_gemm_h200.py --out "$OUT/grouped_bench.json" --skip-check --max-minutes 3.5 > "$OUT/grouped_bench.log" 2>&1; tail -30 "$OUT/grouped_bench.log" ;;
    tritonfp8check) timeout 200 python3 benchmarks/scripts/gemm_fp8_triton_h200.py --out "$OUT/gemm_fp8_triton_check.json" --parts check > "$OUT/gemm_fp8_triton_check.log" 2>&1; tail -3 "$OUT/gemm_fp8_triton_check.log" ;;
    fp8bench) timeout 400 python3 benchmarks/scripts/fp8_bench_h200.py --out "$OUT/fp8_bench.json" --max-minutes 6 > "$OUT/fp8_bench.log" 2>&1; tail -30 "$OUT/fp8_bench.log" ;;
    gg8check) timeout 240 python3 benchmarks/scripts/grouped_gemm_fp8_gpu_check.py --out "$OUT/gg8_check.json" --check-only > "$OUT/gg8_check.log" 2>&1; tail -5 "$OUT/gg8_check.log" ;;
    gg8gluon)  # the Gluon grouped FP8 kernels, sm90's default (forward, dgrad, BLOCKWISE wgrad): their GPU tests (and the dense Gluon kernel's), then the bench with them beside the Triton kernels
      TRITON_INTERPRET=0 timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider packages/turbo-triton/tests/test_grouped_gemm_fp8_gluon.py \
        packages/turbo-triton/tests/test_gemm_fp8_gluon.py > "$OUT/gg8_gluon_tests.log" 2>&1 \
        || { tail -40 "$OUT/gg8_gluon_tests.log"; echo "gg8gluon: GPU tests failed, bench skipped"; continue; }
      tail -5 "$OUT/gg8_gluon_tests.log"
      timeout 330 python3 benchmarks/scripts/grouped_gemm_fp8_gpu_check.py --out "$OUT/gg8_gluon_bench.json" --skip-check --gluon --max-minutes 5 \
        > "$OUT/gg8_gluon_bench.log" 2>&1; tail -45 "$OUT/gg8_gluon_bench.log" ;;
    gg8bench) timeout 300 python3 benchmarks/scripts/grouped_gemm_fp8_gpu_check.py --out "$OUT/gg8_bench.json" --skip-check --gluon --max-minutes 4 > "$OUT/gg8_bench.log" 2>&1; tail -40 "$OUT/gg8_bench.log" ;;
    conformance)  # the shared conformance suite on the GPU (CONFORMANCE_BACKENDS, default TRITON: issues 5 and 11)
      timeout ${CONFORMANCE_S:-580} python3 benchmarks/scripts/conformance_gpu.py --backends "${CONFORMANCE_BACKENDS:-TRITON}" ${CONFORMANCE_ARGS:-} --out "$OUT/conformance_gpu.json" \
        > "$OUT/conformance_gpu.log" 2>&1; tail -20 "$OUT/conformance_gpu.log" ;;
    issue5gaps1)  # issue 5's never-timed figures, part 1: liger beside the fused rmsnorm_residual backward (the wheel from .whl/, copied into the snapshot), torch.compile of MXFP4 (every variant) and of the index ops
      python3 -m pip install -q --no-index --no-deps --target /tmp/liger .whl/liger_kernel-*.whl > /dev/null 2>&1 || echo "issue5gaps1: no liger wheel under .whl/"
      PYTHONPATH=$PYTHONPATH:/tmp/liger timeout 560 python3 benchmarks/scripts/issue5_coverage_h200.py --out "$OUT/issue5_gaps1.json" \
        --parts ${GAPS1_PARTS:-resbwd,fp4compile,index} --limits ${GAPS1_LIMITS:-resbwd=60,fp4compile=240,index=120} ${GAPS1_ARGS:-} > "$OUT/issue5_gaps1.log" 2>&1; tail -60 "$OUT/issue5_gaps1.log" ;;
    issue5gaps2)  # part 2: grouped quantization beside its eager and compiled reference, grouped quantization at small sizes, the FP8/FP4 variants never timed at small sizes
      timeout 560 python3 benchmarks/scripts/issue5_coverage_h200.py --out "$OUT/issue5_gaps2.json" --parts grouped,groupedsmall,small \
        --ops q-rowwise-first,q-block128x1,q-block2d-32,fp4-dq-row-f32,fp4-dq-row-f16,fp4-dq-col-f32 \
        --limits ${GAPS2_LIMITS:-grouped=240,groupedsmall=150,small=120} > "$OUT/issue5_gaps2.log" 2>&1; tail -60 "$OUT/issue5_gaps2.log" ;;
    wtsweep)  # ROWWISE quantize_fp8_with_trans: first-kernel launch variants vs the two quantize_fp8 calls (bit-compared)
      timeout ${WTSWEEP_S:-300} python3 benchmarks/scripts/quant_rowwise_with_trans_sweep.py --out "$OUT/wt_rowwise_sweep.json" ${WTSWEEP_ARGS:-} \
        > "$OUT/wt_rowwise_sweep.log" 2>&1; sort -t x -k3 "$OUT/wt_rowwise_sweep.log" | tail -12; grep -E "calls|alone|default|differs|Error" "$OUT/wt_rowwise_sweep.log" | head -12 ;;
    fp4deq)  # MXFP4 checks (fp16/fp32 dequantize on the PTX decoder included), then the fp4compile and grouped timings
      timeout 200 python3 benchmarks/scripts/router_fp4_gpu_check.py --out "$OUT/fp4_check.json" --parts fp4 --quick > "$OUT/fp4_check.log" 2>&1; tail -6 "$OUT/fp4_check.log"
      timeout 300 python3 benchmarks/scripts/issue5_coverage_h200.py --out "$OUT/issue5_fp4deq.json" --parts fp4compile,grouped \
        --limits fp4compile=120,grouped=200 > "$OUT/issue5_fp4deq.log" 2>&1; grep -vE "^(fp4-q|/opt|  torch)" "$OUT/issue5_fp4deq.log" | tail -40 ;;
    s15final)  # session 15's changes on the GPU: grouped quantization checks (fast paths), then grouped / index / ROWWISE with_trans timings
      timeout 260 python3 benchmarks/scripts/grouped_quant_gpu_check.py --parts check,graph --out "$OUT/gquant_check.json" > "$OUT/gquant_check.log" 2>&1; tail -12 "$OUT/gquant_check.log"
      timeout 260 python3 benchmarks/scripts/issue5_coverage_h200.py --out "$OUT/issue5_final.json" --parts quantcompile,index,grouped \
        --qc-variants wt-rowwise,q-rowwise-first,q-rowwise-last --limits quantcompile=40,index=60,grouped=150 > "$OUT/issue5_final.log" 2>&1
      grep -vE "^(/opt|  torch)" "$OUT/issue5_final.log" | tail -45 ;;
    gqfast)  # the grouped quantization fast paths (fast=True) bit for bit against the reference on the GPU, in a graph, timed beside fast=False and the dense ops
      timeout ${GQFAST_S:-400} python3 benchmarks/scripts/grouped_quant_fast_gpu.py --out "$OUT/grouped_fast.json" ${GQFAST_ARGS:-} > "$OUT/grouped_fast.log" 2>&1; tail -40 "$OUT/grouped_fast.log" ;;
    mhprobe)  # indices_to_multihot_bwd: launch shapes (row tiles, one element a lane) beside torch.compile, three models, 1-16384 tokens
      timeout ${MHPROBE_S:-300} python3 benchmarks/scripts/multihot_bwd_probe.py --out "$OUT/multihot_bwd_probe.json" > "$OUT/multihot_bwd_probe.log" 2>&1; grep -vE "^(/opt|  torch)" "$OUT/multihot_bwd_probe.log" | tail -25 ;;
    rmsprobe)  # RMSNorm forward: launch shapes and cache hints of the whole-row kernel beside torch.compile (Inductor's code kept)
      timeout ${RMSPROBE_S:-300} python3 benchmarks/scripts/rmsnorm_fwd_probe.py --out "$OUT/rmsnorm_fwd_probe.json" ${RMSPROBE_ARGS:-} > "$OUT/rmsnorm_fwd_probe.log" 2>&1; grep -vE "^(/opt|  torch)" "$OUT/rmsnorm_fwd_probe.log" | tail -60 ;;
    writemix)  # HBM bandwidth by read:write mix (copy, fill, sum, 1:K broadcast) at 16384 x 7168 bf16: the write-heavy ceiling
      timeout 120 python3 benchmarks/scripts/write_mix_bandwidth.py --out "$OUT/write_mix.json" > "$OUT/write_mix.log" 2>&1; tail -12 "$OUT/write_mix.log" ;;
    opstep) timeout 400 python3 benchmarks/scripts/grouped_fp8_op_step_h200.py --out "$OUT/op_step.json" > "$OUT/op_step.log" 2>&1; grep -v "^ " "$OUT/op_step.log" | tail -40 ;;
    permutesweep) timeout ${SWEEP_S:-300} python3 benchmarks/scripts/moe_permute_search_sweep.py --out "$OUT/permute_sweep.json" ${SWEEP_ARGS:-} > "$OUT/permute_sweep.log" 2>&1; tail -60 "$OUT/permute_sweep.log" ;;
    fp8acc)  # FP8 GEMM fp32 results vs float64 math on the dequantized operands: TRITON beside cuBLASLt (the gate of assert_close_fp8_gemm)
      timeout 300 python3 benchmarks/scripts/fp8_accumulation_gpu.py --out "$OUT/fp8_accumulation.json" > "$OUT/fp8_accumulation.log" 2>&1; tail -60 "$OUT/fp8_accumulation.log" ;;
    issue5rest)  # issue 5's two untimed changes: the fused rmsnorm_residual backward, and FP4/router in device time
      timeout 120 python3 benchmarks/scripts/issue5_coverage_h200.py --out "$OUT/issue5_resbwd.json" --parts resbwd --limits resbwd=60 \
        > "$OUT/issue5_resbwd.log" 2>&1; tail -15 "$OUT/issue5_resbwd.log"
      timeout 300 python3 benchmarks/scripts/router_fp4_gpu_check.py --out "$OUT/router_fp4_held.json" --timing held \
        > "$OUT/router_fp4_held.log" 2>&1; tail -30 "$OUT/router_fp4_held.log" ;;
    dispatch) timeout 60 python3 benchmarks/scripts/dispatch_overhead.py --device cuda --prims gemm,grouped_gemm --out "$OUT/dispatch_overhead.json" > "$OUT/dispatch.log" 2>&1; tail -30 "$OUT/dispatch.log" ;;
    quantcheck) timeout 580 python3 benchmarks/scripts/quant_fp8_gpu_check.py --parts check,graph --out "$OUT/quant_fp8.json" > "$OUT/quant_fp8.log" 2>&1; tail -30 "$OUT/quant_fp8.log" ;;
    quantsweep) timeout 580 python3 benchmarks/scripts/quant_fp8_gpu_check.py --parts sweep --out "$OUT/quant_sweep.json" > "$OUT/quant_sweep.log" 2>&1; tail -30 "$OUT/quant_sweep.log" ;;
    quantbench) timeout 580 python3 benchmarks/scripts/quant_fp8_gpu_check.py --parts bench --shapes 16384x8192 ${QUANT_BENCH_ARGS:-} --out "$OUT/quant_bench.json" > "$OUT/quant_bench.log" 2>&1; tail -40 "$OUT/quant_bench.log" ;;
    gquant) timeout 400 python3 benchmarks/scripts/grouped_quant_gpu_check.py --out "$OUT/grouped_quant.json" > "$OUT/grouped_quant.log" 2>&1; tail -30 "$OUT/grouped_quant.log" ;;
    moecheck) timeout ${MOECHECK_S:-580} python3 benchmarks/scripts/moe_permute_gpu_check.py --out "$OUT/moe_permute.json" ${MOECHECK_ARGS:-} > "$OUT/moe_permute.log" 2>&1; tail -30 "$OUT/moe_permute.log" ;;
    attncheck) timeout 400 python3 benchmarks/scripts/attention_gpu_check.py --parts check --out "$OUT/attention_check.json" > "$OUT/attention_check.log" 2>&1; tail -20 "$OUT/attention_check.log" ;;
    attnspeed) timeout 300 python3 benchmarks/scripts/attention_gpu_check.py --parts speed --out "$OUT/attention_speed.json" > "$OUT/attention_speed.log" 2>&1; tail -8 "$OUT/attention_speed.log" ;;
    routerfp4) timeout 300 python3 benchmarks/scripts/router_fp4_gpu_check.py --out "$OUT/router_fp4.json" > "$OUT/router_fp4.log" 2>&1; tail -30 "$OUT/router_fp4.log" ;;
    attnbench) timeout 580 python3 benchmarks/scripts/attention_h200.py --out "$OUT/attention_bench.json" --max-minutes ${ATTN_MINUTES:-8.5} ${ATTN_MODELS:+--models $ATTN_MODELS} > "$OUT/attention_bench.log" 2>&1; tail -40 "$OUT/attention_bench.log" ;;
    attntiles) timeout 580 python3 benchmarks/scripts/attention_h200.py --sweep --out "$OUT/attention_tiles.json" --max-minutes ${ATTN_MINUTES:-8.5} ${ATTN_SWEEP_ARGS:-} > "$OUT/attention_tiles.log" 2>&1; tail -30 "$OUT/attention_tiles.log" ;;
    hipblaslt) timeout 580 python3 benchmarks/scripts/hipblaslt_gpu_check.py --out "$OUT/hipblaslt_gpu_check.json" ${HIPBLASLT_PARTS:+--parts $HIPBLASLT_PARTS} > "$OUT/hipblaslt_gpu_check.log" 2>&1; tail -40 "$OUT/hipblaslt_gpu_check.log" ;;
    attnfp8) timeout 580 python3 benchmarks/scripts/attention_fp8_gpu_check.py --parts ${ATTN_FP8_PARTS:-check,speed} --out "$OUT/attention_fp8.json" > "$OUT/attention_fp8.log" 2>&1; tail -30 "$OUT/attention_fp8.log" ;;
    tunegemm) timeout 580 python3 benchmarks/scripts/tune_gemm_h200.py --out "$OUT/sm90.json" --tune-seconds 180 --check-seconds 60 > "$OUT/tune.log" 2>&1; tail -30 "$OUT/tune.log" ;;
    demoparity) timeout 580 python3 benchmarks/scripts/demo_parity_gpu.py --out "$OUT/demo_parity.json" --pytest > "$OUT/demo_parity.log" 2>&1; tail -30 "$OUT/demo_parity.log" ;;
    moebench) timeout ${MOE_S:-580} python3 benchmarks/scripts/moe_bench_h200.py --out "$OUT/moe_bench.json" ${MOE_PARTS:+--parts $MOE_PARTS} ${MOE_ARGS:-} > "$OUT/moe_bench.log" 2>&1; tail -40 "$OUT/moe_bench.log" ;;
    asynctp)  # turbo bench async-tp over every visible GPU (NCCL): fused all-gather/reduce-scatter GEMMs vs unfused
      timeout ${ASYNC_TP_TIMEOUT:-500} python3 -m turbo_core.cli bench async-tp ${ASYNC_TP_MODELS:+--models $ASYNC_TP_MODELS} \
        --out "$OUT/async_tp_bench.json" > "$OUT/async_tp_bench.log" 2>&1; tail -40 "$OUT/async_tp_bench.log" ;;
    moedispatch)  # turbo bench moe-dispatch over every visible GPU (NCCL); turbo-deepep from the snapshot
      (export PYTHONPATH=$PYTHONPATH:$ROOT/packages/turbo-deepep/src TURBO_PLUGINS=$TURBO_PLUGINS,turbo_deepep.plugin
       timeout ${MOE_DISPATCH_TIMEOUT:-500} python3 -m turbo_core.cli bench moe-dispatch ${MOE_DISPATCH_ARGS:-} \
         --out "$OUT/moe_dispatch_bench.json") > "$OUT/moe_dispatch_bench.log" 2>&1
      tail -40 "$OUT/moe_dispatch_bench.log" ;;
    deepepkernels)  # turbo-deepep's compiled routing / symmetric worst-mode kernels on one GPU (ranks simulated in one process)
      (export PYTHONPATH=$PYTHONPATH:$ROOT/packages/turbo-deepep/src
       timeout 300 python3 -m pytest -q -p no:cacheprovider packages/turbo-deepep/tests/test_all_to_all_fused.py \
         -k "route or compacted") > "$OUT/deepep_kernels.log" 2>&1; tail -5 "$OUT/deepep_kernels.log" ;;
    epcheck)  # moe_dispatch_x2.py: DEEP_EP checks, CUDA-graph capture and GB/s (symmetric and collective transports)
      (export PYTHONPATH=$PYTHONPATH:$ROOT/packages/turbo-deepep/src TURBO_PLUGINS=$TURBO_PLUGINS,turbo_deepep.plugin
       timeout 400 python3 benchmarks/scripts/moe_dispatch_x2.py ${EP_PARTS:+--parts $EP_PARTS} --out "$OUT/moe_dispatch_x2.json") > "$OUT/moe_dispatch_x2.log" 2>&1
      tail -60 "$OUT/moe_dispatch_x2.log" ;;
    tunehipblaslt)  # HIPBLASLT's algorithm rank per shape (bf16, then FP8), confirmed by --check: the DB it ships for sm90
      # HB_SEED=file starts from an earlier campaign's database; HB_SKIP_GEMM=1 skips the bf16 stage
      (hb_env
       db=$OUT/hipblaslt_sm90.json
       [ -n "${HB_SEED:-}" ] && cp "$HB_SEED" "$db"
       [ "${HB_SKIP_GEMM:-0}" = 1 ] || timeout 200 python3 benchmarks/scripts/tune_gemm_h200.py --out "$db" --backends HIPBLASLT \
         ${HB_SEED:+--merge} --tune-seconds ${HB_GEMM_S:-110} --check-seconds 40
       timeout 340 python3 benchmarks/scripts/tune_gemm_h200.py --out "$db" --backends HIPBLASLT \
         --suite gemm-fp8 --merge --tune-seconds ${HB_FP8_S:-210} --check-seconds 60
       python3 benchmarks/scripts/ship_tuning_db.py "$db" $OUT/hipblaslt_sm90*.check.json --out "$OUT/hipblaslt_sm90_ship.json"
      ) > "$OUT/tune_hipblaslt.log" 2>&1
      grep -E "summary|geomean|TFLOP/s of|invalid|do not ship|ship it|took|exited|wrote|drop" "$OUT/tune_hipblaslt.log" | tail -40 ;;
    tunefp8bwd)  # backend choice TRITON vs HIPBLASLT for the FP8 backward layouts (dgrad NN, wgrad TN), confirmed by --check
      (hb_env
       db=$OUT/fp8_bwd_sm90.json
       timeout 150 python3 -m turbo_core.cli tune gemm-fp8 --backends TRITON HIPBLASLT --no-configs \
         --models ${BWD_MODELS:-llama3.1-8b llama3.1-70b} --passes dgrad wgrad --time-limit ${BWD_S:-70} \
         --out "$db" --report "$OUT/fp8_bwd.tune.json"
       timeout 90 python3 -m turbo_core.cli tune --check "$db" --time-limit 35 --report "$OUT/fp8_bwd.check.json"
       python3 benchmarks/scripts/ship_tuning_db.py "$db" "$OUT/fp8_bwd.check.json" --out "$OUT/fp8_bwd_ship.json"
      ) > "$OUT/tunefp8bwd.log" 2>&1
      grep -E "wrote|drop|checked|turbo tune" "$OUT/tunefp8bwd.log" | tail -30 ;;
    hbbench)  # HIPBLASLT (with its tuned DB when OUT has one) vs torch on the gemm and gemm-fp8 suites
      (hb_env
       [ -f "$OUT/hipblaslt_sm90_ship.json" ] && export TURBO_TUNING_DB=$OUT/hipblaslt_sm90_ship.json
       models=${HB_MODELS:-llama3.1-8b llama3.1-70b llama3.1-405b}
       timeout 150 python3 -m turbo_core.cli bench gemm --models $models --providers torch turbo:HIPBLASLT \
         --rounds ${HB_ROUNDS:-1} --out "$OUT/hb_bench_gemm.json"
       timeout 330 python3 -m turbo_core.cli bench gemm-fp8 --models $models --granularities tensorwise rowwise blockwise \
         --providers torch._scaled_mm F.scaled_mm turbo:HIPBLASLT --rounds ${HB_ROUNDS:-1} ${HB_PASSES:+--passes $HB_PASSES} \
         --out "$OUT/hb_bench_gemm_fp8.json") > "$OUT/hbbench.log" 2>&1
      grep -vE "^\s*$" "$OUT/hbbench.log" | tail -30 ;;
    hbbwd)  # HIPBLASLT's FP8 backward layouts: GPU tests of the re-layout and the FP8 layouts, the re-layout micro-bench,
      # then gemm-fp8 dgrad/wgrad per operand storage (HBBWD_OPERANDS: k-major = the GEMM alone; pass = with re-layout)
      (hb_env
       timeout 200 python3 benchmarks/scripts/hipblaslt_gpu_check.py --out "$OUT/hb_bwd_tests.json" --parts pytest,graph \
         --pytest-k "relayout or fp8"
       timeout 90 python3 benchmarks/scripts/hipblaslt_relayout_h200.py --out "$OUT/hb_relayout.json"
       for ops in ${HBBWD_OPERANDS:-k-major pass}; do
         timeout ${HBBWD_S:-200} python3 -m turbo_core.cli bench gemm-fp8 --models ${HB_MODELS:-llama3.1-8b llama3.1-70b} \
           --granularities tensorwise rowwise blockwise --passes dgrad wgrad --operands $ops --rounds ${HB_ROUNDS:-2} \
           --providers torch._scaled_mm F.scaled_mm turbo:HIPBLASLT ${HBBWD_PROVIDERS:-turbo:TRITON} --out "$OUT/hb_bwd_$ops.json"
       done) > "$OUT/hbbwd.log" 2>&1
      grep -vE "^\s*$" "$OUT/hbbwd.log" | tail -40 ;;
    hbgap)  # HIPBLASLT FP8 vs torch._scaled_mm on the shapes where turbo bench gemm-fp8 showed a gap; every rank
      (hb_env
       timeout 150 python3 benchmarks/scripts/hipblaslt_fp8_gap.py --out "$OUT/hipblaslt_fp8_gap.json") > "$OUT/hbgap.log" 2>&1
      tail -14 "$OUT/hbgap.log" ;;
    hbalgotests)  # the GPU tests of the algorithm ranks and the version probe
      (export TURBO_HIPBLASLT_CACHE_DIR=/tmp/turbo_hb_jit
       timeout 200 python3 benchmarks/scripts/hipblaslt_gpu_check.py --out "$OUT/hipblaslt_algo_tests.json" --parts pytest \
         --pytest-k "algo or library_version or rank") > "$OUT/hbalgotests.log" 2>&1
      tail -8 "$OUT/hbalgotests.log" ;;
    accuracy)  # turbo accuracy at the model shapes, every available backend (TRITON, HIPBLASLT) vs float64
      (hb_env
       timeout ${ACC_S:-300} python3 -m turbo_core.cli accuracy --out "$OUT/accuracy.json" --markdown "$OUT/accuracy.md") > "$OUT/accuracy.log" 2>&1
      echo "accuracy exit $?"; tail -25 "$OUT/accuracy.log" ;;
    profile)  # turbo profile of a full-size bench suite and of the demo: hot-kernel tables + a trace
      (timeout 150 python3 -m turbo_core.cli profile --top 25 --out "$OUT/profile_gemm.json" --trace "$OUT/profile_gemm_trace.json" \
         bench gemm --models llama3.1-8b --iters 10 --warmup 3
       timeout 150 python3 -m turbo_core.cli profile --top 25 --out "$OUT/profile_attn.json" \
         bench attention --models llama3.1-8b --iters 5 --warmup 2) > "$OUT/profile.log" 2>&1
      tail -40 "$OUT/profile.log" ;;
    nccltests)  # the NCCL-marked pytest cases: turbo-deepep dispatch/combine, FP8AllToAll and the async-TP ops on two GPUs
      (export PYTHONPATH=$PYTHONPATH:$ROOT/packages/turbo-deepep/src TURBO_PLUGINS=$TURBO_PLUGINS,turbo_deepep.plugin
       timeout 400 python3 -m pytest -v -p no:cacheprovider -rs packages/turbo-deepep/tests/test_all_to_all_distributed.py::test_nccl \
         packages/turbo-core/tests/test_ops_fp8_all_to_all.py::test_fp8_all_to_all_over_nccl \
         packages/turbo-core/tests/test_ops_async_tp.py::test_async_tp_over_nccl) > "$OUT/nccltests.log" 2>&1
      tail -15 "$OUT/nccltests.log" ;;
    *) echo "unknown part $part" ;;
  esac
done
