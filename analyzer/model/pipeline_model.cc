// The pipeline model; see pipeline_model.h and docs/pipeline-model.md.
//
// The step loop is a pipeline with queues between its stages: the workers
// (or the main thread itself with num_workers=0) make batches, the pin
// thread copies them into pinned memory (pin_memory=True), the main thread
// takes each batch, copies it to the GPU and launches the step, the GPU runs
// it. In steady state the step time is the largest service time of a stage
// that works in parallel with the others, and the main thread's own loop
// (its work plus its waits for the GPU, which a per-step synchronization
// serializes). The stage the main thread waits on is the critical one; a
// change is re-timed by changing the service times it touches and taking
// the maximum again.
#include "analyzer/model/pipeline_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace pinscope::model {

namespace {

constexpr double kMs = 1e6;

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

// ns to move `bytes` at `gbps` (1e9 bytes/s); 0 when the rate is unknown.
double At(uint64_t bytes, double gbps) { return gbps > 0 ? static_cast<double>(bytes) / gbps : 0; }

// Calibrated costs with the built-in table as the fallback for a field the
// run's calibration lacks (older calibrations).
struct Costs {
  const Calibration& cal;
  Calibration builtin = DefaultCalibration();
  double Pinned(uint64_t b) const { return At(b, cal.PinnedGbps(true, b)); }
  double Pageable(uint64_t b) const { return At(b, cal.PageableGbps(true, b)); }
  double HostCopy(uint64_t b) const {
    double g = cal.HostCopyGbps(b);
    return At(b, g > 0 ? g : 8.0);  // facts section 10: 7-12 GB/s, one thread
  }
  double Register(uint64_t b) const {
    double g = cal.RegisterGbps(b);
    return At(b, g > 0 ? g : builtin.RegisterGbps(b));
  }
  // cudaHostUnregister: facts section 4 (1.6 ms per 73.5 MiB).
  double Unregister(uint64_t b) const { return At(b, 48.0); }
  double FirstTouch(uint64_t b) const {
    double g = cal.FirstTouchGbps(b);
    return At(b, g > 0 ? g : builtin.FirstTouchGbps(b));
  }
  double MapTouch(uint64_t b) const {
    double g = cal.MapTouchGbps(b);
    return At(b, g > 0 ? g : 22.0);  // measured on the H200 machine, 2026-12-01
  }
  // Freeing a worker's shm segment on the thread that drops the batch.
  double Release(uint64_t b) const {
    double g = cal.ShmReleaseGbps(b);
    return At(b, g > 0 ? g : 6.0);  // 12.7 ms per 73.5 MiB on the H200 machine, 2026-12-01
  }
  // Taking a batch from an idle worker (the queue, unpickling, asking the
  // worker's process for its descriptors): the main thread's __next__ with
  // workers, when no run measured it. 0.75 ms: __next__ plus the hand-over
  // from idle workers in the H200 traces of 2026-12-01 with 12-15 workers
  // (main_process 12 workers: 0.49 + 0.26 ms; input_starvation 14 workers:
  // 0.57 + 0.3 ms median), docs/validation.md.
  double Receive() const { return 0.75e6; }
};

// What the measured step is made of, derived once.
struct Derived {
  double s = 0;  // step
  int workers = 0;
  bool pin_thread = false;
  double wait_input = 0;   // the main thread waiting for the next batch (an empty queue)
  double handover = 0;     // the main thread waiting for a worker to hand a made batch over
  double gpu_wait = 0;     // the main thread waiting for the GPU (syncs, stream waits)
  double copy_xfer = 0;    // the batch copy's own time on the main thread
  double make = 0;         // batch making on the main thread (num_workers=0)
  double next_own = 0;     // the main's own work inside __next__ (besides making)
  double release = 0;      // releasing each worker batch's shm segment on the main thread
  double rest = 0;         // everything else on the main thread: Python and launches
  double loop = 0;         // the main loop's time if input were instant: s - wait_input
  double producers = 0;    // the workers' service time per batch, all together
  double worker_each = 0;  // one worker's service time per batch
  double pin = 0;          // the pin thread's service time per batch
  double gpu = 0;          // GPU busy per step (kernels and memsets)
  double copy_device = 0;  // the batch copies' device time per step
  double cpu_demand = 0;   // CPU per step of all the pipeline's threads
};

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

// The pipeline's step for given stage times.
struct Timing {
  double producers = 0, pin = 0, loop = 0, gpu = 0, cpu_floor = 0, extra = 0;
  double copy_engine = 0;  // the batch's DMA: no step is shorter
  const char* extra_name = "";
  double Step() const {
    return std::max({producers, pin, loop, gpu, cpu_floor, extra, copy_engine});
  }
  std::string Limit() const {
    const double s = Step();
    if (s <= 0) return "";
    if (loop >= s) return "the main thread";
    if (producers >= s) return "the workers";
    if (pin >= s) return "the pin thread";
    if (gpu >= s) return "the GPU";
    if (cpu_floor >= s) return "the CPU cores";
    if (copy_engine >= s) return "the host-to-device copy (PCIe)";
    return extra_name;
  }
};

Timing Today(const Derived& d) {
  Timing t;
  t.copy_engine = d.copy_device;
  t.producers = d.producers;
  t.pin = d.pin;
  t.loop = d.loop;
  t.gpu = d.gpu;
  return t;
}

double CoresFloor(const Inputs& in, double cpu_demand) {
  return in.host.cores > 0 ? cpu_demand / in.host.cores : 0;
}

// The page-fault cost of the main thread's fresh batch buffers: the faults
// its batch making took, at the calibrated cost of one (first touch of fresh
// anonymous memory, per 4 KiB page), bounded by the making's CPU time.
// Fresh pages show as faults: a buffer glibc hands out again from its heap
// is new to the program but not to the kernel, and costs none.
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
                              std::pair{now.loop, &t.loop}, std::pair{now.gpu, &t.gpu},
                              std::pair{now.copy_engine, &t.copy_engine}}) {
      if (was >= today) *after *= f;
    }
  }
  p.step_ns = std::max(t.Step(), 1.0);
  p.speedup = d.s / p.step_ns;
  p.limit_next = t.Limit();
  p.basis = std::move(basis);
  p.uncertain = uncertain;
  return p;
}

