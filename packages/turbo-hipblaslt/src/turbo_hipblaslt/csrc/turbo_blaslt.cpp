// turbo_hipblaslt._C: column-major BLASLt matmul (cuBLASLt or hipBLASLt, see blaslt_alias.h) for Python.
//
// No libtorch, no pybind11: a CPython extension on the stable ABI (Py_LIMITED_API 3.10, one .abi3.so for
// every CPython >= 3.10). Every tensor crosses as plain integers: device index, data pointers, dtype codes,
// sizes and leading dimensions, the stream handle and a workspace pointer. The Python side
// (turbo_hipblaslt.layout / .blaslt) maps torch's row-major tensors onto these column-major calls.
//
// One call computes, in the library's column-major terms,
//     D = epilogue(alpha * scale_a * scale_b * op(A) @ op(B) + beta * D + bias)
// with op(A) m x k, op(B) k x n, D m x n (C is D: beta = 1 accumulates into D). Products are accumulated
// in fp32 (CUBLAS_COMPUTE_32F; fp32 inputs may ask for the TF32 fast mode), alpha/beta are fp32.
//
// Split-K: by default only reductions that keep partial sums in fp32 are allowed (cuBLASLt's reduction-scheme
// mask NONE | COMPUTE_TYPE), so a result is rounded once to its dtype; set_reduction_mask(0x7) also allows the
// in-place / output-type reductions (partial sums rounded to the output dtype), as torch does. hipBLASLt has no
// such preference.
//
// Algorithm selection: the library's heuristic (cublasLtMatmulAlgoGetHeuristic / hipblasLtMatmulAlgoGetHeuristic)
// ranks the algorithms it has for a configuration. The 29th argument `algo` (>= 0) picks one by its rank among
// the usable results (state == success), counting from 0: algo 0 is the heuristic's first choice, asked for alone
// (one result); algo = K > 0 asks for up to kMaxAlgos (16) results and takes the usable
// one of rank K, or fails at stage "heuristic" (NOT_SUPPORTED: "the heuristic offers only N algorithm(s) for
// ..., algo=K requested") when there are fewer. algo_count(<the 29 arguments>) says how many usable algorithms
// the heuristic offers (0..16), so a tuner can time each rank (turbo_hipblaslt.algos); library_version() names
// the loaded library's version (the tuning database records it).
//
// Descriptors and the heuristic's algorithm are cached per configuration (device, sizes, dtypes, layout,
// epilogue, scale modes, workspace size, pointer alignments, algo) in an LRU of bounded size; failures are cached
// too. Errors raise turbo_hipblaslt._C.BlasLtError (a RuntimeError) whose .status is the library's status
// name (e.g. "CUBLAS_STATUS_NOT_SUPPORTED") and .stage the step that failed ("handle", "setup",
// "heuristic", "matmul"; "grouped" for matmul_grouped). The GIL is held throughout (the library call only
// enqueues work). ROCm builds also have matmul_grouped (hipBLASLt's one-launch grouped GEMM, see below).
#define PY_SSIZE_T_CLEAN
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030A0000
#endif
#include <Python.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "blaslt_alias.h"

#if defined(TURBO_BLASLT_ROCM)
#include <exception>
#include <memory>

#include <hipblaslt/hipblaslt-ext.hpp>
#endif

