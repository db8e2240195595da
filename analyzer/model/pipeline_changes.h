// Each change re-timed on the pipeline (internal to analyzer/model; the
// public entry is Predict in pipeline_model.h), and the changes a run is
// offered.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "analyzer/model/pipeline_model.h"

namespace pinscope::model::detail {

Change SetChange(const std::string& id, const std::string& what,
                 std::vector<std::pair<std::string, std::string>> env);
Change CodeChange(const std::string& id, const std::string& what);
// The worker counts worth trying: doublings from today, up to the cores
// the job may use less the main process.
std::vector<int> WorkerCounts(const Inputs& in);

}  // namespace pinscope::model::detail