// --- the changes -------------------------------------------------------------

Prediction Workers(const Inputs& in, const Calibration& cal, int k, const Change& change) {
  const Derived d = Derive(in);
  Costs c{cal};
  Timing t = Today(d);
  std::string basis;
  bool uncertain = false;
  double demand = d.cpu_demand;
  if (d.workers > 0) {
    t.producers = d.worker_each / k;
    basis = "one worker makes a batch in " + Ms(d.worker_each) + ": " + std::to_string(k) +
            " workers supply one every " + Ms(t.producers);
    if (d.handover > 0)
      basis += "; the main thread's own " + Ms(d.handover) +
               " a step to take each batch over from an idle worker stays";
  } else {
    // The main thread stops making batches; a worker makes each in what the
    // main thread took, writing it into a fresh shared-memory segment, and
    // the main thread then reads it from that mapping.
    const uint64_t b = in.main.batch_bytes;
    const double fresh = in.main.batch_fresh_alloc ? 0 : c.FirstTouch(b);
    const double each = d.make + fresh;
    t.producers = each / k;
    // Each batch now reaches the main thread through a fresh shm segment:
    // taking it, the page faults of reading it in, freeing it afterwards.
    const double receive = c.Receive() + c.MapTouch(b) + c.Release(b);
    t.loop = std::max(0.0, d.loop - d.make + receive);
    demand += in.main.make_cpu_ns + fresh;
    basis = "a worker makes a batch in " + Ms(each) + " (the main thread's " + Ms(d.make) +
            (fresh > 0 ? " plus " + Ms(fresh) + " of page faults on its fresh shm segment" : "") +
            "): " + std::to_string(k) + " workers supply one every " + Ms(t.producers) +
            "; the main thread's loop drops to " + Ms(t.loop) + " (its batch making out; " +
            Ms(receive) + " to take each batch from shared memory, fault it in and free it)";
    uncertain = true;  // a worker's hand-over is not measured without workers
  }
  t.cpu_floor = CoresFloor(in, demand);
  if (in.host.cores > 0 && k + 2 > static_cast<int>(in.host.cores)) uncertain = true;
  return Finish(in, d, change, t, basis, uncertain);
}

Prediction Pin(const Inputs& in, const Calibration& cal, const Change& change) {
  const Derived d = Derive(in);
  Costs c{cal};
  Timing t = Today(d);
  const uint64_t b = in.main.batch_bytes;
  std::string basis;
  bool uncertain = false;
  if (in.main.batch_pinned) {
    // pin_memory=True: the batch is pinned by PyTorch already.
    return Finish(in, d, change, t, "the batches are already pinned (pin_memory=True)", false);
  }
  const double pinned = c.Pinned(b);
  const double saved_copy = std::max(0.0, d.copy_xfer - pinned);
  double loop = d.loop - saved_copy;
  t.copy_engine = pinned;
  basis = "the batch copy from " + Ms(d.copy_xfer) + " to " + Ms(pinned) + " at the pinned rate";
  if (change.id == "PINSCOPE_PIN_BUDGET" && in.main.pin_register_ns > 0) {
    // Registrations the copies made themselves (the budget was full, so
    // pin-ahead could not) leave the main thread.
    loop -= in.main.pin_register_ns;
    basis +=
        "; " + Ms(in.main.pin_register_ns) + " of registrations per step leave the main thread";
  }
  if (d.workers == 0) {
    // The recycle list keeps the freed batch buffer registered: the next
    // batch is collated into it, without page faults, copied at DMA speed.
    const double faults = FreshFaultCost(in, c);
    loop -= faults;
    if (faults > 0) {
      // Kept registered and handed out again, the buffer is neither faulted
      // in nor freed each step.
      loop -= d.release;
      basis += "; the reused buffer saves the batch's page faults (" + Ms(faults) +
               ") and its free (" + Ms(d.release) + ")";
      uncertain = true;  // the fault cost is the calibrated first touch
    }
  } else {
    // Each new shm batch is registered by pinscope's pin-ahead thread when
    // it is mapped (faulting its pages in) and unregistered when it is freed,
    // on the thread that frees it.
    // The driver serializes registering and unregistering: freeing a batch
    // on the main thread waits for the pin-ahead thread's registration of
    // the next one.
    const double reg = c.Register(b) + c.MapTouch(b);
    const double unreg = c.Unregister(b);
    loop += unreg + reg;
    t.extra = reg;
    t.extra_name = "pinscope's pin-ahead thread";
    basis += "; each new shm batch is registered (" + Ms(reg) +
             ", pin-ahead thread) and unregistered when freed (" + Ms(unreg) +
             "), which the driver serializes with the main thread's free";
    uncertain = true;
  }
  t.loop = std::max(loop, 0.0);
  return Finish(in, d, change, t, basis, uncertain);
}

