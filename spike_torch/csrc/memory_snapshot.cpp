// spike_torch/csrc/memory_snapshot.cpp - the caching allocator's memory
// history and snapshots in torch.cuda's format (torch.nkipy.memory_snapshot,
// _record_memory_history, _snapshot, _dump_snapshot; docs/spike_torch.md).
//
// allocator.cpp records the events and keeps each live block's stack
// (torch::CapturedTraceback, gathered where the allocation happens); this file
// is the Python side: it symbolizes the stacks in one batch (torch's
// py_symbolize, as CUDA's snapshot does) and builds the dicts PyTorch's memory
// visualizer and torch.cuda._memory_viz read. A plain CPython module handed to
// Python through spike_torch_memory_py_module() (ctypes.PyDLL).

#include <Python.h>

#include <pybind11/pybind11.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <cstdint>
#include <exception>
#include <unordered_map>
#include <vector>

#include "nkipy_device.h"

// libtorch_python's symbolizer of captured stacks (declared by
// torch/csrc/profiler/python/combined_traceback.h, which the wheel cannot
// compile: it includes nlohmann/json.hpp, not shipped in torch/include).
namespace torch {
std::vector<pybind11::object> py_symbolize(std::vector<CapturedTraceback*>& to_symbolize);
void installCapturedTracebackPython();
}  // namespace torch

namespace {

namespace py = pybind11;
using spike_torch::MemoryTraceEntry;
using spike_torch::SegmentSnapshot;

PyObject* record_history(PyObject*, PyObject* args) {
  int trace = 0, stacks = 0, free_stacks = 0, cpp = 0;
  unsigned long long max_entries = 0;
  if (!PyArg_ParseTuple(args, "ppppK", &trace, &stacks, &free_stacks, &cpp, &max_entries))
    return nullptr;
  if (stacks) torch::installCapturedTracebackPython();  // once; lets stacks hold Python frames
  spike_torch::allocator_record_history(trace != 0, stacks != 0, free_stacks != 0, cpp != 0,
                                        static_cast<size_t>(max_entries));
  Py_RETURN_NONE;
}

PyObject* snapshot(PyObject*, PyObject*) {
  try {
    std::vector<SegmentSnapshot> segments;
    std::vector<std::vector<MemoryTraceEntry>> traces;
    spike_torch::allocator_snapshot(&segments, &traces);

    // every stack once, symbolized in one batch
    std::vector<torch::CapturedTraceback*> stacks;
    std::unordered_map<torch::CapturedTraceback*, size_t> index;
    auto note = [&](const std::shared_ptr<torch::CapturedTraceback>& tb) {
      if (tb && index.emplace(tb.get(), stacks.size()).second) stacks.push_back(tb.get());
    };
    for (const auto& seg : segments) {
      note(seg.frames);
      for (const auto& b : seg.blocks) note(b.frames);
    }
    for (const auto& dev : traces)
      for (const auto& e : dev) note(e.frames);
    std::vector<py::object> symbolized = torch::py_symbolize(stacks);
    auto frames = [&](const std::shared_ptr<torch::CapturedTraceback>& tb) -> py::object {
      return tb ? symbolized[index.at(tb.get())] : py::list();
    };

    py::list segs;
    for (const auto& seg : segments) {
      py::list blocks;
      int64_t allocated = 0, requested = 0;
      for (const auto& b : seg.blocks) {
        py::dict d;
        d["address"] = b.addr;
        d["size"] = b.size;
        d["requested_size"] = b.allocated ? b.requested : 0;
        d["state"] = b.allocated ? "active_allocated" : "inactive";
        d["frames"] = frames(b.frames);
        blocks.append(d);
        if (b.allocated) {
          allocated += b.size;
          requested += b.requested;
        }
      }
      py::dict d;
      d["device"] = seg.device;
      d["address"] = seg.addr;
      d["total_size"] = seg.size;
      d["allocated_size"] = allocated;
      d["active_size"] = allocated;  // one queue: a freed block is inactive at once
      d["requested_size"] = requested;
      d["stream"] = 0;
      d["segment_type"] = seg.small ? "small" : "large";
      d["segment_pool_id"] = py::make_tuple(0, 0);
      d["is_expandable"] = false;
      d["frames"] = frames(seg.frames);
      d["blocks"] = blocks;
      segs.append(d);
    }
    py::list device_traces;
    for (const auto& dev : traces) {
      py::list entries;
      for (const auto& e : dev) {
        py::dict d;
        d["action"] = e.action;
        d["addr"] = e.addr;
        d["size"] = e.size;
        d["stream"] = 0;
        d["time_us"] = e.time_us;
        d["frames"] = frames(e.frames);
        if (std::string(e.action) == "oom") d["device_free"] = e.device_free;
        entries.append(d);
      }
      device_traces.append(entries);
    }
    py::dict out;
    out["segments"] = segs;
    out["device_traces"] = device_traces;
    return out.release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
    return nullptr;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

PyMethodDef g_methods[] = {
    {"record_history", record_history, METH_VARARGS,
     "record_history(trace, stacks, free_stacks, cpp, max_entries) -> None\n\n"
     "What the caching allocator records from now on: a trace of its events (at most "
     "max_entries per device), the stack of each live block, stacks of frees too, C++ frames "
     "too. Turning the trace on clears it."},
    {"snapshot", snapshot, METH_NOARGS,
     "snapshot() -> dict\n\n"
     "{'segments': [...], 'device_traces': [[...] per device]} in torch.cuda's snapshot "
     "format, stacks symbolized."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef g_module = {PyModuleDef_HEAD_INIT, "spike_torch._memory",
                        "Memory history and snapshots of the nkipy caching allocator.", -1,
                        g_methods, nullptr, nullptr, nullptr, nullptr};

}  // namespace

extern "C" __attribute__((visibility("default"))) PyObject* spike_torch_memory_py_module() {
  return PyModule_Create(&g_module);
}
