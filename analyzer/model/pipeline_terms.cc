// The pipeline model's terms; see pipeline_terms.h.
#include "analyzer/model/pipeline_terms.h"

#include <algorithm>
#include <cstdio>

namespace pinscope::model::detail {

std::string Ms(double ns) {
  char buf[32];
  if (ns >= 100 * kMs) {
    std::snprintf(buf, sizeof buf, "%.0f ms", ns / kMs);
  } else if (ns >= 10 * kMs) {
    std::snprintf(buf, sizeof buf, "%.1f ms", ns / kMs);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f ms", ns / kMs);
  }
  return buf;
}

std::string Pct(double share) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.0f%%", 100 * share);
  return buf;
}

std::string Gbps(double bytes_per_ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB/s", bytes_per_ns);
  return buf;
}

Derived Derive(const Inputs& in) {
  Derived d;
  const MainStep& m = in.main;
  d.s = m.step_ns;
  d.workers = in.producers.workers;
  d.pin_thread = in.pin_thread.present;
  d.gpu_wait = m.sync_ns + m.other_copy_ns + m.copy_wait_ns;
  d.copy_xfer = std::max(0.0, m.copy_ns - m.copy_wait_ns);
  if (d.workers > 0 || d.pin_thread) {
    d.wait_input = std::max(0.0, m.next_ns - m.next_cpu_ns);
    d.next_own = std::min(m.next_ns, m.next_cpu_ns);
    // Off-CPU while unpickling a batch the queue already held, from a
    // worker that was not making another: its process answering for the
    // descriptors. Part of the main thread's own loop, whatever the number
    // of workers. A receive from a worker busy with its next fetch waits for
    // that fetch: the workers' supply, which stays in wait_input.
    if (!d.pin_thread) {
      const double idle = m.recv_ns - m.recv_cpu_ns - m.recv_busy_off_ns;
      d.handover = std::min(d.wait_input, std::max(0.0, idle));
      d.wait_input -= d.handover;
    }
  } else {
    d.make = m.make_ns;
    d.next_own = std::max(0.0, m.next_ns - m.make_ns);
  }
  d.rest = std::max(0.0, d.s - m.next_ns - m.copy_ns - m.other_copy_ns - m.sync_ns);
  // The previous batch is released when the loop takes the next: a worker's
  // shm segment (with no pin thread) or a fresh buffer the main thread made
  // is freed here, page by page.
  if ((m.batch_shm && !m.batch_pinned) || (m.batch_fresh_alloc && d.workers == 0)) {
    d.release = std::min(d.rest, m.release_ns);
    d.rest -= d.release;
  }
  d.loop = std::max(0.0, d.s - d.wait_input);
  if (d.workers > 0) {
    // A worker is busy for its fetch and for handing the batch over (its CPU
    // between fetches beyond the fetch's own); idle time waiting for an
    // index does not count.
    const Producers& p = in.producers;
    d.worker_each = std::max(p.fetch_ns, p.cycle_ns > 0 ? p.cycle_ns : p.fetch_ns);
    d.producers = d.worker_each / d.workers;
  }
  if (d.pin_thread) {
    d.pin = std::max(in.pin_thread.pin_ns, in.pin_thread.cycle_cpu_ns + in.pin_thread.recv_wait_ns);
  }
  d.gpu = in.gpu.measured ? in.gpu.busy_ns : 0;
  d.copy_device = m.copy_device_ns;
  // CPU the step needs: the main thread's own (not its spinning waits), a
  // batch's making, the pin thread's, the root's other threads'.
  const double main_cpu = std::max(0.0, m.cpu_ns - m.sync_ns - m.other_copy_ns - m.copy_wait_ns);
  const double make_cpu = d.workers > 0 ? in.producers.fetch_cpu_ns : 0;
  d.cpu_demand =
      main_cpu + make_cpu + (d.pin_thread ? in.pin_thread.cycle_cpu_ns : 0) + in.host.other_cpu_ns;
  return d;
}

Timing Today(const Derived& d) {
  Timing t;
  t.copy_engine = d.copy_device;
  // More device work than the step holds: the copy cannot wait for the
  // kernels, nor they for it (1% for the two measurements' noise).
  t.copy_overlaps = d.gpu + d.copy_device > 1.01 * d.s;
  t.producers = d.producers;
  t.pin = d.pin;
  t.loop = d.loop;
  t.gpu = d.gpu;
  return t;
}

double CoresFloor(const Inputs& in, double cpu_demand) {
  return in.host.cores > 0 ? cpu_demand / in.host.cores : 0;
}

double FreshFaultCost(const Inputs& in, const Costs& c) {
  const MainStep& m = in.main;
  const double pages = static_cast<double>(m.batch_bytes) / 4096;
  if (!m.batch_fresh_alloc || m.make_cpu_ns <= 0 || m.make_faults < 0.05 * pages) return 0;
  return std::min(m.make_cpu_ns * 0.9, m.make_faults * c.FirstTouch(4096));
}

Prediction Finish(const Inputs& in, const Derived& d, Change change, Timing t, std::string basis,
                  bool uncertain) {
  Prediction p;
  p.change = std::move(change);
  // The measured step is the limiting stage's effective service time: its
  // own time and what the model's times do not hold (their variance: the
  // queue after it drains and refills). That stage keeps the ratio of the
  // two after the change; the other stages' effective times are their own.
  // A change that leaves the limiting stage alone then predicts today's
  // step, never a gain from the model's gap; one that makes another stage
  // the limit predicts that stage's time.
  const Timing now = Today(d);
  const double today = now.Step();
  if (today > 0) {
    const double f = d.s / today;
    for (auto [was, after] : {std::pair{now.producers, &t.producers}, std::pair{now.pin, &t.pin},
                              std::pair{now.loop, &t.loop}}) {
      if (was >= today) *after *= f;
    }
    if (now.Stream() >= today) t.gpu *= f, t.copy_engine *= f;  // the stream: one stage
  }
  p.step_ns = std::max(t.Step(), 1.0);
  p.speedup = d.s / p.step_ns;
  p.limit_next = t.Limit();
  p.basis = std::move(basis);
  p.uncertain = uncertain;
  return p;
}

}  // namespace pinscope::model::detail
