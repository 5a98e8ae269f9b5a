// spike_torch/csrc/py_args.h - private to the two files that read arguments
// from Python objects (eager.cpp, kernel_call.cpp): the exception that unwinds
// to a Python entry point once a Python error is set, and a list of ints.
#pragma once

#include <Python.h>

#include <cstdint>
#include <vector>

namespace spike_torch {

// A Python exception is already set; unwinds to the entry point.
struct PyErrorSet {};

// The ints of a Python sequence (`what` names it in the TypeError for
// anything else); throws PyErrorSet with the Python error set.
inline std::vector<int64_t> int64_list(PyObject* seq, const char* what) {
  PyObject* fast = PySequence_Fast(seq, what);
  if (!fast) throw PyErrorSet{};
  std::vector<int64_t> out;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  for (Py_ssize_t i = 0; i < n; i++) {
    long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
    if (v == -1 && PyErr_Occurred()) {
      Py_DECREF(fast);
      throw PyErrorSet{};
    }
    out.push_back(v);
  }
  Py_DECREF(fast);
  return out;
}

}  // namespace spike_torch