namespace {

// -- codes shared with turbo_hipblaslt/codes.py --------------------------------------------------------------
enum DtypeCode : int { kCodeF32 = 0, kCodeF16 = 1, kCodeBF16 = 2, kCodeE4M3 = 3, kCodeE5M2 = 4,
                       kCodeE4M3Fnuz = 5, kCodeE5M2Fnuz = 6 };
enum ScaleCode : int { kScaleNone = -1, kScaleScalar = 0, kScaleOuterVec = 1, kScaleVec128 = 2,
                       kScaleBlk128 = 3 };
enum EpilogueCode : int { kEpiNone = 0, kEpiBias = 1, kEpiGelu = 2, kEpiGeluBias = 3 };

PyObject* g_error = nullptr;  // turbo_hipblaslt._C.BlasLtError

// The most algorithms asked of the heuristic (algo = K needs K < kMaxAlgos).
constexpr int kMaxAlgos = 16;

// One matmul as it arrives from Python (29 positional arguments, in this order).
struct Call {
  int device = 0;
  long long m = 0, n = 0, k = 0;
  int transa = 0, transb = 0;
  unsigned long long a = 0;
  int a_type = 0;
  long long lda = 0;
  unsigned long long b = 0;
  int b_type = 0;
  long long ldb = 0;
  unsigned long long d = 0;
  int d_type = 0;
  long long ldd = 0;
  double alpha = 1.0, beta = 0.0;
  int compute = 0;  // 0: exact fp32 accumulation; 1: fp32 inputs may use TF32
  int epilogue = kEpiNone;
  unsigned long long bias = 0;
  int bias_type = -1;
  unsigned long long a_scale = 0;
  int a_scale_mode = kScaleNone;
  unsigned long long b_scale = 0;
  int b_scale_mode = kScaleNone;
  unsigned long long stream = 0;
  unsigned long long workspace = 0;
  long long workspace_size = 0;
  int algo = 0;  // rank in the heuristic's list of usable algorithms (0: its first choice)
};

constexpr const char* kCallFormat = "iLLLiiKiLKiLKiLddiiKiKiKiKKLi";

bool parse_call(PyObject* tuple, Call* c) {
  return PyArg_ParseTuple(tuple, kCallFormat, &c->device, &c->m, &c->n, &c->k, &c->transa, &c->transb, &c->a,
                          &c->a_type, &c->lda, &c->b, &c->b_type, &c->ldb, &c->d, &c->d_type, &c->ldd, &c->alpha,
                          &c->beta, &c->compute, &c->epilogue, &c->bias, &c->bias_type, &c->a_scale,
                          &c->a_scale_mode, &c->b_scale, &c->b_scale_mode, &c->stream, &c->workspace,
                          &c->workspace_size, &c->algo) != 0;
}

// Largest power of two dividing the address, capped at 256 bytes (what the heuristic may assume).
long long alignment(unsigned long long address) {
  if (address == 0) return 256;
  long long a = 1;
  while (a < 256 && (address % static_cast<unsigned long long>(2 * a)) == 0) a *= 2;
  return a;
}

void raise_error(const char* stage, const char* status, const std::string& detail) {
  std::string msg = std::string(TB_LIBRARY) + " " + stage + " failed: " + status + " (" + detail + ")";
  PyObject* exc = PyObject_CallFunction(g_error, "s", msg.c_str());
  if (exc == nullptr) return;
  PyObject* status_obj = PyUnicode_FromString(status);
  PyObject* stage_obj = PyUnicode_FromString(stage);
  if (status_obj != nullptr && stage_obj != nullptr) {
    PyObject_SetAttrString(exc, "status", status_obj);
    PyObject_SetAttrString(exc, "stage", stage_obj);
  }
  Py_XDECREF(status_obj);
  Py_XDECREF(stage_obj);
  PyErr_SetObject(g_error, exc);
  Py_DECREF(exc);
}

bool data_type(int code, tb::DataType* out) {
  switch (code) {
    case kCodeF32: *out = tb::kF32; return true;
    case kCodeF16: *out = tb::kF16; return true;
    case kCodeBF16: *out = tb::kBF16; return true;
    case kCodeE4M3: *out = tb::kE4M3; return tb::kHasOcpFp8;
    case kCodeE5M2: *out = tb::kE5M2; return tb::kHasOcpFp8;
    case kCodeE4M3Fnuz: *out = tb::kE4M3Fnuz; return tb::kHasFnuzFp8;
    case kCodeE5M2Fnuz: *out = tb::kE5M2Fnuz; return tb::kHasFnuzFp8;
    default: return false;
  }
}

bool scale_mode_supported(int code) {
  switch (code) {
    case kScaleNone:
    case kScaleScalar:
      return true;
#if defined(TURBO_BLASLT_HAS_SCALE_MODE) && defined(TURBO_BLASLT_HAS_OUTER_VEC)
    case kScaleOuterVec:
      return true;
#endif
#if defined(TURBO_BLASLT_HAS_SCALE_MODE) && defined(TURBO_BLASLT_HAS_BLOCK128)
    case kScaleVec128:
    case kScaleBlk128:
      return true;
#endif
    default:
      return false;
  }
}

#if defined(TURBO_BLASLT_HAS_SCALE_MODE)
int32_t scale_mode_value(int code) {
  switch (code) {
#if defined(TURBO_BLASLT_HAS_OUTER_VEC)
    case kScaleOuterVec: return static_cast<int32_t>(TB_SCALE(OUTER_VEC_32F));
#endif
#if defined(TURBO_BLASLT_HAS_BLOCK128)
    case kScaleVec128: return static_cast<int32_t>(TB_SCALE(VEC128_32F));
    case kScaleBlk128: return static_cast<int32_t>(TB_SCALE(BLK128x128_32F));
#endif
    default: return static_cast<int32_t>(TB_SCALE(SCALAR_32F));
  }
}
#endif

// -- per-device handles (created while that device is current; kept for the process' lifetime) ----------------
std::map<int, tb::Handle> g_handles;

tb::Status get_handle(int device, tb::Handle* out) {
  auto it = g_handles.find(device);
  if (it != g_handles.end()) {
    *out = it->second;
    return tb::kSuccess;
  }
  tb::Handle h = nullptr;
  tb::Status st = tb::create(&h);
  if (st == tb::kSuccess) g_handles.emplace(device, h);
  *out = h;
  return st;
}

// -- the cache of descriptors + algorithm ------------------------------------------------------------------
constexpr unsigned kReductionNone = 0, kReductionComputeType = 2, kReductionAll = 7;  // cuBLASLt's scheme bits
unsigned g_reduction_mask = kReductionNone | kReductionComputeType;

using Key = std::array<long long, 24>;

Key make_key(const Call& c) {
  return Key{static_cast<long long>(g_reduction_mask), c.device, c.m, c.n, c.k, c.transa, c.transb, c.a_type,
             c.lda, c.b_type, c.ldb, c.d_type, c.ldd, c.compute, c.epilogue, c.bias_type, c.a_scale_mode,
             c.b_scale_mode, c.workspace_size, alignment(c.a), alignment(c.b), alignment(c.d),
             (c.epilogue & kEpiBias) ? alignment(c.bias) : 0, c.algo};
}

struct Entry {
  tb::MatmulDesc desc = nullptr;
  tb::Layout la = nullptr, lb = nullptr, ld = nullptr;
  tb::Algo algo{};
  size_t workspace = 0;
  bool usable = false;
  std::string stage, status, detail;  // why not usable

