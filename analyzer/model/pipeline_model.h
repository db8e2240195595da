// The training step as a pipeline of stages (issue 13, docs/pipeline-model.md):
// producers (DataLoader workers, or the main thread making batches itself),
// the pin thread, the main thread's own work (batch handling, copies, Python
// and kernel launches), the GPU; each with its measured service time per
// step. The stage the step waits on is the verdict; a recommendation's gain
// is the model re-timed with that change, never a rule's own guess.
//
// Pure: plain structs in (what analyses/pipeline_analysis.h measured and the
// calibration), results out; no I/O, no protobuf. Times are ns per step
// unless a name says otherwise.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analyzer/read/calibration.h"

namespace pinscope::model {

// The DataLoader as the Python hook saw it (LOADER_ITER), else inferred.
struct LoaderFacts {
  bool hooked = false;   // settings read from the job (LOADER_ITER)
  bool present = false;  // a DataLoader feeds the loop (hooked or inferred from workers' shm)
  int num_workers = 0;
  bool pin_memory = false;
  int prefetch_factor = 0;
  bool persistent_workers = false;
  int batch_size = 0;   // 0 unknown
  uint64_t epochs = 0;  // LOADER_ITER events of the loader
  // Its epochs were new DataLoader objects, made at one site with the same
  // settings (a loop that builds its DataLoader every epoch):
  // persistent_workers=True alone keeps nothing; the DataLoader has to be
  // made once.
  bool remade = false;
  std::string site;  // "train.py:42"
  // The job's own line that led to the construction when a library built
  // the DataLoader ("" when that is the site), and the framework that did
  // ("transformers", "lightning", "accelerate", ""): where the report says
  // to change a setting (analyzer/report/loader_knobs.h).
  std::string user_site;
  std::string framework;
  // An epoch's start: from its iterator (LOADER_ITER) to its first batch on
  // the step thread, a mean over the epochs (after the first, when there
  // are three or more: the first also starts the job). With workers that are
  // not persistent, it forks and starts them anew.
  double epoch_start_ns = 0;
  uint64_t steps_per_epoch = 0;   // __next__ spans of the loader / epochs
  uint64_t epochs_in_window = 0;  // epoch starts inside the steady window
  // The step over whole epochs, their starts included: from the second
  // epoch's iterator to the last batch, per batch (0 with one epoch).
  double epoch_step_ns = 0;
};

// The main thread's step, means over the steady window.
struct MainStep {
  uint64_t steps = 0;  // steps in the window
  double step_ns = 0;  // window / steps
  // In DataLoader.__next__ (hook): its wall and CPU time. With workers the
  // off-CPU part is the wait for the next batch; with num_workers=0 the
  // batch is made inside it (make_*).
  double next_ns = 0, next_cpu_ns = 0;
  // Inside __next__, receiving batches from the workers' result queue
  // (LOADER_RECV: unpickling, which maps the batch's shared memory and asks
  // the worker's process for its descriptors): wall and CPU. Its off-CPU
  // part is a hand-over wait on a batch already made, not an empty queue.
  double recv_ns = 0, recv_cpu_ns = 0;
  // Of that off-CPU part, the receiving of batches whose worker was making
  // another one when asked: its process answers for the descriptors when
  // that fetch lets go of the GIL, often at its end. That is a wait for the
  // worker (the supply), not the main thread's own hand-over.
  double recv_busy_off_ns = 0;
  bool recv_seen = false;  // the hook timed receiving (a hook from before it did not)
  double make_ns = 0, make_cpu_ns = 0, make_sys_ns = 0, make_faults = 0;
  // With num_workers=0 and pin_memory=True: pin_memory() on this thread,
  // inside __next__ after the batch is made (its CPU is in next_cpu_ns).
  // With workers it is the pin thread's.
  double pin_ns = 0, pin_cpu_ns = 0;
  // The batch's H2D copies: blocked time, of which waiting for the stream
  // (device start - host entry, joined copies), and their device time.
  double copy_ns = 0, copy_cpu_ns = 0, copy_faults = 0, copy_wait_ns = 0, copy_device_ns = 0;
  uint64_t batch_bytes = 0;     // per step
  bool batch_pinned = false;    // from memory the program pinned (pin_memory=True)
  bool batch_pinscope = false;  // pinned by pinscope (PINSCOPE_PIN=1)
  bool batch_shm = false;       // read from a worker's shm mapping
  bool batch_fresh_alloc =
      false;  // from a buffer allocated anew each step (malloc >= mmap threshold)
  // Other copies (D2H results, small H2D) and synchronize calls: waits for the GPU.
  double other_copy_ns = 0, sync_ns = 0;
  // The thread's CPU time per step, all of it (spinning waits included).
  double cpu_ns = 0;
  // CPU from __next__'s return to the step's first CUDA call: releasing the
  // previous batch (a worker's shm segment: freeing its pages) and the
  // Python before the copy.
  double release_ns = 0;
  // pinscope's own work on this thread under PINSCOPE_PIN=1: unregistering
  // freed batch mappings, waiting for a registration (PinEvents).
  double pin_unregister_ns = 0, pin_register_ns = 0;
  bool timed_by_hook = false;  // steps are DataLoader.__next__ calls, not inferred from copies
  // The DataLoader is iterated on a thread apart from the one that makes
  // the CUDA calls (a prefetching wrapper): the steps are the batch copies.
  bool loader_thread_apart = false;
  // No hook, and the largest H2D copies came in a burst that ended long
  // before the thread's copies and syncs did (a model's weights at start-up,
  // then a loop of smaller copies): they are not the loop's batches, and no
  // step is inferred from them.
  bool largest_copies_burst = false;
  // The trace has the threads' CPU time at its events (ThreadUsage): a
  // trace from an older shim does not, and then the model cannot tell work
  // from waiting.
  bool usage_recorded = false;
};

// DataLoader workers making batches.
struct Producers {
  int workers = 0;       // concurrent worker processes
  uint64_t batches = 0;  // FETCH spans in the window
  double fetch_ns = 0;   // wall per batch, one worker (dataset + collate)
  double fetch_cpu_ns = 0;
  double fetch_faults = 0;
  // A worker's whole cycle per batch when it is busy (fetch + handing the
  // batch over): the median interval between its consecutive fetches.
  double cycle_ns = 0;
  bool timed_by_hook = false;
};

// DataLoader's pin-memory thread (pin_memory=True with workers).
struct PinThread {
  bool present = false;
  uint64_t batches = 0;
  double pin_ns = 0, pin_cpu_ns = 0, pin_faults = 0;  // inside pin_memory()
  double cycle_cpu_ns = 0;                            // the thread's CPU per batch, all of its work
  double recv_wait_ns = 0;  // per batch, off-CPU receiving it from a worker (LOADER_RECV)
  double cycle_ns = 0;      // median interval between its batches
  // Pinned blocks it allocated (cudaHostAlloc) and kept, over the run:
  // start-up, not in pin_ns or the cycle.
  double one_time_alloc_ns = 0;
  uint64_t one_time_allocs = 0;
};

struct Gpu {
  bool measured = false;  // kernels recorded in part of the window
  double busy_ns = 0;     // per step, over the recorded part of the window
  double covered = 1;     // share of the window with kernels recorded
};

struct Host {
  uint32_t cores = 0;         // min(affinity, cgroup quota), 0 unknown
  double other_cpu_ns = 0;    // CPU per step of the root's other threads (not main, not pin)
  double runqueue_share = 0;  // time runnable but waiting for a CPU, over the workers' time
};

struct Inputs {
  LoaderFacts loader;
  MainStep main;
  Producers producers;
  PinThread pin_thread;
  Gpu gpu;
  Host host;
  uint32_t pin_mode = 0;  // PINSCOPE_PIN of the run (0 off)
  uint64_t pin_budget = 0;
  uint64_t pin_budget_full = 0;  // BUDGET_FULL events
  uint64_t skipped_budget = 0;   // copies that went pageable for the budget
  bool shm_failed = false;       // SIGBUS / ENOSPC in /dev/shm
  // The job loaded a CUDA runtime or made a copy. A job on the CPU alone
  // (its loop tested without a GPU) is judged as a pipeline all the same,
  // but its main thread's work is the computation itself, not Python and
  // launches.
  bool gpu_used = true;
  uint64_t shm_capacity = 0, shm_peak = 0;
};

// One stage with its service time per step and its share of the step.
struct Stage {
  std::string id;    // "producers", "pin_thread", "main", "gpu"
  std::string name;  // for a person
  double service_ns = 0;
  double utilization = 0;  // service / step
};

// What the main thread's step is made of, for the report's drawing.
struct Part {
  std::string
      id;  // "wait_input", "handover", "make", "next", "copy", "gpu_wait", "release", "host"
  std::string name;
  double ns = 0;
};

// The classes the verdict tells apart.
enum class Class {
  kNone,  // nothing to say (no step loop)
  kGpuBound,
  kHostBound,        // main-thread Python/launch work while the GPU idles
  kInputStarvation,  // workers
  kMainProcess,      // num_workers=0: the main thread makes the batches
  kPinThread,
  kPageableStaging,
  kFreshFaults,
  kSyncCopies,
  kShmFailure,
  kPinnedOveruse,
  kHandover,       // the main thread waits for workers to hand made batches over
  kWorkerStartup,  // every epoch forks and starts its workers anew
  kCopyBound,      // the pinned batch's DMA (PCIe) is the step
};
const char* ClassId(Class c);    // "gpu_bound", "host_bound", ...
const char* ClassName(Class c);  // "GPU-bound", ...

// One change, applied to the model.
struct Change {
  std::string id;    // "num_workers=8", "pin_memory=False+PINSCOPE_PIN=1", ...
  std::string what;  // the knob for a person: "num_workers=8 in the DataLoader"
  // Machine-applicable where it is a loader setting or pinscope's own
  // (pinscope tune, tools/validate_predictions.py): PINSCOPE_SET_* / env.
  std::vector<std::pair<std::string, std::string>> env;
  bool code_change = false;  // needs the user's code (batch size, syncs, dtype)
};

struct Prediction {
  Change change;
  double step_ns = 0;      // predicted step time
  double speedup = 1;      // today's step / predicted
  std::string limit_next;  // the stage that would limit then
  std::string basis;       // how it was re-timed, with the numbers
  bool uncertain = false;  // a term of it is assumed, not measured
};

struct Result {
  bool valid = false;   // a step loop was found
  std::string why_not;  // when not valid
  Class verdict = Class::kNone;
  std::string critical;       // stage id the step waits on
  double critical_share = 0;  // that stage's share of the step
  std::string verdict_text;
  std::vector<Stage> stages;
  std::vector<Part> parts;              // the main thread's step
  std::vector<Prediction> predictions;  // most gain first, one worker count
  // Every change re-timed, each worker count too (pinscope tune, checks).
  std::vector<Prediction> all_predictions;
  // Advice the model cannot time (what moves work off saturated cores).
  std::vector<std::string> advice;
  // Savings below this floor are not worth a warning: max(0.5 ms, 2% of the step).
  double floor_ns = 0;
};

Result Build(const Inputs& in, const Calibration& calibration);

// The model's step time for inputs changed by `change` (exposed for tests
// and for pinscope tune's choice of trials).
Prediction Predict(const Inputs& in, const Calibration& calibration, const Change& change);

}  // namespace pinscope::model
