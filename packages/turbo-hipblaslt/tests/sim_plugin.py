"""Test plugin (loaded through TURBO_PLUGINS by test_simulated.py): backend BLASLTSIM, turbo-hipblaslt's
real kernels and capability checks on CPU tensors over the simulated library of ``fake_ext``."""

from turbo_core.plugins import BackendInfo, Kernel, hookimpl


@hookimpl
def turbo_backend_info():
    return BackendInfo(name="BLASLTSIM", package="turbo-hipblaslt-tests", version="0", platforms=("cpu",),
                       description="turbo-hipblaslt's kernels over a simulated BLASLt (tests only)")


@hookimpl
def turbo_register_kernels(register):
    for prim, ref in (("gemm", "gemm:gemm"), ("gemm_fp8", "gemm_fp8:gemm_fp8"),
                      ("grouped_gemm", "grouped_gemm:grouped_gemm"),
                      ("grouped_gemm_variable_k", "grouped_gemm:grouped_gemm_variable_k")):
        module, fn = ref.split(":")
        check = "can_handle_variable_k" if fn.endswith("variable_k") else "can_handle"
        register(Kernel(prim, "BLASLTSIM", f"turbo_hipblaslt.{module}:{fn}", check=f"turbo_hipblaslt.{module}:{check}"))