  Entry() = default;
  Entry(const Entry&) = delete;
  Entry& operator=(const Entry&) = delete;
  ~Entry() {
    if (ld != nullptr) tb::layout_destroy(ld);
    if (lb != nullptr) tb::layout_destroy(lb);
    if (la != nullptr) tb::layout_destroy(la);
    if (desc != nullptr) tb::desc_destroy(desc);
  }
  bool fail(const char* stage_, tb::Status st, std::string detail_) {
    return fail_named(stage_, tb::status_name(st), std::move(detail_));
  }
  bool fail_named(const char* stage_, const char* status_, std::string detail_) {
    stage = stage_;
    status = status_;
    detail = std::move(detail_);
    usable = false;
    return false;
  }
};

using Lru = std::list<std::pair<Key, Entry>>;
Lru g_lru;
std::map<Key, Lru::iterator> g_index;
size_t g_capacity = 1024;
unsigned long long g_hits = 0, g_misses = 0;

std::string describe(const Call& c) {
  return "m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
         " op=" + (c.transa ? "T" : "N") + (c.transb ? "T" : "N") + " types(a,b,d)=" + std::to_string(c.a_type) +
         "," + std::to_string(c.b_type) + "," + std::to_string(c.d_type) + " ld=" + std::to_string(c.lda) + "," +
         std::to_string(c.ldb) + "," + std::to_string(c.ldd) + " epilogue=" + std::to_string(c.epilogue) +
         " scale_modes=" + std::to_string(c.a_scale_mode) + "," + std::to_string(c.b_scale_mode);
}

template <typename T>
tb::Status set_desc(tb::MatmulDesc desc, tb::DescAttr attr, const T& value) {
  return tb::desc_set(desc, attr, &value, sizeof(value));
}

// Sets the per-call pointers of the descriptor (scale and bias pointers); the heuristic never reads them.
tb::Status set_pointers(const Call& c, tb::MatmulDesc desc) {
  tb::Status st = tb::kSuccess;
  if (c.a_scale_mode != kScaleNone) {
    const void* p = reinterpret_cast<const void*>(c.a_scale);
    if ((st = set_desc(desc, TB_DESC(A_SCALE_POINTER), p)) != tb::kSuccess) return st;
  }
  if (c.b_scale_mode != kScaleNone) {
    const void* p = reinterpret_cast<const void*>(c.b_scale);
    if ((st = set_desc(desc, TB_DESC(B_SCALE_POINTER), p)) != tb::kSuccess) return st;
  }
  if (c.epilogue & kEpiBias) {
    const void* p = reinterpret_cast<const void*>(c.bias);
    if ((st = set_desc(desc, TB_DESC(BIAS_POINTER), p)) != tb::kSuccess) return st;
  }
  return st;
}

// Creates e's matmul descriptor and matrix layouts for `c`; false (e's failure set) when the library
// refuses one of them.
bool setup(const Call& c, Entry& e) {
  const std::string what = describe(c);
  tb::DataType at, bt, dt, biast = tb::kF32;
  if (!data_type(c.a_type, &at) || !data_type(c.b_type, &bt) || !data_type(c.d_type, &dt) ||
      ((c.epilogue & kEpiBias) && !data_type(c.bias_type, &biast))) {
    return e.fail("setup", tb::kNotSupported, "a dtype this " TB_LIBRARY " build has no data type for; " + what);
  }
  if (!scale_mode_supported(c.a_scale_mode) || !scale_mode_supported(c.b_scale_mode)) {
    return e.fail("setup", tb::kNotSupported,
                  "scale mode not available in the " TB_LIBRARY " headers this extension was built with; " + what);
  }
  if (c.epilogue < kEpiNone || c.epilogue > kEpiGeluBias) {
    return e.fail("setup", tb::kInvalidValue, "unknown epilogue code; " + what);
  }
  const tb::ComputeType compute = (c.a_type == kCodeF32 && c.compute == 1) ? tb::kCompute32FFastTF32 : tb::kCompute32F;
  tb::Status st = tb::desc_create(&e.desc, compute, tb::kF32);
  if (st != tb::kSuccess) return e.fail("setup", st, "matmul descriptor; " + what);
  const tb::Operation opa = c.transa ? tb::kOpT : tb::kOpN;
  const tb::Operation opb = c.transb ? tb::kOpT : tb::kOpN;
  if ((st = set_desc(e.desc, TB_DESC(TRANSA), opa)) != tb::kSuccess) return e.fail("setup", st, "TRANSA; " + what);
  if ((st = set_desc(e.desc, TB_DESC(TRANSB), opb)) != tb::kSuccess) return e.fail("setup", st, "TRANSB; " + what);
#if !defined(TURBO_BLASLT_ROCM)
  if (c.a_type >= kCodeE4M3 || c.b_type >= kCodeE4M3) {
    // FP8: keep promoting partial sums into fp32 (the library's default, set so it never depends on one).
    const int8_t fast_accum = 0;
    if ((st = set_desc(e.desc, TB_DESC(FAST_ACCUM), fast_accum)) != tb::kSuccess) {
      return e.fail("setup", st, "FAST_ACCUM; " + what);
    }
  }
#endif
  if (c.epilogue != kEpiNone) {
    tb::Epilogue epi = TB_EPILOGUE(DEFAULT);
    if (c.epilogue == kEpiBias) epi = TB_EPILOGUE(BIAS);
    if (c.epilogue == kEpiGelu) epi = TB_EPILOGUE(GELU);
    if (c.epilogue == kEpiGeluBias) epi = TB_EPILOGUE(GELU_BIAS);
    if ((st = set_desc(e.desc, TB_DESC(EPILOGUE), epi)) != tb::kSuccess) {
      return e.fail("setup", st, "EPILOGUE; " + what);
    }
    if (c.epilogue & kEpiBias) {
      const int32_t bias_type = static_cast<int32_t>(biast);
      if ((st = set_desc(e.desc, TB_DESC(BIAS_DATA_TYPE), bias_type)) != tb::kSuccess) {
        return e.fail("setup", st, "BIAS_DATA_TYPE; " + what);
      }
    }
  }
#if defined(TURBO_BLASLT_HAS_SCALE_MODE)
  if (c.a_scale_mode > kScaleScalar) {
    if ((st = set_desc(e.desc, TB_DESC(A_SCALE_MODE), scale_mode_value(c.a_scale_mode))) != tb::kSuccess) {
      return e.fail("setup", st, "A_SCALE_MODE (the loaded library may predate it); " + what);
    }
  }
  if (c.b_scale_mode > kScaleScalar) {
    if ((st = set_desc(e.desc, TB_DESC(B_SCALE_MODE), scale_mode_value(c.b_scale_mode))) != tb::kSuccess) {
      return e.fail("setup", st, "B_SCALE_MODE (the loaded library may predate it); " + what);
    }
  }
#endif
  if ((st = set_pointers(c, e.desc)) != tb::kSuccess) return e.fail("setup", st, "scale/bias pointers; " + what);

  const uint64_t ar = c.transa ? c.k : c.m, ac = c.transa ? c.m : c.k;
  const uint64_t br = c.transb ? c.n : c.k, bc = c.transb ? c.k : c.n;
  if ((st = tb::layout_create(&e.la, at, ar, ac, c.lda)) != tb::kSuccess) return e.fail("setup", st, "A; " + what);
  if ((st = tb::layout_create(&e.lb, bt, br, bc, c.ldb)) != tb::kSuccess) return e.fail("setup", st, "B; " + what);
  if ((st = tb::layout_create(&e.ld, dt, c.m, c.n, c.ldd)) != tb::kSuccess) return e.fail("setup", st, "D; " + what);

  return true;
}

// Asks the heuristic for up to `request` (1..kMaxAlgos) algorithms for the configuration set up in `e`;
// `results` receives them in the heuristic's order (*returned of them; check each one's state). false (e's
// failure set) when the preference cannot be set up or the query itself fails.
bool query(const Call& c, tb::Handle handle, Entry& e, int request, tb::Heuristic* results, int* returned) {
  const std::string what = describe(c);
  tb::Status st = tb::kSuccess;
  tb::Preference pref = nullptr;
  if ((st = tb::pref_create(&pref)) != tb::kSuccess) return e.fail("setup", st, "preference; " + what);
  const uint64_t ws = static_cast<uint64_t>(c.workspace_size > 0 ? c.workspace_size : 0);
  st = tb::pref_set(pref, TB_PREF(MAX_WORKSPACE_BYTES), &ws, sizeof(ws));
#if !defined(TURBO_BLASLT_ROCM)
  const uint32_t align_a = static_cast<uint32_t>(alignment(c.a)), align_b = static_cast<uint32_t>(alignment(c.b));
  const uint32_t align_d = static_cast<uint32_t>(alignment(c.d));
  if (st == tb::kSuccess) st = tb::pref_set(pref, TB_PREF(MIN_ALIGNMENT_A_BYTES), &align_a, sizeof(align_a));
  if (st == tb::kSuccess) st = tb::pref_set(pref, TB_PREF(MIN_ALIGNMENT_B_BYTES), &align_b, sizeof(align_b));
  if (st == tb::kSuccess) st = tb::pref_set(pref, TB_PREF(MIN_ALIGNMENT_C_BYTES), &align_d, sizeof(align_d));
  if (st == tb::kSuccess) st = tb::pref_set(pref, TB_PREF(MIN_ALIGNMENT_D_BYTES), &align_d, sizeof(align_d));
  const uint32_t reduction = g_reduction_mask;
  if (st == tb::kSuccess) st = tb::pref_set(pref, TB_PREF(REDUCTION_SCHEME_MASK), &reduction, sizeof(reduction));
#endif
  if (st != tb::kSuccess) {
    tb::pref_destroy(pref);
    return e.fail("setup", st, "preference attributes; " + what);
  }
  std::memset(static_cast<void*>(results), 0, sizeof(tb::Heuristic) * static_cast<size_t>(request));
  *returned = 0;
  st = tb::heuristic(handle, e.desc, e.la, e.lb, e.ld, e.ld, pref, request, results, returned);
  tb::pref_destroy(pref);
  if (st != tb::kSuccess) return e.fail("heuristic", st, "no algorithm for " + what);
  if (*returned < 0) *returned = 0;
  if (*returned > request) *returned = request;
  return true;
}

// Sets up `e` for `c`: descriptors, layouts and the algorithm of rank c.algo among the heuristic's usable
// results (algo 0 asks for one result only: the heuristic's first choice).
bool build(const Call& c, tb::Handle handle, Entry& e) {
  const std::string what = describe(c);
  if (c.algo < 0) return e.fail("setup", tb::kInvalidValue, "algo must be >= 0, got " + std::to_string(c.algo));
  if (c.algo >= kMaxAlgos) {
    return e.fail("heuristic", tb::kNotSupported,
                  "algo=" + std::to_string(c.algo) + " requested; at most " + std::to_string(kMaxAlgos) +
                      " algorithms are asked of the heuristic; " + what);
  }
  if (!setup(c, e)) return false;
  const int request = c.algo == 0 ? 1 : kMaxAlgos;
  tb::Heuristic results[kMaxAlgos];
  int returned = 0;
  if (!query(c, handle, e, request, results, &returned)) return false;
  int rank = -1;  // index in `results` of the usable algorithm of rank c.algo
  int usable = 0;
  for (int i = 0; i < returned; ++i) {
    if (results[i].state != tb::kSuccess) continue;
    if (usable == c.algo) rank = i;
    ++usable;
  }
  if (rank < 0) {
    if (c.algo == 0) {
      return e.fail("heuristic", returned < 1 ? tb::kNotSupported : results[0].state, "no algorithm for " + what);
    }
    return e.fail("heuristic", tb::kNotSupported,
                  "the heuristic offers only " + std::to_string(usable) + " algorithm(s) for " + what +
                      ", algo=" + std::to_string(c.algo) + " requested");
  }
  e.algo = results[rank].algo;
  e.workspace = results[rank].workspaceSize;
  e.usable = true;
  return true;
}

void evict_to(size_t capacity) {
  while (g_lru.size() > capacity) {
    g_index.erase(g_lru.back().first);
    g_lru.pop_back();
  }
}

// The cached entry of a call (built on a miss). nullptr only when the handle cannot be created (error set).
Entry* lookup(const Call& c) {
  tb::Handle handle = nullptr;
  tb::Status st = get_handle(c.device, &handle);
  if (st != tb::kSuccess) {
    raise_error("handle", tb::status_name(st),
                "creating the " TB_LIBRARY " handle of device " + std::to_string(c.device));
    return nullptr;
  }
  const Key key = make_key(c);
  auto it = g_index.find(key);
  if (it != g_index.end()) {
    ++g_hits;
    g_lru.splice(g_lru.begin(), g_lru, it->second);
    return &g_lru.front().second;
  }
  ++g_misses;
  g_lru.emplace_front(std::piecewise_construct, std::forward_as_tuple(key), std::forward_as_tuple());
  g_index[key] = g_lru.begin();
  Entry& e = g_lru.front().second;
  build(c, handle, e);
  evict_to(g_capacity > 0 ? g_capacity : 1);
  return &e;
}

// Runs one call; false with the Python error set on failure.
bool run(const Call& c) {
  Entry* e = lookup(c);
  if (e == nullptr) return false;
  if (!e->usable) {
    raise_error(e->stage.c_str(), e->status.c_str(), e->detail);
    return false;
  }
  tb::Status st = set_pointers(c, e->desc);
  if (st != tb::kSuccess) {
    raise_error("setup", tb::status_name(st), "scale/bias pointers; " + describe(c));
    return false;
  }
  const float alpha = static_cast<float>(c.alpha), beta = static_cast<float>(c.beta);
  void* d = reinterpret_cast<void*>(c.d);
  st = tb::matmul(g_handles[c.device], e->desc, &alpha, reinterpret_cast<const void*>(c.a), e->la,
                  reinterpret_cast<const void*>(c.b), e->lb, &beta, d, e->ld, d, e->ld, &e->algo,
                  reinterpret_cast<void*>(c.workspace), static_cast<size_t>(c.workspace_size),
                  reinterpret_cast<tb::Stream>(c.stream));
  if (st != tb::kSuccess) {
    raise_error("matmul", tb::status_name(st), describe(c) + " algo=" + std::to_string(c.algo));
    return false;
  }
  return true;
}

// -- Python entry points -------------------------------------------------------------------------------------

PyObject* py_matmul(PyObject*, PyObject* args) {
  Call c;
  if (!parse_call(args, &c)) return nullptr;
  if (c.m == 0 || c.n == 0 || c.k == 0) Py_RETURN_NONE;  // nothing to do; the caller handles K == 0 semantics
  if (!run(c)) return nullptr;
  Py_RETURN_NONE;
}

PyObject* py_check(PyObject*, PyObject* args) {
  Call c;
  if (!parse_call(args, &c)) return nullptr;
  Entry* e = lookup(c);
  if (e == nullptr) return nullptr;
  if (e->usable) Py_RETURN_NONE;
  const std::string msg = e->stage + ": " + e->status + " (" + e->detail + ")";
  return PyUnicode_FromString(msg.c_str());
}

// How many usable algorithms (state == success, at most kMaxAlgos) the heuristic offers for the call's
// configuration (its `algo` is ignored); 0 when the library refuses the configuration. Not cached (tuning asks).
PyObject* py_algo_count(PyObject*, PyObject* args) {
  Call c;
  if (!parse_call(args, &c)) return nullptr;
  tb::Handle handle = nullptr;
  const tb::Status st = get_handle(c.device, &handle);
  if (st != tb::kSuccess) {
    raise_error("handle", tb::status_name(st),
                "creating the " TB_LIBRARY " handle of device " + std::to_string(c.device));
    return nullptr;
  }
  Entry e;  // a scratch entry (not cached): its destructor frees the descriptors
  tb::Heuristic results[kMaxAlgos];
  int returned = 0;
  if (!setup(c, e) || !query(c, handle, e, kMaxAlgos, results, &returned)) return PyLong_FromLong(0);
  long usable = 0;
  for (int i = 0; i < returned; ++i) {
    if (results[i].state == tb::kSuccess) ++usable;
  }
  return PyLong_FromLong(usable);
}

// The non-empty groups of `groups` (a sequence of (m, n, k, a, b, d) tuples), each `base` with those fields
// replaced; false with the Python error set when an item does not parse.
bool parse_groups(PyObject* groups, const Call& base, std::vector<Call>* out) {
  const Py_ssize_t count = PySequence_Size(groups);
  if (count < 0) return false;
  out->reserve(static_cast<size_t>(count));
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* item = PySequence_GetItem(groups, i);
    if (item == nullptr) return false;
    Call c = base;
    const int ok = PyArg_ParseTuple(item, "LLLKKK", &c.m, &c.n, &c.k, &c.a, &c.b, &c.d);
    Py_DECREF(item);
    if (!ok) return false;
    if (c.m == 0 || c.n == 0 || c.k == 0) continue;
    out->push_back(c);
  }
  return true;
}

