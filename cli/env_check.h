// `pinscope run` checks the shim's variables (PINSCOPE_*) before it starts
// the job, with the shim's own parser (shim/base/config.cc, linked in as
// the static library pinscope_shim_base): a value the shim would reject
// and replace by its default stops the run before anything starts.
#pragma once

#include <string>
#include <vector>

namespace pinscope::cli {

// The shim's complaints about this process's environment, one per bad
// variable, each naming it ("PINSCOPE_PIN=\"yes please\" is not 0, 1 or
// async"); empty when the shim would take every value. `pin_set`: the run
// sets PINSCOPE_PIN itself (--pin), so the environment's value is not used.
std::vector<std::string> CheckShimEnvironment(bool pin_set);

}  // namespace pinscope::cli
