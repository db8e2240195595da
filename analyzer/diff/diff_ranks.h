// The ranks of two runs of a distributed job compared (job_ranks.h): each
// rank's step and own step, the job's step (its slowest rank's), the
// straggler before and after, and A's predicted job step for fixing its
// straggler against B's measured one. Used by diff.cc when either run has
// ranks; a one-process diff is unchanged.
#pragma once

#include <iosfwd>
#include <nlohmann/json_fwd.hpp>

#include "analyzer/common/format.h"

namespace pinscope {

class Report;

void WriteRanksDiff(const Report& a, const Report& b, const Style& style, std::ostream& out);
nlohmann::ordered_json RanksDiffJson(const Report& a, const Report& b);

}  // namespace pinscope
