// The pipeline model's terms, internal to analyzer/model: what a measured
// step is made of (Derived), the stages' times (Timing), the costs a change
// introduces (Costs, from the calibration) and how a re-timed pipeline
// becomes a prediction (Finish). pipeline_model.cc builds the verdict from
// them; pipeline_changes.cc re-times each change.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "analyzer/model/pipeline_model.h"

namespace pinscope::model::detail {

constexpr double kMs = 1e6;

std::string Ms(double ns);              // "12.3 ms"
std::string Pct(double share);          // "42%"
std::string Gbps(double bytes_per_ns);  // "27.5 GB/s"

// ns to move `bytes` at `gbps` (1e9 bytes/s); 0 when the rate is unknown.
inline double At(uint64_t bytes, double gbps) {
  return gbps > 0 ? static_cast<double>(bytes) / gbps : 0;
}

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

Derived Derive(const Inputs& in);

// The pipeline's step for given stage times.
//
// The GPU's kernels and the batch's DMA are one stage, not two: PyTorch
// copies a batch (`.to("cuda")`, pinned and non_blocking or not) on the
// current stream, the one its kernels run on, so the copy of the next batch
// waits for this step's kernels and the next step's kernels for the copy.
// The stream's work per step is their sum - unless the run shows them
// overlapping (their sum longer than the measured step: a job that copies on
// a stream of its own, a prefetcher), then the longer of the two.
struct Timing {
  double producers = 0, pin = 0, loop = 0, gpu = 0, cpu_floor = 0, extra = 0;
  double copy_engine = 0;      // the batch's DMA, on the kernels' stream
  bool copy_overlaps = false;  // the DMA runs beside the kernels (Today says)
  const char* extra_name = "";
  double Stream() const { return copy_overlaps ? std::max(gpu, copy_engine) : gpu + copy_engine; }
  double Step() const { return std::max({producers, pin, loop, Stream(), cpu_floor, extra}); }
  std::string Limit() const {
    const double s = Step();
    if (s <= 0) return "";
    if (loop >= s) return "the main thread";
    if (producers >= s) return "the workers";
    if (pin >= s) return "the pin thread";
    if (Stream() >= s) return gpu >= copy_engine ? "the GPU" : "the host-to-device copy (PCIe)";
    if (cpu_floor >= s) return "the CPU cores";
    return extra_name;
  }
};

Timing Today(const Derived& d);

double CoresFloor(const Inputs& in, double cpu_demand);

// The page-fault cost of the main thread's fresh batch buffers: the faults
// its batch making took, at the calibrated cost of one (first touch of fresh
// anonymous memory, per 4 KiB page), bounded by the making's CPU time.
// Fresh pages show as faults: a buffer glibc hands out again from its heap
// is new to the program but not to the kernel, and costs none.
double FreshFaultCost(const Inputs& in, const Costs& c);

// The prediction for a change from its re-timed stages: the stage that
// limits today keeps the measured step's ratio to its own time.
Prediction Finish(const Inputs& in, const Derived& d, Change change, Timing t, std::string basis,
                  bool uncertain);

}  // namespace pinscope::model::detail
