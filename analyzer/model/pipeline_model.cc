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
#include <cstdlib>

#include "analyzer/model/pipeline_changes.h"
#include "analyzer/model/pipeline_terms.h"

namespace pinscope::model {

using namespace detail;  // NOLINT: the terms, within this file

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
    // Why no loop was found, where the trace can tell.
    r.why_not =
        in.main.loader_thread_apart
            ? "the DataLoader is iterated on a thread apart from the one that makes the CUDA "
              "calls (a prefetching wrapper), and no recurring batch copy marks the training "
              "steps: pinscope cannot tie the batches to the steps"
        : in.main.largest_copies_burst
            ? "no DataLoader was seen, and the job's largest host-to-device copies came in a "
              "burst long before its other copies and syncs ended (a model's weights moved at "
              "start-up): they are not its steps, and its loop's copies are too small to mark "
              "them (under 1 MiB)"
            : "no step loop: fewer than 3 steps (DataLoader batches or batch copies) were seen";
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
  const double stream = Today(d).Stream();  // kernels and the batch's copy (Timing)
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
  } else if (stream >= 0.85 * d.s && d.gpu >= d.copy_device) {
    // The stream the kernels and the batch's copy share (Timing) is busy
    // nearly all the step, mostly with kernels: the GPU is the limit. A
    // per-step sync then only adds the main thread's own time to it.
    r.verdict = Class::kGpuBound;
    r.critical = "gpu";
    r.critical_share = stream / d.s;
  } else if (stream >= 0.85 * d.s && pinned_batch) {
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
      // A DataLoader made anew every epoch keeps no workers whatever it is
      // told: it has to be made once (a code change; pinscope cannot set it).
      changes.push_back(
          l.remade
              ? CodeChange("made_once+persistent_workers=True",
                           "the DataLoader made once, before the epochs (each epoch makes a "
                           "new one today), with persistent_workers=True")
              : SetChange("persistent_workers=True", "persistent_workers=True in the DataLoader",
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
  // launches) over more samples: worth it when that work dominates. Its
  // waits for the GPU count here; the prediction grows them with the
  // device's work where the GPU's idle time cannot absorb it.
  // Timed only with the GPU's kernels recorded: without them the device's
  // share of the larger step is unknown, and a job with no GPU computes on
  // the main thread, whose work then grows with the batch.
  if (gpu_share < 0.5 && input_share < 0.15 && d.rest + d.next_own + d.gpu_wait >= 0.5 * d.s) {
    if (in.gpu.measured) {
      changes.push_back(CodeChange("batch_size_x2", "a batch twice as large (batch_size x2)"));
    } else if (in.gpu_used) {
      r.advice.push_back(
          "A larger batch would spread the main thread's per-step work over more samples; "
          "pinscope cannot time it without the GPU's kernels, which this run did not record "
          "(PINSCOPE_CUPTI, docs/environment.md).");
    }
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
      text += "the GPU is busy " + share(d.gpu) + " of each " + Ms(d.s) + " step" +
              (d.copy_device >= 0.01 * d.s
                   ? " and the batch's copy on its stream " + share(d.copy_device)
                   : std::string()) +
              ": the input pipeline is not what limits it";
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
              " step" +
              (in.gpu.measured
                   ? ", and the GPU is busy only " + share(d.gpu) + ": the waits serialize them"
                   : " (the GPU's kernels were not recorded)");
      break;
    case Class::kHostBound:
      text += "the main thread's own Python and launches take " + Ms(d.rest + d.next_own) +
              " of each " + Ms(d.s) + " step" +
              (!in.gpu_used      ? " (the job used no GPU: this is its computation on the CPU)"
               : in.gpu.measured ? " while the GPU is busy " + share(d.gpu)
                                 : " (the GPU's kernels were not recorded)");
      break;
    case Class::kCopyBound:
      text += "the pinned batch's copy to the GPU takes " + Ms(d.copy_device) + " of each " +
              Ms(d.s) + " step on the copy engine (" +
              Gbps(static_cast<double>(in.main.batch_bytes) / d.copy_device) + ")";
      break;
    case Class::kWorkerStartup:
      text += std::string(lf.remade ? "each epoch makes a new DataLoader, which forks its "
                                    : "each epoch forks its ") +
              std::to_string(d.workers) + " workers anew and waits " + Ms(lf.epoch_start_ns) +
              " for its first batch: " + Ms(startup) + " a step over an epoch of " +
              std::to_string(lf.steps_per_epoch) +
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