PyObject* py_matmul_many(PyObject*, PyObject* args) {
  PyObject* common = nullptr;
  PyObject* groups = nullptr;
  if (!PyArg_ParseTuple(args, "OO", &common, &groups)) return nullptr;
  Call base;
  if (!parse_call(common, &base)) return nullptr;
  std::vector<Call> calls;
  if (!parse_groups(groups, base, &calls)) return nullptr;
  for (const Call& c : calls) {
    if (!run(c)) return nullptr;
  }
  Py_RETURN_NONE;
}

#if defined(TURBO_BLASLT_ROCM)
// -- matmul_grouped: hipBLASLt's one-launch grouped GEMM (hipblaslt_ext::GroupedGemm; ROCm only) ---------------
//
// Every group is one problem of one GroupedGemm (same ops, dtypes, compute type and leading dimensions as
// `common`, its own m, n, k and pointers; C = D, so beta = 1 accumulates into D). The heuristic's first
// algorithm for the whole set, the GroupedGemm object and the verdict are cached per (device, configuration,
// group sizes) in a small LRU. Per call: setProblem (this call's pointers and alpha/beta), isAlgoSupported,
// initialize (with useUserArgs = false: the library writes the kernel arguments into pinned host memory of
// the object and copies them into the workspace with an async copy on `stream`) and run(stream).
// Because that host staging buffer belongs to the cached object, an event recorded after initialize is
// waited for before the object is initialized again or destroyed (normally already complete: the caller
// read the group offsets on the host, which synchronized the stream).

