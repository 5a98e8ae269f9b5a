// spike_torch/csrc/comm_gloo.cpp - the runtime's transport between hosts,
// over a torch.distributed gloo group.
//
// The runtime's communicator moves data within a host through shared memory;
// between hosts it calls a transport (nkrt_comm_transport_t, nkrt/comm.h)
// that an existing engine provides. This one is a dedicated gloo group over
// every rank of the job (group rank = global rank), made by torch_to_nkipy
// (torch_to_nkipy/hosts.py) and handed over through the op
// `spike_torch::comm_set_hosts(ProcessGroup group, int[] host_of)`, called
// from Python with `group.boxed()` (no pybind11 here: the ProcessGroup comes
// as the TorchScript custom class c10d registers).
//
// exchange() wraps each buffer in a CPU tensor without copying
// (at::from_blob), posts every send and recv on the gloo backend, then waits
// for all of them, each within the group's timeout, even after one failed: the
// buffers belong to the caller, so nothing may still be writing into them
// once exchange returns. A failure (an exception from Work::wait: a peer whose
// connection closed, the group's timeout) becomes an nkrt status naming the
// peer ranks and gloo's message, and poisons the transport: messages between
// two ranks match in the order they are posted, so after a lost transfer a
// later one could match the wrong data; every later exchange fails at once,
// naming the first failure. No Python and no GIL: exchange runs on whatever
// runtime thread calls it.

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/library.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "nkipy_device.h"
#include "spike_capi.h"

