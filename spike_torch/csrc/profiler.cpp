// spike_torch/csrc/profiler.cpp - the device in torch.profiler: a Kineto
// activity profiler for PrivateUse1 (REGISTER_PRIVATEUSE1_PROFILER at the end).
//
// While a torch.profiler.profile with ProfilerActivity.PrivateUse1 runs, the
// session keeps an nkrt trace session on every core (the runtime's own event
// source, the one SystemTraceSession and the Perfetto files read) and
// notes when each ATen op began and ended on each thread (Kineto hands it the
// op's correlation id on entry and exit). When the profile ends, each kernel
// execution becomes a CONCURRENT_KERNEL activity and each copy a GPU_MEMCPY
// activity (PyTorch reads both as PrivateUse1 device time), linked to the
// innermost op that was running when it was launched: when it started for
// synchronous work, when it was queued for queued work (non_blocking copies
// from pinned memory; the runtime records a "queued" event for those). Runtime timestamps are
// CLOCK_MONOTONIC; Kineto's are the system clock: one offset, taken at start,
// converts them.

// Kineto's activities format their metadata with fmt, which libtorch does not
// export: compile it into this file.
#define FMT_HEADER_ONLY 1
#include <IActivityProfiler.h>
#include <libkineto.h>
#include <output_base.h>

#define USE_KINETO 1  // the registry header is empty without it
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "nkipy_device.h"

namespace spike_torch {
namespace {

int64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

int64_t wall_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// An op's interval on one thread (monotonic ns) and its correlation id.
struct OpSpan {
  uint64_t id;
  int64_t start, end;
};

// One runtime operation: an execution or a copy, start and stop paired.
struct DeviceOp {
  uint32_t kind, core;
  int64_t start, end;
  int64_t submitted;  // queued work: when it was queued; else its start
  uint64_t bytes;
  std::string name;
};

const char* copy_name(uint32_t kind) {
  switch (kind) {
    case NKRT_TRACE_WRITE: return "Memcpy HtoD (host -> nkipy)";
    case NKRT_TRACE_READ: return "Memcpy DtoH (nkipy -> host)";
    default: return "Memcpy DtoD (nkipy -> nkipy)";
  }
}

class Session final : public libkineto::IActivityProfilerSession {
 public:
  Session() {
    if (!g_api) return;
    nkrt_runtime_t* rt = nullptr;
    if (api().live_generation() == 0) {
      nkrt_status_t st = api().acquire_runtime(&rt, &gen_);
      if (st) {
        errors_.push_back(std::string("nkipy: no runtime to profile: ") +
                          api().status_message(st));
        api().status_free(st);
        return;
      }
    }
    gen_ = api().live_generation();
  }

  ~Session() override { release(); }