using GroupedKey = std::vector<long long>;

struct Grouped {
  std::unique_ptr<hipblaslt_ext::GroupedGemm> gemm;
  hipblasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  bool usable = false;       // false: the library has no grouped algorithm for this set (nothing launched)
  std::string why;           // why not usable
  hipEvent_t staged = nullptr;  // recorded after initialize's argument copy
  bool pending = false;
  std::vector<float> alpha, beta;

  Grouped() = default;
  Grouped(const Grouped&) = delete;
  Grouped& operator=(const Grouped&) = delete;
  ~Grouped() {
    if (staged != nullptr) {
      if (pending) static_cast<void>(hipEventSynchronize(staged));
      static_cast<void>(hipEventDestroy(staged));
    }
  }
};

using GroupedLru = std::list<std::pair<GroupedKey, Grouped>>;
GroupedLru g_grouped_lru;
std::map<GroupedKey, GroupedLru::iterator> g_grouped_index;
constexpr size_t kGroupedCapacity = 64;

std::string describe_grouped(const Call& base, size_t count) {
  return std::to_string(count) + " groups, op=" + (base.transa ? "T" : "N") + (base.transb ? "T" : "N") +
         " types(a,b,d)=" + std::to_string(base.a_type) + "," + std::to_string(base.b_type) + "," +
         std::to_string(base.d_type) + " ld=" + std::to_string(base.lda) + "," + std::to_string(base.ldb) + "," +
         std::to_string(base.ldd);
}

// Both set the Python error (stage "grouped") and return -1 (run_grouped's failure value).
int grouped_fail(tb::Status st, const std::string& detail) {
  raise_error("grouped", tb::status_name(st), detail);
  return -1;
}

int hip_fail(hipError_t err, const std::string& detail) {
  const char* name = hipGetErrorName(err);
  raise_error("grouped", name != nullptr ? name : "hipError", detail);
  return -1;
}

// Sets the problem of g's GroupedGemm to `calls` (this call's sizes, pointers, alpha/beta).
tb::Status set_grouped_problem(const Call& base, const std::vector<Call>& calls, tb::DataType at, tb::DataType bt,
                               tb::DataType dt, Grouped& g) {
  const size_t count = calls.size();
  std::vector<int64_t> m(count), n(count), k(count), batch(count, 1), lda(count, base.lda), ldb(count, base.ldb),
      ldc(count, base.ldd), ldd(count, base.ldd), sa(count), sb(count), sc(count), sd(count);
  std::vector<hipblaslt_ext::GemmEpilogue> epilogue(count);
  std::vector<hipblaslt_ext::GemmInputs> inputs(count);
  g.alpha.assign(count, static_cast<float>(base.alpha));
  g.beta.assign(count, static_cast<float>(base.beta));
  for (size_t i = 0; i < count; ++i) {
    const Call& c = calls[i];
    m[i] = c.m;
    n[i] = c.n;
    k[i] = c.k;
    sa[i] = base.lda * (base.transa ? c.m : c.k);  // one matrix per problem: strides span it (batch 1)
    sb[i] = base.ldb * (base.transb ? c.k : c.n);
    sc[i] = sd[i] = base.ldd * c.n;
#ifdef TURBO_BLASLT_EXT_SETTERS  // hipBLASLt >= 1.0 (ROCm 7): a class with setters
    inputs[i].setA(reinterpret_cast<const void*>(c.a));
    inputs[i].setB(reinterpret_cast<const void*>(c.b));
    inputs[i].setC(reinterpret_cast<const void*>(c.d));
    inputs[i].setD(reinterpret_cast<const void*>(c.d));
    inputs[i].setAlpha(&g.alpha[i]);
    inputs[i].setBeta(&g.beta[i]);
#else  // older hipBLASLt: a struct of pointers
    inputs[i].a = reinterpret_cast<void*>(c.a);
    inputs[i].b = reinterpret_cast<void*>(c.b);
    inputs[i].c = reinterpret_cast<void*>(c.d);
    inputs[i].d = reinterpret_cast<void*>(c.d);
    inputs[i].alpha = static_cast<void*>(&g.alpha[i]);
    inputs[i].beta = static_cast<void*>(&g.beta[i]);
#endif
  }
  // the aggregate (older headers: op_a, op_b, type_a..type_d, type_compute) and the constructor (ROCm 7)
  // take the same order
  hipblaslt_ext::GemmProblemType type{base.transa ? tb::kOpT : tb::kOpN, base.transb ? tb::kOpT : tb::kOpN, at, bt,
                                      dt, dt, tb::kCompute32F};
  return g.gemm->setProblem(m, n, k, batch, lda, ldb, ldc, ldd, sa, sb, sc, sd, epilogue, inputs, type);
}

