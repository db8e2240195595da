// The ranks of a distributed job: one report per rank, then the job over
// them (the straggler, its reason and the gain of fixing it); see
// job_ranks.h and docs/report.md, "Ranks".
#include "analyzer/report/job_ranks.h"

#include <algorithm>
#include <cmath>
#include <ostream>

#include "analyzer/analyses/rank_analysis.h"
#include "analyzer/common/format.h"
#include "analyzer/replay/replay.h"
#include "analyzer/report/report.h"
#include "analyzer/symbols/run_symbols.h"

namespace pinscope {

namespace {

std::string Ms(double ns) { return FormatDuration(static_cast<uint64_t>(std::max(ns, 0.0))); }

// The part of a rank's step its input costs its main thread: waiting for
// the next batch (an empty queue, a hand-over) or making it (no workers).
double InputNs(const model::Result& m) {
  double ns = 0;
  for (const model::Part& part : m.parts)
    if (part.id == "wait_input" || part.id == "handover" || part.id == "make") ns += part.ns;
  return ns;
}

// The main thread's off-CPU time per step outside every wait pinscope
// records (the next batch, copies, synchronize calls): with gloo, the
// collectives' waits (the gradients' all-reduce blocks the thread that runs
// backward); also the GIL, sleeps and I/O. A wait that spins counts as CPU.
double HostOffCpuNs(const model::MainStep& main) {
  const double wall =
      main.step_ns - main.next_ns - main.copy_ns - main.other_copy_ns - main.sync_ns;
  const double cpu = main.cpu_ns - main.next_cpu_ns - main.copy_cpu_ns;
  return std::clamp(wall - cpu, 0.0, std::max(wall, 0.0));
}

const char* ReasonOf(model::Class c) {
  switch (c) {
    case model::Class::kInputStarvation:
    case model::Class::kMainProcess:
    case model::Class::kHandover:
    case model::Class::kWorkerStartup:
    case model::Class::kShmFailure:
      return "input";
    case model::Class::kGpuBound:
      return "gpu";
    case model::Class::kHostBound:
    case model::Class::kNone:
      return "host";
    default:
      return "copies";
  }
}

std::string RankName(const RankSummary& r) { return "rank " + std::to_string(r.rank); }

// One rank's files replayed alone: its report, and what RankAnalysis saw.
void ReplayRank(RunListing listing, const Calibration& calibration, const ReportOptions& options,
                RankSummary* r, bool* nccl_seen, std::ostream& err) {
  const std::string run_dir = listing.run_dir;
  auto report = std::make_unique<Report>(calibration, options);
  std::string names_warning;
  std::unique_ptr<NativeNames> names = OpenRunNames(run_dir, options.symbols, &names_warning);
  (void)names_warning;  // the whole run's report said it once
  ReplayOptions replay;
  replay.names = names.get();
  RankAnalysis ranks;
  ReplayEngine engine(std::move(listing), replay);
  report->Attach(&engine);
  engine.AddAnalysis(&ranks);
  engine.Run();
  report->Evaluate(engine.info());
  (void)err;

  const model::Result& m = report->model();
  const model::Inputs& in = report->model_inputs();
  r->device = ranks.device();
  for (const ProcessSummary& p : report->processes()) r->pids.push_back(p.pid);
  r->valid = m.valid && in.main.step_ns > 0;
  r->steps = in.main.steps;
  r->step_ns = in.main.step_ns;
  r->input_ns = InputNs(m);
  r->workers = in.producers.workers;
  r->worker_core_share =
      in.producers.cycle_ns > 0 ? in.producers.fetch_cpu_ns / in.producers.cycle_ns : 0;
  r->main_core_share = in.main.step_ns > 0 ? in.main.cpu_ns / in.main.step_ns : 0;
  r->shm_peak = report->shm().peak_bytes();
  r->verdict_id = report->verdict().id;
  r->verdict_text = report->verdict().text;
  if (ranks.nccl_kernels() > 0 && r->steps > 0) {
    *nccl_seen = true;
    r->collective_source = "nccl_kernels";
    r->collective_ns = static_cast<double>(ranks.NcclBusyIn(report->pipeline().window_start_ns(),
                                                            report->pipeline().window_end_ns())) /
                       static_cast<double>(r->steps);
  } else {
    r->collective_source = "host_off_cpu";
    r->collective_ns = r->valid ? HostOffCpuNs(in.main) : 0;
  }
  r->report = std::move(report);
}

}  // namespace

std::map<int, RunListing> SplitByRank(const RunListing& listing) {
  std::map<int, RunListing> by_rank;
  for (const RunFile& file : listing.files) {
    if (!file.header.has_rank()) continue;
    RunListing& sub = by_rank[static_cast<int>(file.header.rank().rank())];
    sub.run_dir = listing.run_dir;
    sub.run_id = listing.run_id;
    sub.files.push_back(file);  // in the listing's order: the rank's main process first
    ++sub.trace_files_found;
  }
  return by_rank;
}

std::unique_ptr<JobRanks> BuildJobRanks(std::map<int, RunListing> by_rank,
                                        const Calibration& calibration,
                                        const ReportOptions& options, const Report& whole,
                                        std::ostream& err) {
  auto job = std::make_unique<JobRanks>();
  bool nccl = false;
  for (auto& [rank, listing] : by_rank) {
    RankSummary r;
    const trace::RankLabel& label = listing.files.front().header.rank();
    r.rank = rank;
    r.local_rank = label.local_rank();
    r.world_size = label.world_size();
    r.group_rank = label.group_rank();
    ReplayRank(std::move(listing), calibration, options, &r, &nccl, err);
    job->ranks.push_back(std::move(r));
  }
  std::vector<RankSummary*> valid;
  for (RankSummary& r : job->ranks) {
    if (!r.valid) continue;
    if (nccl && r.collective_source != "nccl_kernels") {  // no NCCL kernel on its GPU
      r.collective_source = "nccl_kernels";
      r.collective_ns = 0;
    }
    valid.push_back(&r);
  }
  double least = 0;
  for (size_t i = 0; i < valid.size(); ++i)
    least = i == 0 ? valid[i]->collective_ns : std::min(least, valid[i]->collective_ns);
  for (RankSummary* r : valid) {
    r->collective_wait_ns = r->collective_ns - least;
    r->own_step_ns = r->step_ns - r->collective_wait_ns;
    job->job_step_ns = std::max(job->job_step_ns, r->step_ns);
  }

  // Shared by every rank: the host's cores and its /dev/shm.
  job->cores = whole.AvailableCores();
  const size_t local = job->ranks.size();
  job->cores_per_rank = local > 0 ? static_cast<double>(job->cores) / local : 0;
  double worker_share = 0, main_share = 0;
  for (const RankSummary& r : job->ranks) {
    job->workers += r.workers;
    worker_share = std::max(worker_share, r.worker_core_share);
    main_share = std::max(main_share, r.main_core_share);
  }
  if (job->cores > 0 && worker_share >= 0.05) {
    job->worker_budget = static_cast<int>(
        std::floor(std::max(job->cores_per_rank - main_share, 0.0) / worker_share));
  }
  job->shm_peak = whole.shm().peak_bytes();
  job->shm_capacity = whole.shm().capacity_bytes();

  // The straggler: the rank whose own step (its step less its wait for the
  // others) stands out above the next one's.
  std::vector<RankSummary*> order = valid;
  std::stable_sort(order.begin(), order.end(), [](const RankSummary* a, const RankSummary* b) {
    return a->own_step_ns > b->own_step_ns;
  });
  const auto index_of = [&](const RankSummary* r) {
    return static_cast<int>(r - job->ranks.data());
  };
  const double margin = std::max(0.5e6, 0.05 * job->job_step_ns);
  if (order.size() >= 2 && order[0]->own_step_ns - order[1]->own_step_ns >= margin) {
    RankSummary& s = *order[0];
    const RankSummary& next = *order[1];
    job->straggler = index_of(&s);
    job->next_slowest = index_of(&next);
    const model::Result& m = s.report->model();
    const model::Inputs& in = s.report->model_inputs();
    job->reason = ReasonOf(m.verdict);
    std::string why;
    if (in.producers.workers > 0) {
      why = "its " + std::to_string(in.producers.workers) + " DataLoader worker" +
            (in.producers.workers == 1 ? " makes" : "s make") + " a batch in " +
            Ms(in.producers.fetch_ns) + " each (" + Ms(in.producers.fetch_cpu_ns) +
            " of it on a core)";
    } else if (in.loader.present) {
      why = "its main thread makes each batch itself (num_workers=0)";
    }
    if (!why.empty()) why += "; ";
    why += "its main thread waits " + Ms(s.input_ns) + " of its " + Ms(s.step_ns) +
           " step for input while " + RankName(next) + " waits " + Ms(next.collective_wait_ns) +
           " a step for it in collectives";
    why += "; /dev/shm: its workers' peak " + FormatBytes(s.shm_peak);
    if (job->cores > 0) {
      why += "; cores: " + std::to_string(job->cores) + " for " + std::to_string(local) +
             " ranks (" + StringPrintf("%.1f", job->cores_per_rank) + " each)";
    }
    job->why = why;
    for (const model::Prediction& p : m.predictions) {
      if (p.step_ns < s.step_ns - m.floor_ns) {
        job->fix = p.change.what;
        job->fixed_step_ns = p.step_ns;
        break;
      }
    }
    const double bound = job->fixed_step_ns > 0 ? job->fixed_step_ns : next.own_step_ns;
    job->fixed_job_step_ns = std::max(next.own_step_ns, bound);
    job->gain_ns = std::max(job->job_step_ns - job->fixed_job_step_ns, 0.0);
  }

  // Each rank's verdict: a rank that waits on the straggler more than it
  // waits for its own input is told so; the rest keep their model's.
  for (RankSummary& r : job->ranks) {
    if (!r.valid || index_of(&r) == job->straggler) continue;
    const double floor = std::max(0.5e6, 0.02 * r.step_ns);
    if (r.collective_wait_ns >= floor && r.collective_wait_ns >= r.input_ns) {
      const std::string on = job->straggler >= 0
                                 ? RankName(job->ranks[job->straggler]) + " (the straggler)"
                                 : std::string("the other ranks");
      r.verdict_id = "waits_on_rank";
      r.verdict_text = "waits on " + on + ": " + Ms(r.collective_wait_ns) + " (" +
                       FormatPercent(r.collective_wait_ns / r.step_ns) + ") of each " +
                       Ms(r.step_ns) + " step in collectives; its own input wait is " +
                       Ms(r.input_ns);
    }
  }

  if (job->straggler >= 0) {
    const RankSummary& s = job->ranks[job->straggler];
    const RankSummary& next = job->ranks[job->next_slowest];
    job->verdict_id = "straggler";
    job->warn = true;
    job->verdict_text = RankName(s) + " holds the job back (" + job->reason +
                        "): " + s.verdict_text + ". The job's step is " + Ms(job->job_step_ns) +
                        "; " + (job->fix.empty() ? "bringing it to" : job->fix + " on it gives") +
                        " a " + Ms(job->fixed_job_step_ns) + " job step (the next slowest, " +
                        RankName(next) + ", takes " + Ms(next.own_step_ns) + " of its own)";
  } else if (valid.empty()) {
    job->verdict_id = "ranks_unknown";
    job->verdict_text = std::to_string(job->ranks.size()) +
                        (job->ranks.size() == 1 ? " rank" : " ranks") +
                        " traced; no rank's step loop was found";
  } else if (valid.size() == 1) {
    job->verdict_id = valid[0]->verdict_id;
    job->verdict_text = RankName(*valid[0]) + ": " + valid[0]->verdict_text;
    job->warn = valid[0]->report->verdict().severity != Severity::kInfo;
  } else {
    job->verdict_id = "ranks_even";
    job->verdict_text = "no rank holds the others back: own steps " +
                        Ms(order.back()->own_step_ns) + " to " + Ms(order.front()->own_step_ns) +
                        "; " + RankName(*order[0]) + ": " + order[0]->verdict_text;
    job->warn = order[0]->report->verdict().severity != Severity::kInfo;
  }
  return job;
}

}  // namespace pinscope
