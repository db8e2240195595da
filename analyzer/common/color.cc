// See color.h.
#include "analyzer/common/color.h"

#include <unistd.h>

#include <iostream>

namespace pinscope {

bool UseColor(ColorMode mode, const std::ostream& out) {
  switch (mode) {
    case ColorMode::kAlways:
      return true;
    case ColorMode::kNever:
      return false;
    case ColorMode::kAuto:
      // Only the process's own stdout can be a terminal we know of.
      return &out == &std::cout && isatty(STDOUT_FILENO) == 1;
  }
  return false;
}

}  // namespace pinscope
