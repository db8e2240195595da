// A distributed job's ranks (torchrun, torch.distributed.run): the run's
// files grouped by the rank label the shim wrote in their headers
// (ProcessHeader.rank, inherited by each rank's DataLoader workers), one
// report per rank over that rank's files only (its pipeline model and
// verdict), and the job over them: each rank's time in collectives set
// against its input wait, the straggler rank and why, the gain of fixing it
// (the job's step is the slowest rank's: fixing the straggler gains up to
// the next slowest rank's step), and the cores and /dev/shm all ranks'
// workers share. docs/report.md, "Ranks", says what is measured and how.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "analyzer/read/calibration.h"
#include "analyzer/read/run_loader.h"
#include "analyzer/report/report_options.h"

namespace pinscope {

class Report;
class RankAnalysis;

struct RankSummary {
  // The labels (trace::RankLabel; -1 unset).
  int rank = -1, local_rank = -1, world_size = -1, group_rank = -1;
  int device = -1;                 // the device its copies go to, -1 unknown
  std::vector<uint32_t> pids;      // its main process first, then its workers and others
  std::unique_ptr<Report> report;  // over the rank's files only
  bool valid = false;              // its pipeline model found a step loop
  uint64_t steps = 0;
  double step_ns = 0;   // its measured step (the job's, when the ranks keep step)
  double input_ns = 0;  // per step: waiting for its next batch, or making it
  // Per step in collectives: NCCL kernels on its GPU ("nccl_kernels"),
  // else its main thread's off-CPU time outside every recorded wait
  // ("host_off_cpu": with gloo, where the collectives wait).
  double collective_ns = 0;
  std::string collective_source;
  // Of that, the wait for the other ranks: collective_ns less the least
  // any rank spent (the collective's own cost, which every rank pays).
  double collective_wait_ns = 0;
  double own_step_ns = 0;  // step_ns - collective_wait_ns: its step if no rank waited
  int workers = 0;
  double worker_core_share = 0;  // one worker's CPU per batch over its cycle
  double main_core_share = 0;    // the main thread's CPU per step over the step
  uint64_t shm_peak = 0;         // the rank's own /dev/shm peak
  std::string verdict_id, verdict_text;
};

struct JobRanks {
  std::vector<RankSummary> ranks;  // by rank
  double job_step_ns = 0;          // the slowest rank's step
  int straggler = -1;              // index into ranks, -1: none stands out
  int next_slowest = -1;           // index of the rank with the next longest own step
  std::string reason;              // "input", "copies", "host", "gpu"
  std::string why;                 // the straggler's evidence: workers, shm, cores
  std::string fix;                 // its top change ("num_workers=4 in the DataLoader")
  double fixed_step_ns = 0;        // the straggler's step with that change (0: none timed)
  double fixed_job_step_ns = 0;    // the job's step then
  double gain_ns = 0;              // job_step_ns - fixed_job_step_ns
  // Shared by all ranks: the cores of the host and its /dev/shm.
  uint32_t cores = 0;
  double cores_per_rank = 0;
  int workers = 0;         // all ranks' workers
  int worker_budget = -1;  // workers per rank the cores hold at the measured load; -1 unbounded
  uint64_t shm_peak = 0, shm_capacity = 0;
  std::string verdict_id, verdict_text;
  bool warn = false;
};

// The run's files by rank label; empty when no file carries one (a
// single-process job: the report stays as it was).
std::map<int, RunListing> SplitByRank(const RunListing& listing);

// One report per rank and the job over them. `whole` is the report of the
// whole run (host cores, the shared /dev/shm).
std::unique_ptr<JobRanks> BuildJobRanks(std::map<int, RunListing> by_rank,
                                        const Calibration& calibration,
                                        const ReportOptions& options, const Report& whole,
                                        std::ostream& err);

// The ranks section of the text report, and the "ranks" object of the JSON.
void WriteRanksText(const JobRanks& job, bool color, std::ostream& out);
nlohmann::ordered_json RanksJson(const JobRanks& job);

}  // namespace pinscope