// Builds g for `calls` (GroupedGemm, heuristic, support and workspace checks). false with the Python error set
// on a library error; true otherwise (g.usable false when the library has no grouped algorithm).
bool build_grouped(const Call& base, const std::vector<Call>& calls, tb::Handle handle, Grouped& g) {
  const std::string what = describe_grouped(base, calls.size());
  tb::DataType at, bt, dt;
  if (!data_type(base.a_type, &at) || !data_type(base.b_type, &bt) || !data_type(base.d_type, &dt)) {
    g.why = "a dtype this " TB_LIBRARY " build has no data type for; " + what;
    return true;
  }
  const tb::Operation opa = base.transa ? tb::kOpT : tb::kOpN, opb = base.transb ? tb::kOpT : tb::kOpN;
  g.gemm = std::make_unique<hipblaslt_ext::GroupedGemm>(handle, opa, opb, at, bt, dt, dt, tb::kCompute32F);
  tb::Status st = set_grouped_problem(base, calls, at, bt, dt, g);
  if (st != tb::kSuccess) {
    grouped_fail(st, "setProblem; " + what);
    return false;
  }
  hipblaslt_ext::GemmPreference pref;
  pref.setMaxWorkspaceBytes(static_cast<size_t>(base.workspace_size > 0 ? base.workspace_size : 0));
  std::vector<hipblasLtMatmulHeuristicResult_t> results;
  st = g.gemm->algoGetHeuristic(1, pref, results);
  if (st != tb::kSuccess || results.empty() || results[0].state != tb::kSuccess) {
    g.why = std::string("heuristic: ") + tb::status_name(st != tb::kSuccess ? st : tb::kNotSupported) +
            " (no grouped algorithm for " + what + ")";
    return true;
  }
  g.algo = results[0].algo;
  size_t need = 0;
  st = g.gemm->isAlgoSupported(g.algo, need);
  if (st != tb::kSuccess) {
    g.why = std::string("isAlgoSupported: ") + tb::status_name(st) + " (" + what + ")";
    return true;
  }
  if (need > static_cast<size_t>(base.workspace_size > 0 ? base.workspace_size : 0)) {
    g.why = "the grouped algorithm needs " + std::to_string(need) + " bytes of workspace, " +
            std::to_string(base.workspace_size) + " available (" + what + ")";
    return true;
  }
  const hipError_t err = hipEventCreateWithFlags(&g.staged, hipEventDisableTiming);
  if (err != hipSuccess) {
    g.staged = nullptr;
    hip_fail(err, "creating the staging event; " + what);
    return false;
  }
  g.workspace = need;
  g.usable = true;
  return true;
}

// Runs `calls` (non-empty groups) as one grouped GEMM. Returns 1 when launched, 0 when the library has no
// grouped algorithm for them (nothing launched), -1 with the Python error set on failure.
int run_grouped(const Call& base, const std::vector<Call>& calls) {
  tb::Handle handle = nullptr;
  tb::Status st = get_handle(base.device, &handle);
  if (st != tb::kSuccess) {
    raise_error("handle", tb::status_name(st),
                "creating the " TB_LIBRARY " handle of device " + std::to_string(base.device));
    return -1;
  }
  GroupedKey key{base.device, base.transa, base.transb, base.a_type, base.b_type, base.d_type, base.lda, base.ldb,
                 base.ldd, base.beta != 0.0 ? 1 : 0, base.workspace_size};
  for (const Call& c : calls) {
    key.push_back(c.m);
    key.push_back(c.n);
    key.push_back(c.k);
  }
  Grouped* g = nullptr;
  const std::string what = describe_grouped(base, calls.size());
  tb::DataType at, bt, dt;
  try {
    auto it = g_grouped_index.find(key);
    if (it != g_grouped_index.end()) {
      g_grouped_lru.splice(g_grouped_lru.begin(), g_grouped_lru, it->second);
      g = &g_grouped_lru.front().second;
      if (!g->usable) return 0;
      if (!data_type(base.a_type, &at) || !data_type(base.b_type, &bt) || !data_type(base.d_type, &dt)) return 0;
      if (g->pending) {
        const hipError_t err = hipEventSynchronize(g->staged);  // its host staging buffer is rewritten below
        if (err != hipSuccess) return hip_fail(err, "waiting for the previous argument copy; " + what);
        g->pending = false;
      }
      st = set_grouped_problem(base, calls, at, bt, dt, *g);
      if (st != tb::kSuccess) return grouped_fail(st, "setProblem; " + what);
      size_t need = 0;
      st = g->gemm->isAlgoSupported(g->algo, need);
      if (st != tb::kSuccess) return grouped_fail(st, "isAlgoSupported; " + what);
    } else {
      g_grouped_lru.emplace_front(std::piecewise_construct, std::forward_as_tuple(key), std::forward_as_tuple());
      g_grouped_index[key] = g_grouped_lru.begin();
      g = &g_grouped_lru.front().second;
      const bool ok = build_grouped(base, calls, handle, *g);
      if (!ok || !g->usable) {
        const bool usable = g->usable;
        if (!ok) {  // a library error: do not keep the entry
          g_grouped_index.erase(key);
          g_grouped_lru.pop_front();
        }
        while (g_grouped_lru.size() > kGroupedCapacity) {
          g_grouped_index.erase(g_grouped_lru.back().first);
          g_grouped_lru.pop_back();
        }
        return ok && !usable ? 0 : -1;
      }
      while (g_grouped_lru.size() > kGroupedCapacity) {
        g_grouped_index.erase(g_grouped_lru.back().first);
        g_grouped_lru.pop_back();
      }
    }
    const tb::Stream stream = reinterpret_cast<tb::Stream>(base.stream);
    st = g->gemm->initialize(g->algo, reinterpret_cast<void*>(base.workspace), false, stream);
    if (st != tb::kSuccess) return grouped_fail(st, "initialize; " + what);
    hipError_t err = hipEventRecord(g->staged, stream);
    if (err != hipSuccess) return hip_fail(err, "recording the staging event; " + what);
    g->pending = true;
    st = g->gemm->run(stream);
    if (st != tb::kSuccess) return grouped_fail(st, "run; " + what);
  } catch (const std::exception& exc) {
    raise_error("grouped", "std::exception", std::string(exc.what()) + "; " + what);
    return -1;
  }
  return 1;
}

