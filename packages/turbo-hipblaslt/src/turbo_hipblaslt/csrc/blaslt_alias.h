// The thin alias layer: one set of names (namespace tb, macros TB_*) over cuBLASLt (default) or
// hipBLASLt (-DTURBO_BLASLT_ROCM). Only names and small signature differences live here; the logic
// is in turbo_blaslt.cpp and is the same on both platforms.
//
// Feature macros, set by the build (turbo_hipblaslt._toolchain greps the headers for the names):
//   TURBO_BLASLT_HAS_SCALE_MODE   <P>_MATMUL_DESC_A_SCALE_MODE exists (per-operand scale modes)
//   TURBO_BLASLT_HAS_OUTER_VEC    <P>_MATMUL_MATRIX_SCALE_OUTER_VEC_32F exists (row-wise FP8)
//   TURBO_BLASLT_HAS_BLOCK128     <P>_MATMUL_MATRIX_SCALE_VEC128_32F / BLK128x128_32F exist
//   TURBO_BLASLT_HAS_OCP_FP8      OCP E4M3/E5M2 data types exist (always on CUDA 11.8+)
//   TURBO_BLASLT_HAS_FNUZ_FP8     FNUZ E4M3/E5M2 data types exist (ROCm only)
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(TURBO_BLASLT_ROCM)

#ifndef __HIP_PLATFORM_AMD__
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hipblaslt/hipblaslt.h>

#define TB_PLATFORM "rocm"
#define TB_LIBRARY "hipBLASLt"
#define TB_DESC(name) HIPBLASLT_MATMUL_DESC_##name
#define TB_EPILOGUE(name) HIPBLASLT_EPILOGUE_##name
#define TB_PREF(name) HIPBLASLT_MATMUL_PREF_##name
#define TB_SCALE(name) HIPBLASLT_MATMUL_MATRIX_SCALE_##name
#define TB_HEADER_VERSION (HIPBLASLT_VERSION_MAJOR * 10000 + HIPBLASLT_VERSION_MINOR * 100 + HIPBLASLT_VERSION_PATCH)
#define TB_STATUS_NAMES(X)                                                                                   \
  X(HIPBLAS_STATUS_SUCCESS) X(HIPBLAS_STATUS_NOT_INITIALIZED) X(HIPBLAS_STATUS_ALLOC_FAILED)                  \
  X(HIPBLAS_STATUS_INVALID_VALUE) X(HIPBLAS_STATUS_MAPPING_ERROR) X(HIPBLAS_STATUS_EXECUTION_FAILED)          \
  X(HIPBLAS_STATUS_INTERNAL_ERROR) X(HIPBLAS_STATUS_NOT_SUPPORTED) X(HIPBLAS_STATUS_ARCH_MISMATCH)            \
  X(HIPBLAS_STATUS_HANDLE_IS_NULLPTR) X(HIPBLAS_STATUS_INVALID_ENUM) X(HIPBLAS_STATUS_UNKNOWN)

