// Reads a Perfetto trace the way trace_processor interprets it (tracks from
// descriptors; slices from BEGIN/END pairs per track in time order; counter
// values), checks the rules a reader relies on, and prints it as canonical
// text. perfetto_schema_check.py prints the same text from Perfetto's own
// schema, so both decoders are diffed against one expected file.
#pragma once

#include <string>
#include <vector>

namespace pinscope::testing {

struct PerfettoDump {
  std::string text;                 // canonical dump (see perfetto_schema_check.py)
  std::vector<std::string> errors;  // broken rules; empty for a valid trace
  size_t packets = 0;
  size_t slices = 0;
  size_t counter_values = 0;
  size_t flows = 0;  // host call -> device record arrows
};

// `bytes`: the whole exported file.
PerfettoDump DumpPerfetto(const std::string& bytes);

}  // namespace pinscope::testing