// matmul_grouped(common, groups) -> True (launched as one grouped GEMM) or False (no grouped algorithm for
// these groups: nothing launched, run them with matmul_many).
PyObject* py_matmul_grouped(PyObject*, PyObject* args) {
  PyObject* common = nullptr;
  PyObject* groups = nullptr;
  if (!PyArg_ParseTuple(args, "OO", &common, &groups)) return nullptr;
  Call base;
  if (!parse_call(common, &base)) return nullptr;
  if (base.epilogue != kEpiNone || base.a_scale_mode != kScaleNone || base.b_scale_mode != kScaleNone ||
      base.algo != 0) {
    raise_error("grouped", tb::status_name(tb::kNotSupported),
                "matmul_grouped runs plain GEMMs with the heuristic's first algorithm: no epilogue, scale modes "
                "or algo rank");
    return nullptr;
  }
  std::vector<Call> calls;
  if (!parse_groups(groups, base, &calls)) return nullptr;
  if (calls.empty()) Py_RETURN_TRUE;
  const int rc = run_grouped(base, calls);
  if (rc < 0) return nullptr;
  return PyBool_FromLong(rc);
}
#endif  // TURBO_BLASLT_ROCM

bool dict_set(PyObject* dict, const char* key, PyObject* value) {
  if (value == nullptr) return false;
  const int rc = PyDict_SetItemString(dict, key, value);
  Py_DECREF(value);
  return rc == 0;
}

PyObject* py_capabilities(PyObject*, PyObject* args) {
  int device = 0;
  if (!PyArg_ParseTuple(args, "i", &device)) return nullptr;
  PyObject* out = PyDict_New();
  if (out == nullptr) return nullptr;
  tb::Handle handle = nullptr;
  const tb::Status st = get_handle(device, &handle);
  bool ok = dict_set(out, "platform", PyUnicode_FromString(TB_PLATFORM)) &&
            dict_set(out, "library", PyUnicode_FromString(TB_LIBRARY)) &&
            dict_set(out, "header_version", PyLong_FromLongLong(TB_HEADER_VERSION)) &&
            dict_set(out, "library_version",
                     PyLong_FromLongLong(st == tb::kSuccess || !tb::kVersionNeedsHandle
                                             ? tb::library_version(handle) : -1)) &&
            dict_set(out, "handle_status", PyUnicode_FromString(tb::status_name(st))) &&
            dict_set(out, "outer_vec", PyBool_FromLong(scale_mode_supported(kScaleOuterVec))) &&
            dict_set(out, "block128", PyBool_FromLong(scale_mode_supported(kScaleVec128))) &&
            dict_set(out, "ocp_fp8", PyBool_FromLong(tb::kHasOcpFp8)) &&
            dict_set(out, "fnuz_fp8", PyBool_FromLong(tb::kHasFnuzFp8)) &&
            dict_set(out, "alignment_prefs", PyBool_FromLong(tb::kHasAlignmentPrefs)) &&
            dict_set(out, "reduction_mask", PyLong_FromUnsignedLong(g_reduction_mask));
  if (!ok) {
    Py_DECREF(out);
    return nullptr;
  }
  return out;
}

// The loaded library's version number without creating a handle (cuBLASLt: cublasLtGetVersion(); hipBLASLt
// needs a handle: that of a device already used by this process, else -1).
PyObject* py_library_version(PyObject*, PyObject*) {
  long long v = -1;
  if (!tb::kVersionNeedsHandle) {
    v = tb::library_version(nullptr);
  } else if (!g_handles.empty()) {
    v = tb::library_version(g_handles.begin()->second);
  }
  return PyLong_FromLongLong(v);
}

PyObject* py_cache_info(PyObject*, PyObject*) {
  return Py_BuildValue("(nnKK)", static_cast<Py_ssize_t>(g_lru.size()), static_cast<Py_ssize_t>(g_capacity), g_hits,
                       g_misses);
}

PyObject* py_clear_cache(PyObject*, PyObject*) {
  g_index.clear();
  g_lru.clear();
#if defined(TURBO_BLASLT_ROCM)
  g_grouped_index.clear();
  g_grouped_lru.clear();
#endif
  g_hits = g_misses = 0;
  Py_RETURN_NONE;
}

PyObject* py_set_cache_capacity(PyObject*, PyObject* args) {
  Py_ssize_t capacity = 0;
  if (!PyArg_ParseTuple(args, "n", &capacity)) return nullptr;
  if (capacity < 1) {
    PyErr_SetString(PyExc_ValueError, "capacity: expected a positive number of cached configurations");
    return nullptr;
  }
  g_capacity = static_cast<size_t>(capacity);
  evict_to(g_capacity);
  Py_RETURN_NONE;
}

PyObject* py_set_reduction_mask(PyObject*, PyObject* args) {
  unsigned int mask = 0;
  if (!PyArg_ParseTuple(args, "I", &mask)) return nullptr;
  if (mask > kReductionAll) {
    PyErr_SetString(PyExc_ValueError, "mask: expected a cuBLASLt reduction-scheme mask in 0..7");
    return nullptr;
  }
  g_reduction_mask = mask;  // part of the cache key: configurations found under the old mask stay valid
  Py_RETURN_NONE;
}

