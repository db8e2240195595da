// Status and Severity (status.h).
#include "analyzer/common/status.h"

namespace pinscope {

const char* SeverityName(Severity severity) {
  switch (severity) {
    case Severity::kInfo:
      return "info";
    case Severity::kWarning:
      return "warning";
    case Severity::kError:
      return "error";
  }
  return "error";
}

Severity Status::severity() const {
  switch (code) {
    case Code::kOk:
      return Severity::kInfo;
    case Code::kTruncated:
    case Code::kEmpty:
    case Code::kNotRegular:
      return Severity::kWarning;
    default:
      return Severity::kError;
  }
}

}  // namespace pinscope