  void start() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!g_api || gen_ == 0 || trace_) return;
    offset_ = wall_ns() - mono_ns();
    nkrt_status_t st = api().trace_start(gen_, -1, &trace_);
    if (st) {
      errors_.push_back(std::string("nkipy: tracing the runtime failed: ") +
                        api().status_message(st));
      api().status_free(st);
      trace_ = nullptr;
    }
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!trace_) return;
    nkrt_trace_event_t* ev = nullptr;
    size_t n = 0;
    nkrt_status_t st = api().trace_events(gen_, trace_, 1, &ev, &n);
    if (st) {  // the runtime closed while profiling: its events went with it
      errors_.push_back(std::string("nkipy: the device runtime closed during the profile; its "
                                    "kernels and copies are not in it (") +
                        api().status_message(st) + ")");
      api().status_free(st);
    } else {
      pair_events(ev, n);
      api().free_memory(ev);
    }
    api().trace_destroy(gen_, trace_);
    trace_ = nullptr;
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override {
    std::lock_guard<std::mutex> lock(mu_);
    return errors_;
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback linked, int64_t, int64_t) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<OpSpan> spans = all_spans_locked();
    for (const DeviceOp& op : ops_) {
      bool exec = op.kind == NKRT_TRACE_EXEC;
      auto a = std::make_unique<libkineto::GenericTraceActivity>(
          span_, exec ? libkineto::ActivityType::CONCURRENT_KERNEL
                      : libkineto::ActivityType::GPU_MEMCPY,
          exec ? op.name : std::string(copy_name(op.kind)));
      a->startTime = op.start + offset_;
      a->endTime = op.end + offset_;
      a->device = static_cast<int32_t>(op.core);
      a->resource = 0;  // the core's one in-order queue: stream 0
      uint64_t corr = innermost(spans, op.submitted);  // the op that launched or queued it
      a->id = static_cast<int64_t>(corr);
      if (corr && linked) a->linked = linked(static_cast<int32_t>(corr));
      a->addMetadata("device", op.core);
      if (!exec) {
        a->addMetadata("bytes", op.bytes);
        a->addMetadataQuoted("tensor", op.name);
      }
      a->log(logger);
      activities_.push_back(std::move(a));
    }
  }

  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override { return nullptr; }
  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return {}; }
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

  void pushCorrelationId(uint64_t id) override {
    int64_t now = mono_ns();
    std::lock_guard<std::mutex> lock(mu_);
    threads_[std::this_thread::get_id()].open.push_back({id, now, INT64_MAX});
  }

  void popCorrelationId() override {
    int64_t now = mono_ns();
    std::lock_guard<std::mutex> lock(mu_);
    auto& t = threads_[std::this_thread::get_id()];
    if (t.open.empty()) return;
    OpSpan s = t.open.back();
    t.open.pop_back();
    s.end = now;
    t.done.push_back(s);
  }

 private:
  struct ThreadSpans {
    std::vector<OpSpan> open, done;
  };

  void release() {
    if (trace_ && g_api) api().trace_destroy(gen_, trace_);
    trace_ = nullptr;
  }

  void pair_events(const nkrt_trace_event_t* ev, size_t n) {
    std::unordered_map<uint64_t, size_t> started;  // tracking id -> index in ops_
    std::unordered_map<uint64_t, int64_t> queued;  // tracking id -> when it was queued
    for (size_t i = 0; i < n; i++) {
      const nkrt_trace_event_t& e = ev[i];
      int64_t ts = static_cast<int64_t>(e.timestamp_ns);
      if (e.phase == 2) {
        queued[e.tracking_id] = ts;
      } else if (e.phase == 0) {
        auto q = queued.find(e.tracking_id);
        int64_t sub = q == queued.end() ? ts : q->second;
        if (q != queued.end()) queued.erase(q);
        started[e.tracking_id] = ops_.size();
        ops_.push_back({e.kind, e.core, ts, ts, sub, e.bytes, std::string(e.name)});
      } else {
        auto it = started.find(e.tracking_id);
        if (it == started.end()) continue;  // started before the profile
        ops_[it->second].end = ts;
        started.erase(it);
      }
    }
  }

  std::vector<OpSpan> all_spans_locked() const {
    std::vector<OpSpan> out;
    for (const auto& kv : threads_) {
      out.insert(out.end(), kv.second.done.begin(), kv.second.done.end());
      out.insert(out.end(), kv.second.open.begin(), kv.second.open.end());
    }
    std::sort(out.begin(), out.end(),
              [](const OpSpan& a, const OpSpan& b) { return a.start < b.start; });
    return out;
  }

  // The correlation id of the op that started last before `t` and was still
  // running at `t` (0: none).
  static uint64_t innermost(const std::vector<OpSpan>& spans, int64_t t) {
    auto it = std::upper_bound(spans.begin(), spans.end(), t,
                               [](int64_t v, const OpSpan& s) { return v < s.start; });
    for (int steps = 0; it != spans.begin() && steps < 100000; steps++) {
      --it;
      if (it->end >= t) return it->id;
    }
    return 0;
  }

  std::mutex mu_;
  uint64_t gen_ = 0;
  nkrt_trace_session_t* trace_ = nullptr;
  int64_t offset_ = 0;
  std::vector<std::string> errors_;
  std::vector<DeviceOp> ops_;
  std::unordered_map<std::thread::id, ThreadSpans> threads_;
  libkineto::TraceSpan span_{0, 0, "nkipy"};
  std::vector<std::unique_ptr<libkineto::GenericTraceActivity>> activities_;
};

class NkipyProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<libkineto::ActivityType>& availableActivities() const override {
    return types_;
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& activity_types, const libkineto::Config&) override {
    for (auto t : activity_types)
      if (types_.count(t)) return std::make_unique<Session>();
    return nullptr;
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t, int64_t, const std::set<libkineto::ActivityType>& activity_types,
      const libkineto::Config& config) override {
    return configure(activity_types, config);
  }

 private:
  std::string name_{"nkipy"};
  std::set<libkineto::ActivityType> types_{libkineto::ActivityType::CONCURRENT_KERNEL,
                                           libkineto::ActivityType::GPU_MEMCPY};
};

REGISTER_PRIVATEUSE1_PROFILER(NkipyProfiler);

}  // namespace
}  // namespace spike_torch