namespace tb {
using Handle = hipblasLtHandle_t;
using MatmulDesc = hipblasLtMatmulDesc_t;
using Layout = hipblasLtMatrixLayout_t;
using Preference = hipblasLtMatmulPreference_t;
using Algo = hipblasLtMatmulAlgo_t;
using Heuristic = hipblasLtMatmulHeuristicResult_t;
using Status = hipblasStatus_t;
using DataType = hipDataType;
using ComputeType = hipblasComputeType_t;
using Stream = hipStream_t;
using DescAttr = hipblasLtMatmulDescAttributes_t;
using PrefAttr = hipblasLtMatmulPreferenceAttributes_t;
using Operation = hipblasOperation_t;
using Epilogue = hipblasLtEpilogue_t;

constexpr Status kSuccess = HIPBLAS_STATUS_SUCCESS;
constexpr Status kNotSupported = HIPBLAS_STATUS_NOT_SUPPORTED;
constexpr Status kInvalidValue = HIPBLAS_STATUS_INVALID_VALUE;
constexpr Operation kOpN = HIPBLAS_OP_N;
constexpr Operation kOpT = HIPBLAS_OP_T;
constexpr DataType kF32 = HIP_R_32F;
constexpr DataType kF16 = HIP_R_16F;
constexpr DataType kBF16 = HIP_R_16BF;
constexpr bool kHasOcpFp8 =
#if defined(TURBO_BLASLT_HAS_OCP_FP8)
    true;
constexpr DataType kE4M3 = HIP_R_8F_E4M3;
constexpr DataType kE5M2 = HIP_R_8F_E5M2;
#else
    false;
constexpr DataType kE4M3 = HIP_R_32F;  // placeholders, never used (kHasOcpFp8 is false)
constexpr DataType kE5M2 = HIP_R_32F;
#endif
constexpr bool kHasFnuzFp8 =
#if defined(TURBO_BLASLT_HAS_FNUZ_FP8)
    true;
constexpr DataType kE4M3Fnuz = HIP_R_8F_E4M3_FNUZ;
constexpr DataType kE5M2Fnuz = HIP_R_8F_E5M2_FNUZ;
#else
    false;
constexpr DataType kE4M3Fnuz = HIP_R_32F;
constexpr DataType kE5M2Fnuz = HIP_R_32F;
#endif
constexpr ComputeType kCompute32F = HIPBLAS_COMPUTE_32F;
// hipBLASLt's xf32 exists on some archs only; exact fp32 is used for both requests.
constexpr ComputeType kCompute32FFastTF32 = HIPBLAS_COMPUTE_32F;
constexpr bool kHasAlignmentPrefs = false;

inline Status create(Handle* h) { return hipblasLtCreate(h); }
inline Status desc_create(MatmulDesc* d, ComputeType c, DataType s) { return hipblasLtMatmulDescCreate(d, c, s); }
inline Status desc_destroy(MatmulDesc d) { return hipblasLtMatmulDescDestroy(d); }
inline Status desc_set(MatmulDesc d, DescAttr a, const void* buf, size_t n) {
  return hipblasLtMatmulDescSetAttribute(d, a, buf, n);
}
inline Status layout_create(Layout* l, DataType t, uint64_t rows, uint64_t cols, int64_t ld) {
  return hipblasLtMatrixLayoutCreate(l, t, rows, cols, ld);
}
inline Status layout_destroy(Layout l) { return hipblasLtMatrixLayoutDestroy(l); }
inline Status pref_create(Preference* p) { return hipblasLtMatmulPreferenceCreate(p); }
inline Status pref_destroy(Preference p) { return hipblasLtMatmulPreferenceDestroy(p); }
inline Status pref_set(Preference p, PrefAttr a, const void* buf, size_t n) {
  return hipblasLtMatmulPreferenceSetAttribute(p, a, buf, n);
}
inline Status heuristic(Handle h, MatmulDesc d, Layout a, Layout b, Layout c, Layout dd, Preference p, int req,
                        Heuristic* out, int* returned) {
  return hipblasLtMatmulAlgoGetHeuristic(h, d, a, b, c, dd, p, req, out, returned);
}
inline Status matmul(Handle h, MatmulDesc d, const void* alpha, const void* A, Layout la, const void* B, Layout lb,
                     const void* beta, const void* C, Layout lc, void* D, Layout ld, const Algo* algo, void* ws,
                     size_t ws_size, Stream s) {
  return hipblasLtMatmul(h, d, alpha, A, la, B, lb, beta, C, lc, D, ld, algo, ws, ws_size, s);
}
// hipBLASLt reports its version through a handle.
constexpr bool kVersionNeedsHandle = true;
inline long long library_version(Handle h) {
  int v = 0;
  return hipblasLtGetVersion(h, &v) == kSuccess ? static_cast<long long>(v) : -1;
}
}  // namespace tb

#else  // CUDA: cuBLASLt

#include <cublasLt.h>

#define TB_PLATFORM "cuda"
#define TB_LIBRARY "cuBLASLt"
#define TB_DESC(name) CUBLASLT_MATMUL_DESC_##name
#define TB_EPILOGUE(name) CUBLASLT_EPILOGUE_##name
#define TB_PREF(name) CUBLASLT_MATMUL_PREF_##name
#define TB_SCALE(name) CUBLASLT_MATMUL_MATRIX_SCALE_##name
#define TB_HEADER_VERSION CUBLAS_VERSION
#define TB_STATUS_NAMES(X)                                                                                   \
  X(CUBLAS_STATUS_SUCCESS) X(CUBLAS_STATUS_NOT_INITIALIZED) X(CUBLAS_STATUS_ALLOC_FAILED)                     \
  X(CUBLAS_STATUS_INVALID_VALUE) X(CUBLAS_STATUS_ARCH_MISMATCH) X(CUBLAS_STATUS_MAPPING_ERROR)                \
  X(CUBLAS_STATUS_EXECUTION_FAILED) X(CUBLAS_STATUS_INTERNAL_ERROR) X(CUBLAS_STATUS_NOT_SUPPORTED)            \
  X(CUBLAS_STATUS_LICENSE_ERROR)

