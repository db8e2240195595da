// CheckShimEnvironment: LoadConfig on this process's environment with the
// shim's Log lines captured instead of written (SetLogSink), so the rules
// and the messages are the shim's own and cannot drift from it.
#include "cli/env_check.h"

#include <string_view>

#include "shim/base/config.h"
#include "shim/base/log.h"

namespace pinscope::cli {

namespace {

// LoadConfig runs on this thread only, while the sink is set.
std::vector<std::string>* g_lines = nullptr;

void Collect(const char* line, size_t length) {
  if (g_lines != nullptr) g_lines->emplace_back(line, length);
}

}  // namespace

std::vector<std::string> CheckShimEnvironment(bool pin_set) {
  std::vector<std::string> lines;
  g_lines = &lines;
  shim::SetLogSink(Collect);
  shim::Config config;
  shim::LoadConfig(&config);
  shim::SetLogSink(nullptr);
  g_lines = nullptr;
  std::vector<std::string> complaints;
  for (std::string_view line : lines) {
    if (line.rfind("pinscope: ", 0) == 0) line.remove_prefix(10);
    if (pin_set && line.rfind("PINSCOPE_PIN=", 0) == 0) continue;
    // The shim goes on with its default ("; using the default 4194304
    // bytes"); the run stops instead, so that part is not said.
    const size_t fallback = line.find("; ");
    complaints.emplace_back(line.substr(0, fallback));
  }
  return complaints;
}

}  // namespace pinscope::cli
