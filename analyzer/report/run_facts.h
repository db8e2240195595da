// The run's facts as the reports print them (command, run, processes, host,
// /dev/shm, GPU and PCIe link, CUDA, trace): one list of labelled lines that
// the text report and the HTML page both render, so the two never disagree.
#pragma once

#include <string>
#include <vector>

#include "analyzer/report/report.h"

namespace pinscope {

struct RunFact {
  std::string name;   // "Host"
  std::string value;  // "16 logical / 16 physical cores, ..."
};

std::vector<RunFact> RunFacts(const Report& report);

}  // namespace pinscope