Prediction PinMemoryOff(const Inputs& in, const Calibration& cal, bool with_pin,
                        const Change& change) {
  const Derived d = Derive(in);
  Costs c{cal};
  Timing t = Today(d);
  const uint64_t b = in.main.batch_bytes;
  // The pin thread's work on each batch moves to the main thread: receiving
  // and releasing it (what the pin thread does besides pin_memory()), then a
  // pageable copy from the fresh mapping (or, under PINSCOPE_PIN=1, a pinned
  // copy of a mapping pinscope registered).
  const double release = std::max(0.0, in.pin_thread.cycle_cpu_ns - in.pin_thread.pin_cpu_ns);
  double copy = with_pin ? c.Pinned(b) : c.Pageable(b) + c.MapTouch(b);
  double loop = d.loop - d.copy_xfer + release + copy;
  std::string basis = "no pin thread; the main thread receives and releases each batch (" +
                      Ms(release) + ", the pin thread's work outside pin_memory) and copies it " +
                      (with_pin ? "pinned, " : "from pageable shm, ") + Ms(copy);
  t.pin = 0;
  if (with_pin) {
    // As under Pin(): the free waits for the registration of the next batch.
    const double reg = c.Register(b) + c.MapTouch(b);
    const double unreg = c.Unregister(b);
    loop += unreg + reg;
    t.extra = reg;
    t.extra_name = "pinscope's pin-ahead thread";
    basis += ", plus " + Ms(unreg) + " to unregister it; registering takes " + Ms(reg) +
             " on pinscope's pin-ahead thread";
  }
  t.loop = std::max(loop, 0.0);
  t.cpu_floor = CoresFloor(in, d.cpu_demand);
  return Finish(in, d, change, t, basis, true);
}

Prediction PinMemoryOn(const Inputs& in, const Calibration& cal, const Change& change) {
  const Derived d = Derive(in);
  Costs c{cal};
  Timing t = Today(d);
  const uint64_t b = in.main.batch_bytes;
  // A pin thread receives each batch (what the main thread does with it
  // now outside its copy: releasing it), copies it into pinned memory (one
  // thread's memcpy, and the faults of reading the worker's mapping in),
  // and the main thread's copy becomes a pinned one.
  // The hand-over wait moves with the receiving.
  const double release = d.release > 0 ? d.release : c.Release(b);
  t.pin = c.Receive() + d.handover + release + c.HostCopy(b) + c.MapTouch(b);
  t.loop = std::max(0.0, d.loop - d.copy_xfer - d.release - d.handover + c.Pinned(b) * 0.05);
  std::string basis = "a pin thread takes each batch in " + Ms(t.pin) + " (receiving it, " +
                      Ms(c.HostCopy(b)) + " to copy it into pinned memory at the calibrated " +
                      "host copy rate, faults reading it in); the main thread's copy becomes " +
                      "asynchronous";
  return Finish(in, d, change, t, basis, true);
}

// Half the bytes per batch (the batch sent in its source dtype, uint8
// images, or bfloat16, and converted on the GPU): the batch's DMA and the
// main thread's copy calls halve; the rest stays (the conversion on the GPU
// is a kernel over the batch, small beside the step's).
Prediction HalfBytes(const Inputs& in, const Change& change) {
  const Derived d = Derive(in);
  Timing t = Today(d);
  t.copy_engine = d.copy_device / 2;
  // The main thread's waits for the stream covered the DMA: they shrink by
  // what the DMA saves, at most.
  const double wait_saved = std::min(d.gpu_wait, d.copy_device / 2);
  t.loop = std::max(0.0, d.loop - d.copy_xfer / 2 - wait_saved);
  return Finish(in, d, change, t,
                "the batch's DMA from " + Ms(d.copy_device) + " to " + Ms(d.copy_device / 2) +
                    " a step, the main thread's copy calls from " + Ms(d.copy_xfer) + " to " +
                    Ms(d.copy_xfer / 2) + " and its waits for the stream by " + Ms(wait_saved),
                false);
}

