// Errors as values for the analyzer (no exceptions): a Status for one
// operation, and a Problem for something wrong with one file of a run, which
// the report lists at its end.
#pragma once

#include <string>
#include <utility>

namespace pinscope {

enum class Severity { kInfo, kWarning, kError };

// "info", "warning", "error" (also the JSON spelling).
const char* SeverityName(Severity severity);

struct Status {
  enum class Code {
    kOk,
    kTruncated,    // last packet incomplete: everything before it was read
    kEmpty,        // 0-byte file
    kIoError,      // open/read failed
    kCorrupt,      // bad tag, absurd length or unparsable packet
    kNoHeader,     // first packet is not a ProcessHeader
    kNewerFormat,  // header.format_version above what this reader supports
    kBadHeader,    // header present but unusable (format 0, ...)
    kOtherRun,     // file belongs to another run_id than the run reported
    kDuplicate,    // same process written twice
    kNoRun,        // folder missing or holds no trace file
    kNotRegular,   // a FIFO, device or socket named *.pstrace: skipped, not read
  };

  Code code = Code::kOk;
  std::string message;

  static Status Ok() { return Status(); }
  static Status Error(Code code, std::string message) {
    Status status;
    status.code = code;
    status.message = std::move(message);
    return status;
  }

  bool ok() const { return code == Code::kOk; }
  // Truncated and empty files are warnings (a killed job leaves them), and
  // so is a non-regular file skipped; every other problem is an error.
  Severity severity() const;
};

// One problem with one file of a run.
struct Problem {
  std::string file;  // path as given by the run folder listing
  Severity severity = Severity::kError;
  std::string message;  // complete sentence, names the file
};

inline Problem ProblemFrom(const std::string& file, const Status& status) {
  return Problem{file, status.severity(), status.message};
}

}  // namespace pinscope
