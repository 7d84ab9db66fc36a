// Composable Kernel instances of turbo_ck, templated on one arch's FP8 types (FNUZ on gfx942, OCP on
// gfx950). Included by exactly one translation unit per arch (instances_gfx942.cpp, instances_gfx950.cpp),
// each compiled with that arch's --offload-arch and CK_USE_FNUZ_FP8 / CK_USE_OCP_FP8.
//
// Device ops (CK's public device-op API, include/ck/tensor_operation/gpu/device/impl/):
//   * FP8 rowwise / tensorwise: DeviceGemmMultiD_Xdl_CShuffle_V3, two fp32 D tensors with stride 0
//     (D0 = a's scale, ColumnMajor: d0[m, n] = sa[m]; D1 = b's scale, RowMajor: d1[m, n] = sb[n]) and the
//     MultiplyMultiply epilogue (e = c * d0 * d1, c the fp32 accumulator, rounded once to E).
//   * FP8 blockwise: DeviceGemmMultiD_ABScale_Xdl_CShuffle_V3, ScaleBlockM = 1, ScaleBlockN = 128,
//     ScaleBlockK = 128 (a: 1x128 blocks, b: 128x128 tiles), K a multiple of 128.
//   * 16-bit (the grouped GEMM's groups): DeviceGemmMultiD_Xdl_CShuffle_V3 with no D and PassThrough.
// Every op: A RowMajor [M, K], B ColumnMajor (stored [N, K]), E RowMajor [M, N]; fp32 accumulation and
// CShuffle; tile 256 threads, 128 x 128 x (128 FP8 | 64 16-bit), XDL 32x32, 2x2 per wave, pipeline v1
// Intrawave (valid for every K; untuned). Vector accesses: 16 B along K for A and B, 8 elements of E.
#pragma once

#include <hip/hip_runtime.h>

#include <array>
#include <exception>
#include <string>

#include "ck/ck.hpp"
#include "ck/stream_config.hpp"
#include "ck/tensor_operation/gpu/device/gemm_specialization.hpp"
#include "ck/tensor_operation/gpu/device/impl/device_gemm_multiple_d_xdl_cshuffle_v3.hpp"
#include "ck/tensor_operation/gpu/device/impl/device_gemm_multiple_d_xdl_cshuffle_v3_ab_scale.hpp"
#include "ck/tensor_operation/gpu/device/tensor_layout.hpp"
#include "ck/tensor_operation/gpu/element/element_wise_operation.hpp"
#include "ck_problem.h"