Prediction NoSync(const Inputs& in, const Calibration& cal, const Change& change) {
  (void)cal;
  const Derived d = Derive(in);
  Timing t = Today(d);
  // Without a per-step wait for the GPU the main thread runs ahead, its own
  // work overlapping the GPU's: the GPU keeps running the queued step while
  // the main thread takes the next batch (a pageable copy then waits behind
  // the queue, and the GPU stays busy).
  const double own = std::max(0.0, d.loop - d.gpu_wait);
  t.loop = own;
  const std::string basis = "the main thread's own " + Ms(own) + " and the GPU's " + Ms(d.gpu) +
                            " per step overlap instead of " + Ms(d.gpu_wait) +
                            " of waiting for the GPU each step";
  return Finish(in, d, change, t, basis, false);
}

// A batch k times as large, as samples/s: the main thread's per-step work
// that does not depend on the batch stays (Python, launches), what moves the
// batch grows k times, and so do the workers' and the GPU's per-step work
// (the GPU's an upper bound: small kernels do not slow down with size).
Prediction Batch(const Inputs& in, const Calibration& cal, int k, const Change& change) {
  const Derived d = Derive(in);
  Timing t = Today(d);
  const double prop = d.copy_xfer + d.make;
  const double fixed = std::max(0.0, d.loop - prop);
  t.loop = fixed + k * prop;
  t.producers = d.producers * k;
  t.pin = d.pin * k;
  t.gpu = d.gpu * k;
  t.cpu_floor = CoresFloor(in, d.cpu_demand * k);
  Prediction p =
      Finish(in, d, change, t,
             "per step the main thread's " + Ms(fixed) +
                 " of Python and launches "
                 "stays, the batch's handling (" +
                 Ms(prop) + ") and the GPU's " + Ms(d.gpu) + " grow " + std::to_string(k) + "x",
             true);
  // Compared per sample: k times the samples per step.
  p.speedup = k * d.s / p.step_ns;
  return p;
}

// persistent_workers=True: a fresh iterator forks its workers anew every
// epoch, and the epoch's first batch waits for them to start and make it;
// persistent workers start once, and the first batch waits only for its
// fetch. The saving is per epoch: over an epoch of n steps, today's n
// steady steps and the start's time beyond one step, less what the workers'
// start took (the measured start less a fetch). Where the steady window
// holds epoch starts, its step already carries their share.
Prediction PersistentWorkers(const Inputs& in, const Change& change) {
  const Derived d = Derive(in);
  const LoaderFacts& l = in.loader;
  Prediction p;
  p.change = change;
  const double n = static_cast<double>(std::max<uint64_t>(1, l.steps_per_epoch));
  const double saved = std::max(0.0, l.epoch_start_ns - d.worker_each);
  double epoch = n * d.s + std::max(0.0, l.epoch_start_ns - d.s);  // an epoch today
  if (l.epochs_in_window > 0) epoch = n * d.s;
  // No shorter than its steps at the stages' own times.
  const double after = std::max(n * Today(d).Step(), epoch - saved);
  p.speedup = epoch / after;
  p.step_ns = d.s / p.speedup;
  p.limit_next = "";
  p.basis = "each epoch starts its " + std::to_string(d.workers) +
            " workers anew: " + Ms(l.epoch_start_ns) +
            " from the epoch's iterator to its first batch, of which " + Ms(saved) +
            " beyond a worker's fetch (" + Ms(d.worker_each) +
            "); started once, over an epoch of " + std::to_string(l.steps_per_epoch) +
            " steps that is " + Ms(saved / n) + " a step (the step counted over whole epochs)";
  p.uncertain = false;
  return p;
}

Change SetChange(const std::string& id, const std::string& what,
                 std::vector<std::pair<std::string, std::string>> env) {
  Change c;
  c.id = id;
  c.what = what;
  c.env = std::move(env);
  return c;
}

Change CodeChange(const std::string& id, const std::string& what) {
  Change c;
  c.id = id;
  c.what = what;
  c.code_change = true;
  return c;
}

// The worker counts worth trying: doublings from today, up to the cores
// the job may use less the main process.
std::vector<int> WorkerCounts(const Inputs& in) {
  const int max = in.host.cores > 2 ? static_cast<int>(in.host.cores) - 1 : 8;
  std::vector<int> out;
  const int w = in.producers.workers;
  for (int k : {2, 4, 6, 8, 12, 16, 24, 32})
    if (k > w && k <= max) out.push_back(k);
  if (out.empty() || out.back() != max) {
    if (max > w) out.push_back(max);
  }
  return out;
}

}  // namespace

const char* ClassId(Class c) {
  switch (c) {
    case Class::kNone:
      return "none";
    case Class::kGpuBound:
      return "gpu_bound";
    case Class::kHostBound:
      return "host_bound";
    case Class::kInputStarvation:
      return "input_starvation";
    case Class::kMainProcess:
      return "main_process_bound";
    case Class::kPinThread:
      return "pin_thread_bound";
    case Class::kPageableStaging:
      return "pageable_staging";
    case Class::kFreshFaults:
      return "fresh_buffer_faults";
    case Class::kSyncCopies:
      return "sync_copies";
    case Class::kShmFailure:
      return "shm_failure";
    case Class::kPinnedOveruse:
      return "pinned_overuse";
    case Class::kHandover:
      return "batch_handover";
    case Class::kWorkerStartup:
      return "worker_startup";
    case Class::kCopyBound:
      return "copy_bound";
  }
  return "none";
}