namespace spike_torch {
namespace {

// What one engine message may add to a status (gloo's messages carry a
// source path and a peer address; a few hundred characters say it all).
constexpr size_t kMaxEngineMessage = 400;
// Peers whose failures a status spells out (the rest are counted).
constexpr size_t kMaxPeersListed = 4;

struct GlooTransport {
  c10::intrusive_ptr<c10d::ProcessGroup> group;  // keeps the backend's store alive
  c10::intrusive_ptr<c10d::Backend> backend;
  int rank;
  int size;
  std::mutex mu;        // exchange is called one at a time; this makes sure
  std::string failed;   // the first failure; non-empty: every exchange fails
};

// The C API table, checked for the members this file uses (comm_set_hosts
// and status_make came with version 4).
const spike_capi_t& comm_api() {
  const spike_capi_t& a = api();
  TORCH_CHECK(a.version >= 4 && a.struct_size >= offsetof(spike_capi_t, status_make) +
                                                    sizeof(a.status_make) &&
                  a.comm_set_hosts != nullptr && a.status_make != nullptr,
              "spike_torch: spike's C API (version ", a.version, ", ", a.struct_size,
              " bytes) has no comm_set_hosts: rebuild spike (make venv)");
  return a;
}

nkrt_status_t make_status(nkrt_code_t code, const std::string& message) {
  return g_api->status_make(code, message.c_str());
}

std::string clip(std::string s) {
  // gloo starts its messages with "[<source path>:<line>] "
  if (!s.empty() && s[0] == '[') {
    const size_t end = s.find("] ");
    if (end != std::string::npos && end < 200) s = s.substr(end + 2);
  }
  // ... and may end with advice to the reader that says nothing of the failure
  const size_t advice = s.find(" Check the logs of the remote worker");
  if (advice != std::string::npos) s.resize(advice);
  if (s.size() > kMaxEngineMessage) s = s.substr(0, kMaxEngineMessage) + "...";
  for (char& ch : s)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return s;
}

std::string describe(const nkrt_comm_xfer_t& x) {
  return std::string(x.send ? "send of " : "recv of ") + std::to_string(x.bytes) + " bytes";
}

// The status of the failed transfers, by peer: "between hosts: the transfer
// with rank 2 failed (recv of 4096 bytes: <gloo's message>)".
nkrt_status_t failure_status(GlooTransport* t,
                             const std::map<int32_t, std::string>& by_peer, bool timed_out) {
  std::string ranks, details;
  size_t listed = 0;
  for (const auto& [peer, what] : by_peer) {
    ranks += (ranks.empty() ? "" : ", ") + std::to_string(peer);
    if (listed++ < kMaxPeersListed)
      details += std::string(details.empty() ? "" : "; ") + "rank " + std::to_string(peer) +
                 ": " + what;
  }
  if (listed > kMaxPeersListed)
    details += "; and " + std::to_string(listed - kMaxPeersListed) + " more";
  t->failed = "the transfer" + std::string(by_peer.size() > 1 ? "s" : "") + " with rank" +
              (by_peer.size() > 1 ? "s " : " ") + ranks + " failed over gloo (" + details + ")";
  return make_status(timed_out ? NKRT_TIMEOUT : NKRT_FAILURE, "between hosts: " + t->failed);
}

nkrt_status_t exchange(void* ctx, const nkrt_comm_xfer_t* xfers, uint32_t n) noexcept {
  auto* t = static_cast<GlooTransport*>(ctx);
  try {
    std::lock_guard<std::mutex> lock(t->mu);
    if (!t->failed.empty())
      return make_status(NKRT_FAILURE,
                         "between hosts: an earlier transfer failed, so transfers between "
                         "hosts can no longer be matched; the job's collectives cannot go on "
                         "(the first failure: " + t->failed + ")");
    if (n > 0 && !xfers) return make_status(NKRT_INVALID, "between hosts: NULL transfer list");
    for (uint32_t i = 0; i < n; i++) {
      const nkrt_comm_xfer_t& x = xfers[i];
      if (x.peer < 0 || x.peer >= t->size || x.peer == t->rank)
        return make_status(NKRT_INVALID, "between hosts: transfer " + std::to_string(i) +
                                             " names rank " + std::to_string(x.peer) +
                                             ", not another rank of the " +
                                             std::to_string(t->size) + " in the gloo group");
      if (x.bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (x.bytes > 0 && !x.buf))
        return make_status(NKRT_INVALID, "between hosts: transfer " + std::to_string(i) +
                                             " (" + describe(x) + ") has no buffer");
    }
    // Post everything, then wait for everything that was posted.
    std::vector<std::pair<c10::intrusive_ptr<c10d::Work>, uint32_t>> posted;
    posted.reserve(n);
    std::map<int32_t, std::string> by_peer;
    bool timed_out = false;
    auto record = [&](uint32_t i, const char* what) {
      std::string engine = clip(what);
      if (engine.find("Timed out") != std::string::npos ||
          engine.find("timed out") != std::string::npos)
        timed_out = true;
      auto& slot = by_peer[xfers[i].peer];
      if (slot.empty()) slot = describe(xfers[i]) + ": " + engine;
    };
    for (uint32_t i = 0; i < n && by_peer.empty(); i++) {
      const nkrt_comm_xfer_t& x = xfers[i];
      if (x.bytes == 0) continue;  // both sides skip an empty transfer
      try {
        std::vector<at::Tensor> one{at::from_blob(
            x.buf, {static_cast<int64_t>(x.bytes)}, at::TensorOptions().dtype(at::kByte))};
        posted.emplace_back(x.send ? t->backend->send(one, x.peer, 0)
                                   : t->backend->recv(one, x.peer, 0),
                            i);
      } catch (const std::exception& e) {
        record(i, e.what());
      }
    }
    for (auto& [work, i] : posted) {
      try {
        work->wait();  // kNoTimeout: the group's timeout
      } catch (const std::exception& e) {
        record(i, e.what());
      }
    }
    if (by_peer.empty()) return nullptr;
    return failure_status(t, by_peer, timed_out);
  } catch (const std::exception& e) {
    t->failed = clip(e.what());
    return make_status(NKRT_FAILURE, "between hosts: " + t->failed);
  } catch (...) {
    t->failed = "an unknown C++ exception";
    return make_status(NKRT_FAILURE, "between hosts: an unknown C++ exception");
  }
}

void release(void* ctx) noexcept { delete static_cast<GlooTransport*>(ctx); }

// spike_torch::comm_set_hosts: the job's hosts (host_of[r] = lowest rank on
// rank r's host), with a transport over `group` when there are several.
void comm_set_hosts(const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                    const std::vector<int64_t>& host_of) {
  const spike_capi_t& a = comm_api();
  TORCH_CHECK(group, "comm_set_hosts: no process group");
  const int64_t world = static_cast<int64_t>(host_of.size());
  TORCH_CHECK(world >= 1 && world <= 1024, "comm_set_hosts: host_of has ", world,
              " entries; a job has 1 to 1024 ranks");
  TORCH_CHECK(group->getSize() == world, "comm_set_hosts: the gloo group has ",
              group->getSize(), " ranks, host_of ", world,
              ": the group must hold every rank of the job");
  std::vector<uint32_t> hosts(host_of.size());
  bool several = false;
  for (int64_t r = 0; r < world; r++) {
    const int64_t h = host_of[r];
    TORCH_CHECK(h >= 0 && h <= r && host_of[h] == h, "comm_set_hosts: host_of[", r, "] is ",
                h, ": each rank's host is the lowest rank on it");
    hosts[r] = static_cast<uint32_t>(h);
    several = several || h != 0;
  }
  nkrt_status_t st;
  if (!several) {
    st = a.comm_set_hosts(static_cast<uint32_t>(world), nullptr, nullptr);
  } else {
    auto backend = group->getBackend(c10::DeviceType::CPU);
    TORCH_CHECK(backend, "comm_set_hosts: the group has no CPU backend");
    auto* t = new GlooTransport{group, backend, group->getRank(), group->getSize(), {}, {}};
    nkrt_comm_transport_t transport{};
    transport.struct_size = sizeof(transport);
    transport.ctx = t;
    transport.exchange = exchange;
    transport.release = release;
    st = a.comm_set_hosts(static_cast<uint32_t>(world), hosts.data(), &transport);
    if (st) delete t;  // refused: the runtime kept nothing
  }
  check_status(st, "the runtime refused the job's hosts");
}

// spike_torch::comm_clear_hosts: every rank on one host (shared memory only).
void comm_clear_hosts(int64_t world_size) {
  const spike_capi_t& a = comm_api();
  TORCH_CHECK(world_size >= 1 && world_size <= 1024, "comm_clear_hosts: world size ",
              world_size, " is not 1 to 1024");
  check_status(a.comm_set_hosts(static_cast<uint32_t>(world_size), nullptr, nullptr),
               "the runtime refused to clear the job's hosts");
}

// spike_torch::_comm_gloo_exchange: one exchange() over a transport on
// `group` kept for the process (a new one when the group changes), so tests
// can drive the transport without the runtime: buffers[i] (contiguous CPU
// tensors) goes to (sends[i]) or comes from peers[i].
void comm_gloo_exchange(const c10::intrusive_ptr<c10d::ProcessGroup>& group,
                        const std::vector<int64_t>& peers, const std::vector<int64_t>& sends,
                        const std::vector<at::Tensor>& buffers) {
  comm_api();
  static std::mutex mu;
  static GlooTransport* kept = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  TORCH_CHECK(peers.size() == sends.size() && peers.size() == buffers.size(),
              "_comm_gloo_exchange: peers, sends and buffers differ in length");
  if (!kept || kept->group.get() != group.get()) {
    delete kept;
    kept = new GlooTransport{group, group->getBackend(c10::DeviceType::CPU), group->getRank(),
                             group->getSize(), {}, {}};
  }
  std::vector<nkrt_comm_xfer_t> xfers(peers.size());
  for (size_t i = 0; i < peers.size(); i++) {
    const at::Tensor& b = buffers[i];
    TORCH_CHECK(b.device().is_cpu() && b.is_contiguous(),
                "_comm_gloo_exchange: buffer ", i, " is not a contiguous CPU tensor");
    xfers[i] = nkrt_comm_xfer_t{static_cast<int32_t>(peers[i]), sends[i] != 0 ? 1u : 0u,
                                b.data_ptr(), static_cast<uint64_t>(b.nbytes())};
  }
  check_status(exchange(kept, xfers.data(), static_cast<uint32_t>(xfers.size())),
               "exchange");
}

}  // namespace
}  // namespace spike_torch

TORCH_LIBRARY(spike_torch, m) {
  m.def("comm_set_hosts(__torch__.torch.classes.c10d.ProcessGroup group, int[] host_of) -> ()",
        spike_torch::comm_set_hosts);
  m.def("comm_clear_hosts(int world_size) -> ()", spike_torch::comm_clear_hosts);
  m.def("_comm_gloo_exchange(__torch__.torch.classes.c10d.ProcessGroup group, int[] peers, "
        "int[] sends, Tensor[] buffers) -> ()",
        spike_torch::comm_gloo_exchange);
}
