// Two runs' ranks compared; see diff_ranks.h.
#include "analyzer/diff/diff_ranks.h"

#include <map>
#include <nlohmann/json.hpp>
#include <ostream>

#include "analyzer/report/report.h"

namespace pinscope {

namespace {

using json = nlohmann::ordered_json;

std::string Ms(double ns) { return ns > 0 ? FormatDuration(static_cast<uint64_t>(ns)) : "-"; }

const RankSummary* Find(const JobRanks* job, int rank) {
  if (job == nullptr) return nullptr;
  for (const RankSummary& r : job->ranks)
    if (r.rank == rank) return &r;
  return nullptr;
}

std::map<int, bool> Ranks(const JobRanks* a, const JobRanks* b) {
  std::map<int, bool> ranks;
  for (const JobRanks* job : {a, b})
    if (job != nullptr)
      for (const RankSummary& r : job->ranks) ranks[r.rank] = true;
  return ranks;
}

std::string StragglerText(const JobRanks* job) {
  if (job == nullptr) return "not a distributed run";
  if (job->straggler < 0) return "none";
  return "rank " + std::to_string(job->ranks[job->straggler].rank) + " (" + job->reason + ")";
}

json StragglerJson(const JobRanks* job) {
  if (job == nullptr || job->straggler < 0) return nullptr;
  return {{"rank", job->ranks[job->straggler].rank}, {"reason", job->reason}};
}

}  // namespace

void WriteRanksDiff(const Report& a, const Report& b, const Style& style, std::ostream& out) {
  const JobRanks* ja = a.ranks();
  const JobRanks* jb = b.ranks();
  out << '\n' << style.Bold("Ranks (each rank's step, and the job's: its slowest rank's)") << '\n';
  TextTable table({{"Rank", TextTable::Align::kRight},
                   {"A step", TextTable::Align::kRight},
                   {"B step", TextTable::Align::kRight},
                   {"A own step", TextTable::Align::kRight},
                   {"B own step", TextTable::Align::kRight},
                   {"A verdict"},
                   {"B verdict"}});
  for (const auto& [rank, _] : Ranks(ja, jb)) {
    const RankSummary* ra = Find(ja, rank);
    const RankSummary* rb = Find(jb, rank);
    table.AddRow({std::to_string(rank), Ms(ra ? ra->step_ns : 0), Ms(rb ? rb->step_ns : 0),
                  Ms(ra ? ra->own_step_ns : 0), Ms(rb ? rb->own_step_ns : 0),
                  ra ? ra->verdict_id : "-", rb ? rb->verdict_id : "-"});
  }
  table.Render(out, style);
  const double sa = ja ? ja->job_step_ns : 0, sb = jb ? jb->job_step_ns : 0;
  out << "  job step: " << Ms(sa) << " -> " << Ms(sb);
  if (sa > 0 && sb > 0) out << StringPrintf(" (%.2fx)", sa / sb);
  out << "\n  straggler: " << StragglerText(ja) << " -> " << StragglerText(jb) << '\n';
  if (ja != nullptr && ja->straggler >= 0 && ja->fixed_job_step_ns > 0 && sb > 0) {
    const RankSummary& s = ja->ranks[ja->straggler];
    const std::string line =
        "A predicted " + std::string(ja->fix.empty() ? "bringing" : "fixing") + " rank " +
        std::to_string(s.rank) +
        (ja->fix.empty() ? std::string(" to the next slowest") : " (" + ja->fix + ")") +
        ": job step " + Ms(sa) + " -> " + Ms(ja->fixed_job_step_ns) +
        StringPrintf(" (%.2fx); B measured %s (%.2fx)", sa / ja->fixed_job_step_ns, Ms(sb).c_str(),
                     sa / sb);
    out << "  " << WrapWords(line, kReportWidth - 2, kReportWidth - 4, "    ") << '\n';
  }
}

json RanksDiffJson(const Report& a, const Report& b) {
  const JobRanks* ja = a.ranks();
  const JobRanks* jb = b.ranks();
  json ranks = json::array();
  for (const auto& [rank, _] : Ranks(ja, jb)) {
    const RankSummary* ra = Find(ja, rank);
    const RankSummary* rb = Find(jb, rank);
    const auto side = [](const RankSummary* r) -> json {
      if (r == nullptr) return nullptr;
      return {{"step_ns", r->step_ns}, {"own_step_ns", r->own_step_ns}, {"verdict", r->verdict_id}};
    };
    ranks.push_back({{"rank", rank}, {"a", side(ra)}, {"b", side(rb)}});
  }
  json predicted = nullptr;
  if (ja != nullptr && ja->straggler >= 0 && ja->fixed_job_step_ns > 0)
    predicted = {{"fix", ja->fix}, {"job_step_ns", ja->fixed_job_step_ns}};
  return {{"ranks", ranks},
          {"job_step_ns",
           {{"a", ja ? json(ja->job_step_ns) : json(nullptr)},
            {"b", jb ? json(jb->job_step_ns) : json(nullptr)}}},
          {"straggler", {{"a", StragglerJson(ja)}, {"b", StragglerJson(jb)}}},
          {"predicted_fix", predicted}};
}

}  // namespace pinscope