namespace tb {
using Handle = cublasLtHandle_t;
using MatmulDesc = cublasLtMatmulDesc_t;
using Layout = cublasLtMatrixLayout_t;
using Preference = cublasLtMatmulPreference_t;
using Algo = cublasLtMatmulAlgo_t;
using Heuristic = cublasLtMatmulHeuristicResult_t;
using Status = cublasStatus_t;
using DataType = cudaDataType_t;
using ComputeType = cublasComputeType_t;
using Stream = cudaStream_t;
using DescAttr = cublasLtMatmulDescAttributes_t;
using PrefAttr = cublasLtMatmulPreferenceAttributes_t;
using Operation = cublasOperation_t;
using Epilogue = cublasLtEpilogue_t;

constexpr Status kSuccess = CUBLAS_STATUS_SUCCESS;
constexpr Status kNotSupported = CUBLAS_STATUS_NOT_SUPPORTED;
constexpr Status kInvalidValue = CUBLAS_STATUS_INVALID_VALUE;
constexpr Operation kOpN = CUBLAS_OP_N;
constexpr Operation kOpT = CUBLAS_OP_T;
constexpr DataType kF32 = CUDA_R_32F;
constexpr DataType kF16 = CUDA_R_16F;
constexpr DataType kBF16 = CUDA_R_16BF;
constexpr bool kHasOcpFp8 = true;
constexpr DataType kE4M3 = CUDA_R_8F_E4M3;
constexpr DataType kE5M2 = CUDA_R_8F_E5M2;
constexpr bool kHasFnuzFp8 = false;  // FNUZ formats are AMD-only
constexpr DataType kE4M3Fnuz = CUDA_R_32F;
constexpr DataType kE5M2Fnuz = CUDA_R_32F;
constexpr ComputeType kCompute32F = CUBLAS_COMPUTE_32F;
constexpr ComputeType kCompute32FFastTF32 = CUBLAS_COMPUTE_32F_FAST_TF32;
constexpr bool kHasAlignmentPrefs = true;

inline Status create(Handle* h) { return cublasLtCreate(h); }
inline Status desc_create(MatmulDesc* d, ComputeType c, DataType s) { return cublasLtMatmulDescCreate(d, c, s); }
inline Status desc_destroy(MatmulDesc d) { return cublasLtMatmulDescDestroy(d); }
inline Status desc_set(MatmulDesc d, DescAttr a, const void* buf, size_t n) {
  return cublasLtMatmulDescSetAttribute(d, a, buf, n);
}
inline Status layout_create(Layout* l, DataType t, uint64_t rows, uint64_t cols, int64_t ld) {
  return cublasLtMatrixLayoutCreate(l, t, rows, cols, ld);
}
inline Status layout_destroy(Layout l) { return cublasLtMatrixLayoutDestroy(l); }
inline Status pref_create(Preference* p) { return cublasLtMatmulPreferenceCreate(p); }
inline Status pref_destroy(Preference p) { return cublasLtMatmulPreferenceDestroy(p); }
inline Status pref_set(Preference p, PrefAttr a, const void* buf, size_t n) {
  return cublasLtMatmulPreferenceSetAttribute(p, a, buf, n);
}
inline Status heuristic(Handle h, MatmulDesc d, Layout a, Layout b, Layout c, Layout dd, Preference p, int req,
                        Heuristic* out, int* returned) {
  return cublasLtMatmulAlgoGetHeuristic(h, d, a, b, c, dd, p, req, out, returned);
}
inline Status matmul(Handle h, MatmulDesc d, const void* alpha, const void* A, Layout la, const void* B, Layout lb,
                     const void* beta, const void* C, Layout lc, void* D, Layout ld, const Algo* algo, void* ws,
                     size_t ws_size, Stream s) {
  return cublasLtMatmul(h, d, alpha, A, la, B, lb, beta, C, lc, D, ld, algo, ws, ws_size, s);
}
// Byte relayout (cuBLASLt only: its sm89/sm90 FP8 kernels take only "TN", so an operand that is not
// K-contiguous is re-laid first): C = alpha * op(A) + beta * op(B) over CUDA_R_8I with an fp32 scale.
using TransformDesc = cublasLtMatrixTransformDesc_t;
constexpr DataType kI8 = CUDA_R_8I;
inline Status transform_desc_create(TransformDesc* d) { return cublasLtMatrixTransformDescCreate(d, CUDA_R_32F); }
inline Status transform_desc_destroy(TransformDesc d) { return cublasLtMatrixTransformDescDestroy(d); }
inline Status transform_desc_set_transa(TransformDesc d, Operation op) {
  return cublasLtMatrixTransformDescSetAttribute(d, CUBLASLT_MATRIX_TRANSFORM_DESC_TRANSA, &op, sizeof(op));
}
inline Status transform(Handle h, TransformDesc d, const void* alpha, const void* A, Layout la, const void* beta,
                        const void* B, Layout lb, void* C, Layout lc, Stream s) {
  return cublasLtMatrixTransform(h, d, alpha, A, la, beta, B, lb, C, lc, s);
}
// cuBLASLt reports the version of the library actually loaded (not the header's), without a handle.
constexpr bool kVersionNeedsHandle = false;
inline long long library_version(Handle) { return static_cast<long long>(cublasLtGetVersion()); }
}  // namespace tb

#endif

namespace tb {
inline const char* status_name(Status s) {
  switch (s) {
#define TB_STATUS_CASE(name) \
  case name:                 \
    return #name;
    TB_STATUS_NAMES(TB_STATUS_CASE)
#undef TB_STATUS_CASE
    default:
      return "UNKNOWN_STATUS";
  }
}
}  // namespace tb
