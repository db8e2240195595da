// pinscope's own cost, as the text report states it at the end of its
// Processes section: the recording hooks' time on the job's threads (copies
// and waits besides the real call and pinning; recorded allocations and
// shared-memory events), the call stacks, and pinscope's own
// threads' CPU time (trace.proto Counters). Traces from shims before the
// hooks were timed get the call stacks' paragraph alone, as they always did.
#pragma once

#include <string>
#include <vector>

#include "analyzer/report/report.h"

namespace pinscope {

struct OwnCostParagraph {
  std::string text;
  bool indented = false;  // a per-process line under the first
};

// Nothing when the run recorded neither stacks nor the own-cost counters.
std::vector<OwnCostParagraph> OwnCostParagraphs(const Report& report);

}  // namespace pinscope