namespace turbo_ck {
namespace inst {

template <ck::index_t... Is>
using S = ck::Sequence<Is...>;
using Row = ck::tensor_layout::gemm::RowMajor;
using Col = ck::tensor_layout::gemm::ColumnMajor;
using PassThrough = ck::tensor_operation::element_wise::PassThrough;
using MultiplyMultiply = ck::tensor_operation::element_wise::MultiplyMultiply;
using ck::tensor_operation::device::GemmSpecialization;
constexpr auto kIntrawave = ck::BlockGemmPipelineScheduler::Intrawave;
constexpr auto kV1 = ck::BlockGemmPipelineVersion::v1;

template <class A, class B, class E>
using RowwiseOp = ck::tensor_operation::device::DeviceGemmMultiD_Xdl_CShuffle_V3<
    Row, Col, ck::Tuple<Col, Row>, Row,                 // layouts of A, B, (D0, D1), E
    A, B, ck::Tuple<float, float>, E, float, float,     // A, B, Ds, E, accumulator, CShuffle
    PassThrough, PassThrough, MultiplyMultiply, GemmSpecialization::MNKPadding,
    256, 128, 128, 128, 16, 16, 32, 32, 2, 2,           // block, M/N/K per block, AK1, BK1, XDL, per wave
    S<8, 32, 1>, S<1, 0, 2>, S<1, 0, 2>, 2, 16, 16, 0,  // A block transfer
    S<8, 32, 1>, S<1, 0, 2>, S<1, 0, 2>, 2, 16, 16, 0,  // B block transfer
    1, 1, S<1, 32, 1, 8>, S<8, 1, 8>,                   // CShuffle; vector widths of E, D0, D1
    kIntrawave, kV1, A, B>;

template <class A, class B, class E>
using BlockwiseOp = ck::tensor_operation::device::DeviceGemmMultiD_ABScale_Xdl_CShuffle_V3<
    Row, Col, ck::Tuple<>, Row,
    A, float, B, float, ck::Tuple<>, E, float, float,   // A, A scale, B, B scale, Ds, E, acc, CShuffle
    PassThrough, PassThrough, PassThrough, GemmSpecialization::MNPadding,
    256, 1, 128, 128,                                   // block, ScaleBlockM, ScaleBlockN, ScaleBlockK
    128, 128, 128, 16, 16, 32, 32, 2, 2,
    S<8, 32, 1>, S<1, 0, 2>, S<1, 0, 2>, 2, 16, 16, 0,
    S<8, 32, 1>, S<1, 0, 2>, S<1, 0, 2>, 2, 16, 16, 0,
    1, 1, S<1, 32, 1, 8>, S<8>,
    kIntrawave, kV1, A, B>;

template <class T>
using PlainOp = ck::tensor_operation::device::DeviceGemmMultiD_Xdl_CShuffle_V3<
    Row, Col, ck::Tuple<>, Row,
    T, T, ck::Tuple<>, T, float, float,
    PassThrough, PassThrough, PassThrough, GemmSpecialization::MNKPadding,
    256, 128, 128, 64, 8, 8, 32, 32, 2, 2,
    S<8, 32, 1>, S<1, 0, 2>, S<1, 0, 2>, 2, 8, 8, 0,
    S<8, 32, 1>, S<1, 0, 2>, S<1, 0, 2>, 2, 8, 8, 0,
    1, 1, S<1, 32, 1, 8>, S<8>,
    kIntrawave, kV1, T, T>;

template <class T>
struct Tag {
  using type = T;
};

inline std::string dims(const Problem& p) {
  return "M=" + std::to_string(p.m) + " N=" + std::to_string(p.n) + " K=" + std::to_string(p.k) +
         " lda=" + std::to_string(p.lda) + " ldb=" + std::to_string(p.ldb) + " ldc=" + std::to_string(p.ldc);
}

template <class Op>
int launch(const typename Op::Argument& arg, const Problem& p, std::string* why) {
  Op op;
  if (!Op::IsSupportedArgument(arg)) {
    *why = op.GetTypeString() + " does not support " + dims(p);
    return kUnsupported;
  }
  try {
    auto invoker = Op::MakeInvoker();
    invoker.Run(arg, StreamConfig{reinterpret_cast<hipStream_t>(p.stream), false});
  } catch (const std::exception& e) {
    *why = op.GetTypeString() + ": " + e.what();
    return kLaunchFailed;
  }
  hipError_t err = hipGetLastError();
  if (err != hipSuccess) {
    *why = op.GetTypeString() + ": " + hipGetErrorString(err);
    return kLaunchFailed;
  }
  return kOk;
}

template <class A, class B, class E>
int run_rowwise(const Problem& p, std::string* why) {
  using Op = RowwiseOp<A, B, E>;
  auto arg = Op::MakeArgument(reinterpret_cast<const void*>(p.a), reinterpret_cast<const void*>(p.b),
                              std::array<const void*, 2>{reinterpret_cast<const void*>(p.a_scale),
                                                         reinterpret_cast<const void*>(p.b_scale)},
                              reinterpret_cast<void*>(p.c), p.m, p.n, p.k, p.lda, p.ldb,
                              std::array<ck::index_t, 2>{0, 0}, p.ldc, PassThrough{}, PassThrough{},
                              MultiplyMultiply{});
  return launch<Op>(arg, p, why);
}

template <class A, class B, class E>
int run_blockwise(const Problem& p, std::string* why) {
  using Op = BlockwiseOp<A, B, E>;
  auto arg = Op::MakeArgument(reinterpret_cast<const void*>(p.a), reinterpret_cast<const void*>(p.b),
                              std::array<const void*, 0>{}, reinterpret_cast<void*>(p.c), p.m, p.n, p.k, p.lda,
                              p.ldb, std::array<ck::index_t, 0>{}, p.ldc,
                              reinterpret_cast<const void*>(p.a_scale), reinterpret_cast<const void*>(p.b_scale),
                              PassThrough{}, PassThrough{}, PassThrough{});
  return launch<Op>(arg, p, why);
}

template <class T>
int run_plain(const Problem& p, std::string* why) {
  using Op = PlainOp<T>;
  auto arg = Op::MakeArgument(reinterpret_cast<const void*>(p.a), reinterpret_cast<const void*>(p.b),
                              std::array<const void*, 0>{}, reinterpret_cast<void*>(p.c), p.m, p.n, p.k, p.lda,
                              p.ldb, std::array<ck::index_t, 0>{}, p.ldc, PassThrough{}, PassThrough{},
                              PassThrough{});
  return launch<Op>(arg, p, why);
}

// Calls fn(Tag<T>{}) with the CK type of a 16-bit result dtype code.
template <class Fn>
int with_half(int code, Fn&& fn, std::string* why) {
  if (code == kBF16) return fn(Tag<ck::bhalf_t>{});
  if (code == kF16) return fn(Tag<ck::half_t>{});
  *why = "no instance writes dtype code " + std::to_string(code) + " (bf16 or fp16 only)";
  return kNoInstance;
}

// Calls fn(Tag<T>{}) with this arch's CK FP8 type for an FP8 dtype code (E4M3 -> F8, E5M2 -> BF8).
template <class F8, class BF8, class Fn>
int with_fp8(int code, int e4m3, int e5m2, Fn&& fn, std::string* why) {
  if (code == e4m3) return fn(Tag<F8>{});
  if (code == e5m2) return fn(Tag<BF8>{});
  *why = "FP8 dtype code " + std::to_string(code) + " is not this arch's FP8 flavour (codes " +
         std::to_string(e4m3) + ", " + std::to_string(e5m2) + ")";
  return kNoInstance;
}

template <class F8, class BF8>
int run_arch(const Problem& p, int e4m3, int e5m2, std::string* why) {
  if (p.kind == kPlain) {
    if (p.a_type != p.c_type || p.b_type != p.c_type) {
      *why = "16-bit GEMM: a, b and the result must share one dtype";
      return kNoInstance;
    }
    return with_half(p.c_type, [&](auto t) { return run_plain<typename decltype(t)::type>(p, why); }, why);
  }
  if (p.kind != kRowwise && p.kind != kBlockwise) {
    *why = "unknown kind " + std::to_string(p.kind);
    return kNoInstance;
  }
  return with_fp8<F8, BF8>(p.a_type, e4m3, e5m2, [&](auto ta) {
    return with_fp8<F8, BF8>(p.b_type, e4m3, e5m2, [&](auto tb) {
      return with_half(p.c_type, [&](auto te) {
        using A = typename decltype(ta)::type;
        using B = typename decltype(tb)::type;
        using E = typename decltype(te)::type;
        return p.kind == kRowwise ? run_rowwise<A, B, E>(p, why) : run_blockwise<A, B, E>(p, why);
      }, why);
    }, why);
  }, why);
}

}  // namespace inst
}  // namespace turbo_ck