const char* ClassName(Class c) {
  switch (c) {
    case Class::kNone:
      return "no step loop";
    case Class::kGpuBound:
      return "GPU-bound";
    case Class::kHostBound:
      return "host-bound (Python and kernel launches)";
    case Class::kInputStarvation:
      return "input starvation (the workers)";
    case Class::kMainProcess:
      return "main-process-bound (the main thread makes the batches)";
    case Class::kPinThread:
      return "pin-thread-bound";
    case Class::kPageableStaging:
      return "pageable staging";
    case Class::kFreshFaults:
      return "fresh-buffer page faults";
    case Class::kSyncCopies:
      return "synchronous copies";
    case Class::kShmFailure:
      return "/dev/shm failure";
    case Class::kPinnedOveruse:
      return "pinned memory over-use";
    case Class::kHandover:
      return "batch hand-over";
    case Class::kWorkerStartup:
      return "worker start-up every epoch";
    case Class::kCopyBound:
      return "host-to-device copy-bound (PCIe)";
  }
  return "";
}

Prediction Predict(const Inputs& in, const Calibration& cal, const Change& change) {
  const std::string& id = change.id;
  if (id.rfind("num_workers=", 0) == 0) {
    return Workers(in, cal, std::max(1, std::atoi(id.c_str() + 12)), change);
  }
  if (id == "PINSCOPE_PIN=1" || id == "PINSCOPE_PIN_BUDGET") return Pin(in, cal, change);
  if (id == "pin_memory=False") return PinMemoryOff(in, cal, false, change);
  if (id == "pin_memory=False+PINSCOPE_PIN=1") return PinMemoryOff(in, cal, true, change);
  if (id == "pin_memory=True") return PinMemoryOn(in, cal, change);
  if (id == "no_per_step_sync") return NoSync(in, cal, change);
  if (id == "persistent_workers=True") return PersistentWorkers(in, change);
  if (id == "batch_bytes_half") return HalfBytes(in, change);
  if (id.rfind("batch_size_x", 0) == 0) {
    return Batch(in, cal, std::max(1, std::atoi(id.c_str() + 12)), change);
  }
  Prediction p;
  p.change = change;
  p.step_ns = in.main.step_ns;
  p.basis = "not modeled";
  p.uncertain = true;
  return p;
}

