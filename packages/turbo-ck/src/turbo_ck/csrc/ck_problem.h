// One GEMM as the binding hands it to an arch's Composable Kernel instances (plain C++, no CK, no Python).
//
// Row-major C = scale(A @ B) with A [M, K] row-major (lda = row stride) and B given as [N, K] row-major
// (ldb = row stride), i.e. CK's ALayout = RowMajor, BLayout = ColumnMajor, ELayout = RowMajor ("RCR").
// Scales are fp32 device vectors:
//   kRowwise:   a_scale [M], b_scale [N]            C[m, n] = a_scale[m] * b_scale[n] * sum_k A[m,k] B[n,k]
//   kBlockwise: a_scale [M, ceil(K/128)] (K fastest), b_scale [ceil(N/128), ceil(K/128)] (K fastest):
//               1x128 blocks of A, 128x128 tiles of B, applied per 128-wide K block in fp32
//   kPlain:     no scales (16-bit A/B)
// Products are accumulated in fp32; C is written once (no beta).
#pragma once

#include <string>

namespace turbo_ck {

enum DtypeCode : int { kF32 = 0, kF16 = 1, kBF16 = 2, kE4M3 = 3, kE5M2 = 4, kE4M3Fnuz = 5, kE5M2Fnuz = 6 };
enum Kind : int { kPlain = 0, kRowwise = 1, kBlockwise = 2 };

struct Problem {
  int kind = kPlain;
  int a_type = 0, b_type = 0, c_type = 0;
  long long m = 0, n = 0, k = 0;
  unsigned long long a = 0, b = 0, c = 0, a_scale = 0, b_scale = 0;
  long long lda = 0, ldb = 0, ldc = 0;
  unsigned long long stream = 0;
};

// Status of one launch: kOk, or why the instance declined (filled into *why).
enum Status : int { kOk = 0, kNoInstance = 1, kUnsupported = 2, kLaunchFailed = 3 };

// Defined once per compiled arch (instances_gfx942.cpp, instances_gfx950.cpp).
int run_gfx942(const Problem& p, std::string* why);
int run_gfx950(const Problem& p, std::string* why);

}  // namespace turbo_ck