// -- byte relayout -------------------------------------------------------------------------------------------
// transpose_bytes(device, rows, cols, src, ld_src, trans, dst, ld_dst, stream): dst, a column-major rows x cols
// matrix of 1-byte elements with leading dim ld_dst, becomes op(src), src being column-major (cols x rows when
// trans, else rows x cols) with leading dim ld_src; enqueued on `stream`. The bytes move as CUDA_R_8I through
// cublasLtMatrixTransform with alpha = 1, beta = 0 (fp32 scale): every int8 value, hence every FP8 bit pattern,
// comes out unchanged. What turbo_hipblaslt.relayout uses where cuBLASLt's FP8 GEMM needs a K-contiguous copy
// (torch's strided copy of 1-byte elements is several times slower). cuBLASLt only: hipBLASLt's FP8 GEMMs take
// every layout, so ROCm builds raise BlasLtError (stage "transform", NOT_SUPPORTED) and the caller copies.
PyObject* py_transpose_bytes(PyObject*, PyObject* args) {
  int device = 0, trans = 0;
  long long rows = 0, cols = 0, ld_src = 0, ld_dst = 0;
  unsigned long long src = 0, dst = 0, stream = 0;
  if (!PyArg_ParseTuple(args, "iLLKLiKLK", &device, &rows, &cols, &src, &ld_src, &trans, &dst, &ld_dst, &stream))
    return nullptr;
  if (rows < 0 || cols < 0 || ld_dst < (rows > 1 ? rows : 1) || ld_src < ((trans ? cols : rows) > 1
                                                                           ? (trans ? cols : rows) : 1)) {
    PyErr_SetString(PyExc_ValueError, "transpose_bytes: negative sizes, or a leading dim below the matrix's rows");
    return nullptr;
  }
  if (rows == 0 || cols == 0) Py_RETURN_NONE;
#if defined(TURBO_BLASLT_ROCM)
  (void)device; (void)src; (void)dst; (void)stream;
  raise_error("transform", "HIPBLAS_STATUS_NOT_SUPPORTED",
              "transpose_bytes is built for cuBLASLt only (hipBLASLt's FP8 GEMMs take every layout)");
  return nullptr;
#else
  tb::Handle handle = nullptr;
  tb::Status st = get_handle(device, &handle);
  if (st != tb::kSuccess) {
    raise_error("handle", tb::status_name(st), "creating the " TB_LIBRARY " handle of device " + std::to_string(device));
    return nullptr;
  }
  tb::TransformDesc desc = nullptr;
  tb::Layout la = nullptr, lc = nullptr;
  const char* step = "transform descriptor";
  st = tb::transform_desc_create(&desc);
  if (st == tb::kSuccess) st = tb::transform_desc_set_transa(desc, trans ? tb::kOpT : tb::kOpN);
  if (st == tb::kSuccess) {
    step = "layouts";
    st = tb::layout_create(&la, tb::kI8, static_cast<uint64_t>(trans ? cols : rows),
                           static_cast<uint64_t>(trans ? rows : cols), ld_src);
  }
  if (st == tb::kSuccess) st = tb::layout_create(&lc, tb::kI8, static_cast<uint64_t>(rows),
                                                 static_cast<uint64_t>(cols), ld_dst);
  if (st == tb::kSuccess) {
    step = "transform";
    const float alpha = 1.0f, beta = 0.0f;
    st = tb::transform(handle, desc, &alpha, reinterpret_cast<const void*>(src), la, &beta, nullptr, nullptr,
                       reinterpret_cast<void*>(dst), lc, reinterpret_cast<tb::Stream>(stream));
  }
  if (lc != nullptr) tb::layout_destroy(lc);
  if (la != nullptr) tb::layout_destroy(la);
  if (desc != nullptr) tb::transform_desc_destroy(desc);
  if (st != tb::kSuccess) {
    raise_error("transform", tb::status_name(st), std::string(step) + "; " + std::to_string(rows) + " x " +
                std::to_string(cols) + " bytes, trans=" + std::to_string(trans));
    return nullptr;
  }
  Py_RETURN_NONE;
#endif
}

PyMethodDef kMethods[] = {
    {"matmul", py_matmul, METH_VARARGS,
     "matmul(device, m, n, k, transa, transb, a, a_type, lda, b, b_type, ldb, d, d_type, ldd, alpha, beta, compute,"
     " epilogue, bias, bias_type, a_scale, a_scale_mode, b_scale, b_scale_mode, stream, workspace, workspace_size,"
     " algo)\n\nOne column-major matmul D = epilogue(alpha*op(A)@op(B) + beta*D + bias) on `stream` with the"
     " heuristic's algorithm of rank `algo` (0: its first choice); raises BlasLtError."},
    {"check", py_check, METH_VARARGS,
     "check(<the 29 arguments of matmul>) -> None when the library has an algorithm of rank `algo` for this "
     "configuration, else the reason (a string). Pointers are read for their alignment only; nothing is launched."},
    {"algo_count", py_algo_count, METH_VARARGS,
     "algo_count(<the 29 arguments of matmul>) -> how many usable algorithms (0..16) the heuristic offers for this "
     "configuration (`algo` ignored); raises BlasLtError only when the handle cannot be created."},
    {"matmul_many", py_matmul_many, METH_VARARGS,
     "matmul_many(common, groups): `common` is matmul's argument tuple, `groups` a sequence of "
     "(m, n, k, a, b, d) tuples replacing those fields; runs one matmul per group, in order, skipping empty ones."},
#if defined(TURBO_BLASLT_ROCM)
    {"matmul_grouped", py_matmul_grouped, METH_VARARGS,
     "matmul_grouped(common, groups) -> bool: matmul_many's arguments run as one hipBLASLt grouped GEMM "
     "(hipblaslt_ext::GroupedGemm, one launch; empty groups skipped). True when launched; False when the library "
     "has no grouped algorithm for them (nothing launched: run matmul_many). ROCm builds only."},
#endif
    {"transpose_bytes", py_transpose_bytes, METH_VARARGS,
     "transpose_bytes(device, rows, cols, src, ld_src, trans, dst, ld_dst, stream): dst (column-major rows x cols "
     "bytes, ld_dst) = op(src) (column-major, ld_src; transposed when trans) through cublasLtMatrixTransform on "
     "`stream`; the bytes are copied exactly. cuBLASLt builds only (ROCm: BlasLtError, NOT_SUPPORTED)."},
    {"library_version", py_library_version, METH_NOARGS,
     "library_version() -> the loaded library's version number (cuBLASLt: major*10000 + minor*100 + patch; "
     "hipBLASLt: major*100000 + minor*100 + patch), or -1 when it needs a handle and none exists yet."},
    {"capabilities", py_capabilities, METH_VARARGS,
     "capabilities(device) -> dict: platform, library, header/library versions and the scale modes compiled in."},
    {"cache_info", py_cache_info, METH_NOARGS, "cache_info() -> (size, capacity, hits, misses)"},
    {"clear_cache", py_clear_cache, METH_NOARGS, "Forget every cached configuration (descriptors and algorithms)."},
    {"set_cache_capacity", py_set_cache_capacity, METH_VARARGS,
     "set_cache_capacity(n): keep at most n configurations."},
    {"set_reduction_mask", py_set_reduction_mask, METH_VARARGS,
     "set_reduction_mask(mask): the split-K reduction schemes cuBLASLt may use (2: fp32 partial sums only, the "
     "default; 7: any, as torch). No effect on hipBLASLt."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {
    PyModuleDef_HEAD_INIT, "_C",
    "turbo_hipblaslt._C: " TB_LIBRARY " matmul over plain integers (no libtorch); see turbo_hipblaslt.blaslt.",
    -1, kMethods, nullptr, nullptr, nullptr, nullptr,
};

}  // namespace

PyMODINIT_FUNC PyInit__C(void) {
  PyObject* module = PyModule_Create(&kModule);
  if (module == nullptr) return nullptr;
  g_error = PyErr_NewExceptionWithDoc("turbo_hipblaslt._C.BlasLtError",
                                      "A " TB_LIBRARY " call failed; .status is the library's status name and "
                                      ".stage the step (handle, setup, heuristic, matmul).",
                                      PyExc_RuntimeError, nullptr);
  if (g_error == nullptr || PyModule_AddObjectRef(module, "BlasLtError", g_error) < 0 ||
      PyModule_AddStringConstant(module, "PLATFORM", TB_PLATFORM) < 0 ||
      PyModule_AddStringConstant(module, "LIBRARY", TB_LIBRARY) < 0 ||
      PyModule_AddIntConstant(module, "HEADER_VERSION", TB_HEADER_VERSION) < 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