Result Build(const Inputs& in, const Calibration& cal) {
  Result r;
  const Derived d = Derive(in);
  if (in.shm_failed) {
    r.valid = in.main.steps > 0;
    r.verdict = Class::kShmFailure;
    r.critical = "shm";
    r.verdict_text = "/dev/shm failure: the job's shared memory ran out";
    if (!r.valid) {
      r.why_not =
          "/dev/shm ran out before the loop took a step: there is no step to model, and "
          "the failure is the verdict";
    }
    return r;
  }
  if (in.main.steps < 3 || d.s <= 0) {
    r.why_not = "no step loop: fewer than 3 steps (DataLoader batches or batch copies) were seen";
    return r;
  }
  if (!in.main.usage_recorded) {
    r.why_not =
        "the trace has no CPU time per event (recorded by a shim before 0.2): the model "
        "cannot tell the main thread's work from its waits";
    return r;
  }
  r.valid = true;
  r.floor_ns = std::max(0.5 * kMs, 0.02 * d.s);
  Costs c{cal};

  // Stages and the main thread's parts.
  if (d.workers > 0) {
    r.stages.push_back({"producers",
                        d.workers == 1 ? std::string("1 DataLoader worker")
                                       : std::to_string(d.workers) + " DataLoader workers",
                        d.producers, d.producers / d.s});
  }
  if (d.pin_thread) r.stages.push_back({"pin_thread", "the pin-memory thread", d.pin, d.pin / d.s});
  r.stages.push_back(
      {"main", "the main thread (its loop, GPU waits included)", d.loop, d.loop / d.s});
  if (in.gpu.measured) r.stages.push_back({"gpu", "the GPU", d.gpu, d.gpu / d.s});
  const auto part = [&](const char* id, const char* name, double ns) {
    if (ns > 0) r.parts.push_back({id, name, ns});
  };
  part("wait_input", "waiting for the next batch", d.wait_input);
  part("make", "making the batch (num_workers=0)", d.make);
  part("handover", "waiting for a worker to hand the made batch over", d.handover);
  part("next", "taking the batch (DataLoader __next__)", d.next_own);
  part("copy", "copying the batch to the GPU", d.copy_xfer);
  part("gpu_wait", "waiting for the GPU (syncs, copies queued behind it)", d.gpu_wait);
  part("release", "releasing the previous batch (freeing its pages)", d.release);
  part("host", "Python and kernel launches", d.rest);

  // The pieces of the main thread's own work a change could remove.
  const double pinned =
      in.main.batch_pinned || in.main.batch_pinscope ? d.copy_xfer : c.Pinned(in.main.batch_bytes);
  const double staging =
      in.main.batch_pinned || in.main.batch_pinscope ? 0 : std::max(0.0, d.copy_xfer - pinned);
  const double faults = FreshFaultCost(in, c);

  // The verdict: what the main thread waits on, else its own biggest part.
  const double input_share = d.wait_input / d.s;
  const double gpu_share = d.gpu / d.s;
  const double copy_share = d.copy_device / d.s;
  const bool pinned_batch = in.main.batch_pinned || in.main.batch_pinscope;
  if (input_share >= 0.15) {
    if (d.pin_thread && d.pin >= d.producers) {
      r.verdict = Class::kPinThread;
      r.critical = "pin_thread";
      r.critical_share = d.pin / d.s;
    } else {
      r.verdict = Class::kInputStarvation;
      r.critical = "producers";
      r.critical_share = d.producers / d.s;
    }
  } else if (gpu_share >= 0.85) {
    r.verdict = Class::kGpuBound;
    r.critical = "gpu";
    r.critical_share = gpu_share;
  } else if (copy_share >= 0.85 && pinned_batch) {
    // A pinned batch whose DMA fills the step: the link is the limit.
    r.verdict = Class::kCopyBound;
    r.critical = "copy";
    r.critical_share = copy_share;
  } else {
    r.critical = "main";
    r.critical_share = d.loop / d.s;
    struct Candidate {
      Class cls;
      double ns;
    };
    // pinscope's own registrations on the main thread (PINSCOPE_PIN=1).
    const double pin_own = in.main.pin_register_ns + in.main.pin_unregister_ns;
    const bool over = in.pin_mode != 0 && (in.skipped_budget > 0 || in.pin_budget_full > 0);
    std::vector<Candidate> parts = {
        {Class::kMainProcess, std::max(0.0, d.make - faults)},
        {Class::kFreshFaults, faults + d.release},
        {over ? Class::kPinnedOveruse : Class::kPageableStaging, staging},
        {over ? Class::kPinnedOveruse : Class::kFreshFaults, pin_own},
        {Class::kSyncCopies, d.gpu_wait},
        {Class::kHostBound, d.rest + d.next_own},
        {Class::kHandover, d.handover},
    };
    // Parts of one class add up.
    for (size_t i = 0; i < parts.size(); ++i)
      for (size_t j = i + 1; j < parts.size(); ++j)
        if (parts[j].cls == parts[i].cls) parts[i].ns += parts[j].ns, parts[j].ns = 0;
    std::stable_sort(parts.begin(), parts.end(),
                     [](const Candidate& a, const Candidate& b) { return a.ns > b.ns; });
    r.verdict = parts.front().cls;
  }
  // Over whole epochs: workers started anew every epoch (not persistent)
  // cost the time from each epoch's iterator to its first batch beyond a
  // fetch. Where that costs more per step than the steady step's limiting
  // stage, it is what holds the run back.
  const LoaderFacts& lf = in.loader;
  double startup = 0;  // per step, over whole epochs
  if (d.workers > 0 && !lf.persistent_workers && lf.epochs >= 2 && lf.steps_per_epoch > 0)
    startup =
        std::max(0.0, lf.epoch_start_ns - d.worker_each) / static_cast<double>(lf.steps_per_epoch);
  if (startup > 0 && startup >= r.critical_share * d.s && r.verdict != Class::kGpuBound) {
    r.verdict = Class::kWorkerStartup;
    r.critical = "epoch_start";
    r.critical_share = startup / (d.s + startup);
  }

  // The changes worth re-timing for this run.
  std::vector<Change> changes;
  const LoaderFacts& l = in.loader;
  if (l.present) {
    for (int k : WorkerCounts(in)) {
      changes.push_back(SetChange("num_workers=" + std::to_string(k),
                                  "num_workers=" + std::to_string(k) + " in the DataLoader",
                                  {{"PINSCOPE_SET_NUM_WORKERS", std::to_string(k)}}));
    }
    if (d.workers > 0 && !l.persistent_workers && l.epochs >= 2 && l.epoch_start_ns > 0) {
      changes.push_back(SetChange("persistent_workers=True",
                                  "persistent_workers=True in the DataLoader",
                                  {{"PINSCOPE_SET_PERSISTENT_WORKERS", "1"}}));
    }
    if (d.pin_thread) {
      changes.push_back(SetChange("pin_memory=False+PINSCOPE_PIN=1",
                                  "pin_memory=False in the DataLoader and run under PINSCOPE_PIN=1",
                                  {{"PINSCOPE_SET_PIN_MEMORY", "0"}, {"PINSCOPE_PIN", "1"}}));
      changes.push_back(SetChange("pin_memory=False", "pin_memory=False in the DataLoader",
                                  {{"PINSCOPE_SET_PIN_MEMORY", "0"}}));
    } else if (d.workers > 0 && !in.main.batch_pinned && in.main.batch_bytes > 0) {
      changes.push_back(SetChange("pin_memory=True", "pin_memory=True in the DataLoader",
                                  {{"PINSCOPE_SET_PIN_MEMORY", "1"}}));
    }
  }
  if (!in.main.batch_pinned && in.main.batch_bytes > 0) {
    if (in.pin_mode == 0) {
      changes.push_back(SetChange("PINSCOPE_PIN=1",
                                  "run under PINSCOPE_PIN=1 (transparent pinning)",
                                  {{"PINSCOPE_PIN", "1"}}));
    } else if (in.skipped_budget > 0) {
      changes.push_back(SetChange("PINSCOPE_PIN_BUDGET",
                                  "raise PINSCOPE_PIN_BUDGET so every batch can stay pinned",
                                  {{"PINSCOPE_PIN", "1"}, {"PINSCOPE_PIN_BUDGET", "16G"}}));
    }
  }
  if (d.gpu_wait > 0.15 * d.s && gpu_share < 0.85) {
    changes.push_back(CodeChange("no_per_step_sync",
                                 "stop waiting for the GPU every step (read values back every N "
                                 "steps or after the loop; accumulate on the GPU)"));
  }
  // A pinned batch whose DMA takes much of the step: fewer bytes.
  if (pinned_batch && in.main.batch_bytes > 0 && copy_share >= 0.3) {
    changes.push_back(CodeChange("batch_bytes_half",
                                 "copy half the bytes per batch: send it in its source dtype "
                                 "(uint8 images, or bfloat16) and convert on the GPU"));
  }
  // A larger batch spreads the main thread's fixed per-step work (Python,
  // launches, waits) over more samples: worth it when that work dominates.
  if (gpu_share < 0.5 && input_share < 0.15 && d.rest + d.next_own + d.gpu_wait >= 0.5 * d.s) {
    changes.push_back(CodeChange("batch_size_x2", "a batch twice as large (batch_size x2)"));
  }
  for (const Change& ch : changes) r.predictions.push_back(Predict(in, cal, ch));
  r.all_predictions = r.predictions;
  // Most gain first; among equal gains, settings before code changes and
  // fewer workers before more.
  std::stable_sort(r.predictions.begin(), r.predictions.end(),
                   [](const Prediction& a, const Prediction& b) {
                     if (std::abs(a.speedup - b.speedup) > 0.02) return a.speedup > b.speedup;
                     return !a.change.code_change && b.change.code_change;
                   });
  // num_workers: the smallest count that leaves the workers out of the
  // critical path with room to spare (their supply at most 80% of the next
  // stage's time): with the two close, batches arriving in order from
  // round-robin workers queue behind the slowest, and the step is longer
  // than either stage. Without such a count, the one with the most gain.
  std::vector<Prediction> kept;
  const Prediction* pick = nullptr;
  for (const Prediction& p : r.predictions) {
    if (p.change.id.rfind("num_workers=", 0) != 0) continue;
    const int k = std::atoi(p.change.id.c_str() + 12);
    const double supply = d.workers > 0 ? d.worker_each / k : (d.make + 0.0) / k;
    const double other = p.step_ns;  // the step with k workers, their own time included
    // Workers the cores cannot run add no supply: no room then.
    const bool room = supply <= 0.8 * other && p.limit_next != "the CPU cores";
    if (room && (!pick || k < std::atoi(pick->change.id.c_str() + 12))) pick = &p;
  }
  if (!pick) {
    // The most gain; of counts within 1% of it, the fewest workers.
    for (const Prediction& p : r.predictions) {
      if (p.change.id.rfind("num_workers=", 0) != 0) continue;
      const int k = std::atoi(p.change.id.c_str() + 12);
      if (!pick || p.speedup > pick->speedup * 1.01 ||
          (p.speedup >= pick->speedup / 1.01 && k < std::atoi(pick->change.id.c_str() + 12)))
        pick = &p;
    }
  }
  // Recommended: what gains at least the floor per step (per sample's share
  // of a step, for a larger batch); a change whose gain is smaller is only
  // in all_predictions.
  for (const Prediction& p : r.predictions) {
    const bool gains = p.speedup > 0 && d.s * (1 - 1 / p.speedup) >= r.floor_ns;
    if (gains && (p.change.id.rfind("num_workers=", 0) != 0 || &p == pick)) kept.push_back(p);
  }
  r.predictions = std::move(kept);
  std::stable_sort(r.predictions.begin(), r.predictions.end(),
                   [](const Prediction& a, const Prediction& b) {
                     if (std::abs(a.speedup - b.speedup) > 0.02) return a.speedup > b.speedup;
                     return !a.change.code_change && b.change.code_change;
                   });
  // Workers that the cores cannot run: the CPU is the limit, and what helps
  // is less CPU work per batch, which the trace cannot time.
  if (r.critical == "producers") {
    const Prediction* workers = nullptr;
    for (const Prediction& p : r.predictions)
      if (p.change.id.rfind("num_workers=", 0) == 0) workers = &p;
    if (workers == nullptr || workers->limit_next == "the CPU cores") {
      r.advice.push_back(
          std::string(workers == nullptr ? "More workers cannot supply faster"
                                         : "Past that count, more workers cannot supply faster") +
          ": the workers and the main process need the " + std::to_string(in.host.cores) +
          " cores the job may use. What helps is less CPU per batch: decode and augment on the "
          "GPU (NVIDIA DALI; torchvision.io.decode_jpeg(device=\"cuda\") and transforms.v2 on "
          "GPU tensors), cheaper transforms, or samples cached decoded.");
    }
  }

  // The link: the batch's DMA against the pinned rate calibrated on this
  // machine (the seed's `nvidia-smi dmon` check, from the trace).
  if (r.verdict == Class::kCopyBound && d.copy_device > 0) {
    const double achieved = static_cast<double>(in.main.batch_bytes) / d.copy_device;  // GB/s
    const double calibrated = cal.PinnedGbps(true, in.main.batch_bytes);
    if (calibrated > 0 && achieved < 0.7 * calibrated) {
      char line[400];
      std::snprintf(line, sizeof line,
                    "The batch's DMA ran at %.1f GB/s, %.0f%% of the %.1f GB/s pinscope calibrate "
                    "measured for pinned copies of its size: the link may run below its "
                    "generation or width (the report's PCIe line; nvidia-smi -q -d PCIE), or "
                    "other traffic shares it (nvidia-smi dmon -s t).",
                    achieved, 100 * achieved / calibrated, calibrated);
      r.advice.push_back(line);
    }
  }

  // The verdict's sentence.
  const auto share = [&](double ns) { return Pct(ns / d.s); };
  std::string text = std::string(ClassName(r.verdict)) + ": ";
  switch (r.verdict) {
    case Class::kInputStarvation:
      text += "the main thread waits " + share(d.wait_input) + " of each " + Ms(d.s) +
              " step for the next batch; " +
              (d.workers == 1 ? std::string("its one worker makes one every ")
                              : "its " + std::to_string(d.workers) + " workers supply one every ") +
              Ms(d.producers) + (d.workers == 1 ? "" : " (" + Ms(d.worker_each) + " each)");
      break;
    case Class::kPinThread:
      text += "the main thread waits " + share(d.wait_input) + " of each " + Ms(d.s) +
              " step; the pin thread needs " + Ms(d.pin) + " per batch (" +
              Ms(in.pin_thread.pin_ns) + " in pin_memory), the workers supply one every " +
              Ms(d.producers);
      break;
    case Class::kGpuBound:
      text += "the GPU is busy " + share(d.gpu) + " of each " + Ms(d.s) +
              " step: the input pipeline is not what limits it";
      break;
    case Class::kMainProcess:
      text += "the main thread makes each batch itself, " + Ms(d.make) + " of each " + Ms(d.s) +
              " step";
      break;
    case Class::kFreshFaults:
      if (d.release > faults) {
        text += "every " + std::to_string(in.main.batch_bytes >> 20) +
                " MiB batch arrives in a fresh shm segment that the main thread faults in and "
                "frees: " +
                Ms(d.release) + " of each " + Ms(d.s) + " step freeing it";
      } else {
        text += "the main thread fills a fresh " + std::to_string(in.main.batch_bytes >> 20) +
                " MiB buffer every step; its page faults cost about " + Ms(faults) + " of each " +
                Ms(d.s) + " step";
      }
      break;
    case Class::kPageableStaging:
    case Class::kPinnedOveruse:
      text += "the batch copy from pageable memory takes " + Ms(d.copy_xfer) + " of each " +
              Ms(d.s) + " step on the main thread (" + Ms(pinned) + " pinned)";
      if (r.verdict == Class::kPinnedOveruse) text += "; the pinning budget was full";
      break;
    case Class::kSyncCopies:
      text += "the main thread waits for the GPU " + Ms(d.gpu_wait) + " of each " + Ms(d.s) +
              " step, and the GPU is busy only " + share(d.gpu) + ": the waits serialize them";
      break;
    case Class::kHostBound:
      text += "the main thread's own Python and launches take " + Ms(d.rest + d.next_own) +
              " of each " + Ms(d.s) + " step while the GPU is busy " + share(d.gpu);
      break;
    case Class::kCopyBound:
      text += "the pinned batch's copy to the GPU takes " + Ms(d.copy_device) + " of each " +
              Ms(d.s) + " step on the copy engine (" +
              Gbps(static_cast<double>(in.main.batch_bytes) / d.copy_device) + ")";
      break;
    case Class::kWorkerStartup:
      text += "each epoch forks its " + std::to_string(d.workers) + " workers anew and waits " +
              Ms(lf.epoch_start_ns) + " for its first batch: " + Ms(startup) +
              " a step over an epoch of " + std::to_string(lf.steps_per_epoch) +
              " steps, more than the steady step itself takes at its limit (" + Ms(d.s) + ")";
      break;
    case Class::kHandover:
      text += "the main thread waits " + Ms(d.handover) + " of each " + Ms(d.s) +
              " step for an idle worker to hand over a batch it has already made (unpickling "
              "asks the worker's process for the batch's memory, which answers once it gets a "
              "core and its GIL)";
      break;
    default:
      break;
  }
  r.verdict_text = text;
  return r;
}

}  // namespace pinscope::model
