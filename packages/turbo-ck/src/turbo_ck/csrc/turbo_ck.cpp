// turbo_ck._C: Composable Kernel GEMM instances for Python, without libtorch or pybind11.
//
// A CPython extension on the stable ABI (Py_LIMITED_API 3.10: one .abi3.so for every CPython >= 3.10).
// Tensors cross as plain integers: data pointers, sizes, leading dimensions (in elements), dtype codes
// (turbo_ck/codes.py), the stream handle. The Python side (turbo_ck/calls.py) maps turbo's row-major
// calls onto the one layout the instances take (ck_problem.h). Kernels run on the current device and the
// given stream; the GIL is held (a launch only enqueues work).
//
//   gemm(arch, kind, a_type, b_type, c_type, m, n, k, a, lda, b, ldb, c, ldc, a_scale, b_scale, stream)
//   gemm_many(arch, kind, a_type, b_type, c_type, n, k, lda, ldb, ldc, stream, calls)
//       calls: a sequence of (m, a, b, c, a_scale, b_scale) tuples, one GEMM each, launched in order
//   ARCHS: the archs compiled in, comma-separated (e.g. "gfx942,gfx950"); arch arguments are 942 or 950
// Failures raise turbo_ck._C.CkError (a RuntimeError) whose .status is "no_instance", "unsupported"
// (the instance's IsSupportedArgument declined the sizes) or "launch_failed".
#define PY_SSIZE_T_CLEAN
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030A0000
#endif
#include <Python.h>

#include <string>

#include "ck_problem.h"

namespace {

PyObject* g_error = nullptr;

const char* status_name(int status) {
  switch (status) {
    case turbo_ck::kNoInstance: return "no_instance";
    case turbo_ck::kUnsupported: return "unsupported";
    default: return "launch_failed";
  }
}

void raise_error(int status, const std::string& detail) {
  std::string msg = std::string("Composable Kernel: ") + status_name(status) + ": " + detail;
  PyObject* exc = PyObject_CallFunction(g_error, "s", msg.c_str());
  if (exc == nullptr) return;
  PyObject* s = PyUnicode_FromString(status_name(status));
  if (s != nullptr) {
    PyObject_SetAttrString(exc, "status", s);
    Py_DECREF(s);
  }
  PyErr_SetObject(g_error, exc);
  Py_DECREF(exc);
}

// Runs p on arch (942 or 950); false with a Python error set on failure.
bool run(int arch, const turbo_ck::Problem& p) {
  std::string why;
  int status = turbo_ck::kNoInstance;
  if (arch == 942) {
#ifdef TURBO_CK_GFX942
    status = turbo_ck::run_gfx942(p, &why);
#else
    why = "this build has no gfx942 instances";
#endif
  } else if (arch == 950) {
#ifdef TURBO_CK_GFX950
    status = turbo_ck::run_gfx950(p, &why);
#else
    why = "this build has no gfx950 instances";
#endif
  } else {
    why = "arch must be 942 or 950, got " + std::to_string(arch);
  }
  if (status != turbo_ck::kOk) {
    raise_error(status, why);
    return false;
  }
  return true;
}

PyObject* py_gemm(PyObject*, PyObject* args) {
  int arch = 0;
  turbo_ck::Problem p;
  if (!PyArg_ParseTuple(args, "iiiiiLLLKLKLKLKKK", &arch, &p.kind, &p.a_type, &p.b_type, &p.c_type, &p.m, &p.n,
                        &p.k, &p.a, &p.lda, &p.b, &p.ldb, &p.c, &p.ldc, &p.a_scale, &p.b_scale, &p.stream)) {
    return nullptr;
  }
  if (!run(arch, p)) return nullptr;
  Py_RETURN_NONE;
}

PyObject* py_gemm_many(PyObject*, PyObject* args) {
  int arch = 0;
  turbo_ck::Problem p;
  PyObject* calls = nullptr;
  if (!PyArg_ParseTuple(args, "iiiiiLLLLLKO", &arch, &p.kind, &p.a_type, &p.b_type, &p.c_type, &p.n, &p.k, &p.lda,
                        &p.ldb, &p.ldc, &p.stream, &calls)) {
    return nullptr;
  }
  PyObject* seq = PySequence_Fast(calls, "calls: expected a sequence of (m, a, b, c, a_scale, b_scale) tuples");
  if (seq == nullptr) return nullptr;
  Py_ssize_t count = PySequence_Size(seq);
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject* item = PySequence_GetItem(seq, i);  // new reference (the limited API has no borrowed form)
    if (item == nullptr) {
      Py_DECREF(seq);
      return nullptr;
    }
    int ok = PyArg_ParseTuple(item, "LKKKKK", &p.m, &p.a, &p.b, &p.c, &p.a_scale, &p.b_scale);
    Py_DECREF(item);
    if (!ok || !run(arch, p)) {
      Py_DECREF(seq);
      return nullptr;
    }
  }
  Py_DECREF(seq);
  Py_RETURN_NONE;
}

PyMethodDef kMethods[] = {
    {"gemm", py_gemm, METH_VARARGS, "One GEMM on the CK instances (see the module docstring)."},
    {"gemm_many", py_gemm_many, METH_VARARGS, "GEMMs sharing N, K, dtypes and leading dims, launched in order."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "_C", "turbo_ck._C: Composable Kernel GEMM instances", -1, kMethods,
                       nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__C(void) {
  PyObject* m = PyModule_Create(&kModule);
  if (m == nullptr) return nullptr;
  g_error = PyErr_NewException("turbo_ck._C.CkError", PyExc_RuntimeError, nullptr);
  if (g_error == nullptr || PyModule_AddObject(m, "CkError", g_error) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  Py_INCREF(g_error);
  std::string names;
#ifdef TURBO_CK_GFX942
  names += "gfx942,";
#endif
#ifdef TURBO_CK_GFX950
  names += "gfx950,";
#endif
  PyObject* archs = PyUnicode_FromString(names.empty() ? "" : names.substr(0, names.size() - 1).c_str());
  if (archs == nullptr || PyModule_AddObject(m, "ARCHS", archs) < 0) {
    Py_XDECREF(archs);
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
