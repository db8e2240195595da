// The ranks of a distributed job as text (the report's "Ranks" section and
// one block per rank) and as the JSON report's "ranks" object; see
// job_ranks.h and docs/report.md, "Ranks".
#include <nlohmann/json.hpp>
#include <ostream>

#include "analyzer/common/format.h"
#include "analyzer/report/job_ranks.h"
#include "analyzer/report/report.h"

namespace pinscope {

namespace {

using json = nlohmann::ordered_json;

std::string Ms(double ns) { return FormatDuration(static_cast<uint64_t>(ns > 0 ? ns : 0)); }

std::string Wrapped(const std::string& text, const std::string& indent) {
  return indent +
         WrapWords(text, kReportWidth - indent.size(), kReportWidth - indent.size(), indent);
}

std::string Label(int v) { return v >= 0 ? std::to_string(v) : "-"; }

std::string SourceText(const std::string& source) {
  return source == "nccl_kernels"
             ? "NCCL kernels on each rank's GPU (CUPTI), per step of its steady window"
             : "each rank's main thread off a core outside the waits pinscope records (the next "
               "batch, copies, synchronize calls), per step: with gloo the collectives block "
               "that thread";
}

}  // namespace

void WriteRanksText(const JobRanks& job, bool color, std::ostream& out) {
  const Style style(color);
  out << '\n'
      << style.Bold("Ranks (" + std::to_string(job.ranks.size()) +
                    (job.ranks.size() == 1 ? " rank" : " ranks") +
                    " of a distributed job; each rank's processes replayed on their own)")
      << '\n';
  TextTable table({{"Rank", TextTable::Align::kRight},
                   {"Local", TextTable::Align::kRight},
                   {"Device", TextTable::Align::kRight},
                   {"Procs", TextTable::Align::kRight},
                   {"Step", TextTable::Align::kRight},
                   {"Input wait", TextTable::Align::kRight},
                   {"Collectives", TextTable::Align::kRight},
                   {"Waits on others", TextTable::Align::kRight},
                   {"Own step", TextTable::Align::kRight},
                   {"Verdict"}});
  for (const RankSummary& r : job.ranks) {
    table.AddRow({std::to_string(r.rank), Label(r.local_rank), Label(r.device),
                  std::to_string(r.pids.size()), r.valid ? Ms(r.step_ns) : "-",
                  r.valid ? Ms(r.input_ns) : "-", r.valid ? Ms(r.collective_ns) : "-",
                  r.valid ? Ms(r.collective_wait_ns) : "-", r.valid ? Ms(r.own_step_ns) : "-",
                  r.verdict_id});
  }
  table.Render(out, style);
  if (!job.ranks.empty() && !job.ranks.front().collective_source.empty())
    out << Wrapped("Collectives: " + SourceText(job.ranks.front().collective_source) +
                       ". Waits on others: that less the least any rank spent; own step: the "
                       "step less that wait.",
                   "  ")
        << '\n';
  if (job.straggler >= 0) {
    const RankSummary& s = job.ranks[job.straggler];
    const RankSummary& next = job.ranks[job.next_slowest];
    out << style.Warn(Wrapped("Straggler: rank " + std::to_string(s.rank) + " (" + job.reason +
                                  "): " + job.why + ".",
                              "  "))
        << '\n';
    std::string fix = job.fix.empty()
                          ? "No change pinscope can time on it; bringing it to the next slowest "
                            "rank's own step"
                          : "Fixing it: " + job.fix + ": its step " + Ms(s.step_ns) + " -> " +
                                Ms(job.fixed_step_ns) + ";";
    fix += " the job's step " + Ms(job.job_step_ns) + " -> " + Ms(job.fixed_job_step_ns) +
           StringPrintf(" (%.2fx)",
                        job.fixed_job_step_ns > 0 ? job.job_step_ns / job.fixed_job_step_ns : 1.0) +
           ", at most down to rank " + std::to_string(next.rank) + "'s own step of " +
           Ms(next.own_step_ns) + " (the job's step is its slowest rank's).";
    out << Wrapped(fix, "  ") << '\n';
  }
  std::string shared = "Shared by all ranks: ";
  shared += job.cores > 0 ? std::to_string(job.cores) + " cores (" +
                                StringPrintf("%.1f", job.cores_per_rank) + " per rank)"
                          : std::string("cores unknown");
  shared += ", " + std::to_string(job.workers) + " DataLoader worker" +
            (job.workers == 1 ? "" : "s") + " in all";
  if (job.worker_budget >= 0) {
    shared += "; at the measured load the cores hold " + std::to_string(job.worker_budget) +
              (job.worker_budget == 1 ? " worker" : " workers") + " per rank";
  } else if (job.workers > 0) {
    shared += "; the workers hardly use a core (the cores do not bound them)";
  }
  shared += "; /dev/shm: peak " + FormatBytes(job.shm_peak);
  if (job.shm_capacity > 0) shared += " of " + FormatBytes(job.shm_capacity);
  out << Wrapped(shared + ".", "  ") << '\n';

  for (const RankSummary& r : job.ranks) {
    std::string pids;
    for (uint32_t pid : r.pids) pids += (pids.empty() ? "" : ", ") + std::to_string(pid);
    out << '\n'
        << style.Bold("Rank " + std::to_string(r.rank) + " (local rank " + Label(r.local_rank) +
                      ", device " + Label(r.device) + "; pids " + pids + ")")
        << '\n';
    out << Wrapped("Verdict: " + r.verdict_text, "  ") << '\n';
    if (!r.valid) continue;
    const model::Result& m = r.report->model();
    for (const model::Stage& st : m.stages) {
      std::string line = StringPrintf("    %-52s %10s  %4.0f%%", st.name.c_str(),
                                      Ms(st.service_ns).c_str(), 100 * st.utilization);
      if (st.id == m.critical) line += "  <- limits its step";
      out << line << '\n';
    }
    for (const model::Prediction& p : m.predictions) {
      if (r.step_ns - p.step_ns < m.floor_ns) continue;
      out << Wrapped("Top change: " + p.change.what + ": its step " + Ms(r.step_ns) + " -> " +
                         Ms(p.step_ns) + " (" + p.basis + ")",
                     "  ")
          << '\n';
      break;
    }
  }
}

json RanksJson(const JobRanks& job) {
  json ranks = json::array();
  for (const RankSummary& r : job.ranks) {
    json pids = json::array();
    for (uint32_t pid : r.pids) pids.push_back(pid);
    json top = nullptr;
    if (r.valid) {
      const model::Result& m = r.report->model();
      for (const model::Prediction& p : m.predictions) {
        if (r.step_ns - p.step_ns < m.floor_ns) continue;
        top = {{"change", p.change.id}, {"what", p.change.what}, {"step_ns", p.step_ns}};
        break;
      }
    }
    ranks.push_back({{"rank", r.rank},
                     {"local_rank", r.local_rank},
                     {"world_size", r.world_size},
                     {"group_rank", r.group_rank},
                     {"device", r.device},
                     {"pids", pids},
                     {"model_valid", r.valid},
                     {"steps", r.steps},
                     {"step_ns", r.step_ns},
                     {"input_wait_ns", r.input_ns},
                     {"collective_ns", r.collective_ns},
                     {"collective_source", r.collective_source},
                     {"collective_wait_ns", r.collective_wait_ns},
                     {"own_step_ns", r.own_step_ns},
                     {"workers", r.workers},
                     {"shm_peak_bytes", r.shm_peak},
                     {"verdict", {{"id", r.verdict_id}, {"text", r.verdict_text}}},
                     {"model_verdict", r.report->verdict().id},
                     {"top_change", top}});
  }
  json straggler = nullptr;
  if (job.straggler >= 0) {
    straggler = {{"rank", job.ranks[job.straggler].rank},
                 {"reason", job.reason},
                 {"why", job.why},
                 {"fix", job.fix},
                 {"fixed_step_ns", job.fixed_step_ns},
                 {"next_slowest_rank", job.ranks[job.next_slowest].rank},
                 {"fixed_job_step_ns", job.fixed_job_step_ns},
                 {"gain_ns", job.gain_ns}};
  }
  return {{"count", job.ranks.size()},
          {"job_step_ns", job.job_step_ns},
          {"straggler", straggler},
          {"verdict", {{"id", job.verdict_id}, {"text", job.verdict_text}}},
          {"shared",
           {{"cores", job.cores},
            {"cores_per_rank", job.cores_per_rank},
            {"workers", job.workers},
            {"worker_budget_per_rank", job.worker_budget},
            {"shm_peak_bytes", job.shm_peak},
            {"shm_capacity_bytes", job.shm_capacity}}},
          {"ranks", ranks}};
}

}  // namespace pinscope
