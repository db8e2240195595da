// The changes, each re-timed on the pipeline; see pipeline_changes.h and
// docs/pipeline-model.md ("What each change moves").
#include "analyzer/model/pipeline_changes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "analyzer/model/pipeline_terms.h"

namespace pinscope::model {
namespace detail {
namespace {

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
    demand += in.main.make_cpu_ns + fresh;
    basis = "a worker makes a batch in " + Ms(each) + " (the main thread's " + Ms(d.make) +
            (fresh > 0 ? " plus " + Ms(fresh) + " of page faults on its fresh shm segment" : "") +
            "): " + std::to_string(k) + " workers supply one every " + Ms(t.producers);
    if (in.main.pin_ns > 0) {
      // pin_memory=True: with workers DataLoader pins on its pin thread,
      // which takes each batch from shared memory, copies it into pinned
      // memory (the main thread's pin_memory() today, plus reading the
      // mapping in) and frees it; the main thread takes the pinned batch
      // from that thread's queue.
      t.pin = receive + in.main.pin_ns;
      t.loop = std::max(0.0, d.loop - d.make - in.main.pin_ns);
      basis += "; the pin thread takes each batch in " + Ms(t.pin) + " (" + Ms(in.main.pin_ns) +
               " of pin_memory() as the main thread measured it, " + Ms(receive) +
               " to take it from shared memory, fault it in and free it); the main thread's "
               "loop drops to " +
               Ms(t.loop) + " (its batch making and pinning out)";
    } else {
      t.loop = std::max(0.0, d.loop - d.make + receive);
      basis += "; the main thread's loop drops to " + Ms(t.loop) + " (its batch making out; " +
               Ms(receive) + " to take each batch from shared memory, fault it in and free it)";
    }
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
// batch grows k times, and so do the workers', the pin thread's and the
// GPU's per-step work (the GPU's an upper bound: small kernels do not slow
// down with size). Where the main thread waits for the GPU each step (a
// sync, or a copy queued behind the stream), it waits for what the device
// has left to do: the device's added work (k-1 times its kernels and the
// batch's DMA) first fills the GPU's idle time in the step (at most: some of
// it comes before the step's first launch) and the rest lengthens the wait.
// A host-bound loop's GPU absorbs it; a copy-bound one's cannot.
Prediction Batch(const Inputs& in, const Calibration& cal, int k, const Change& change) {
  (void)cal;
  const Derived d = Derive(in);
  Timing t = Today(d);
  const double prop = d.copy_xfer + d.make;
  const double device = d.copy_device + d.gpu;
  const double fixed = std::max(0.0, d.loop - prop - d.gpu_wait);
  const double idle = std::max(0.0, d.loop - device);
  const double wait = d.gpu_wait > 0 ? d.gpu_wait + std::max(0.0, (k - 1) * device - idle) : 0;
  t.loop = fixed + k * prop + wait;
  t.producers = d.producers * k;
  t.pin = d.pin * k;
  t.gpu = d.gpu * k;
  t.copy_engine = d.copy_device * k;
  t.cpu_floor = CoresFloor(in, d.cpu_demand * k);
  std::string basis = "per step the main thread's " + Ms(fixed) +
                      " of Python and launches stays, the batch's handling (" + Ms(prop) +
                      "), the GPU's " + Ms(d.gpu) + " and the batch's DMA (" + Ms(d.copy_device) +
                      ") grow " + std::to_string(k) + "x";
  if (d.gpu_wait > 0)
    basis += ", and the main thread's wait for the GPU with them (" + Ms(d.gpu_wait) + " to " +
             Ms(wait) + ")";
  Prediction p = Finish(in, d, change, t, basis, true);
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
  p.basis = std::string(l.remade ? "each epoch makes a new DataLoader, which starts its "
                                 : "each epoch starts its ") +
            std::to_string(d.workers) + " workers anew: " + Ms(l.epoch_start_ns) +
            " from the epoch's iterator to its first batch, of which " + Ms(saved) +
            " beyond a worker's fetch (" + Ms(d.worker_each) +
            "); started once, over an epoch of " + std::to_string(l.steps_per_epoch) +
            " steps that is " + Ms(saved / n) + " a step (the step counted over whole epochs)";
  p.uncertain = false;
  return p;
}

}  // namespace

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

}  // namespace detail

using namespace detail;  // NOLINT: the terms, within this file

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
  if (id == "persistent_workers=True" || id == "made_once+persistent_workers=True")
    return PersistentWorkers(in, change);
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

}  // namespace pinscope::model
