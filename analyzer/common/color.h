// Colour on a terminal: the choice a person makes (--color) and whether a
// given stream gets it. Shared by the report and diff writers.
#pragma once

#include <iosfwd>

namespace pinscope {

enum class ColorMode { kAuto, kAlways, kNever };

// kAuto colours only the process's own stdout, and only on a terminal.
bool UseColor(ColorMode mode, const std::ostream& out);

}  // namespace pinscope
