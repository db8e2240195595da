// Output files pinscope writes (Perfetto exports, HTML pages, calibration
// files) hold a job's command line, paths, host name and timings: they are
// created readable by their owner only (0600), whatever the umask allows.
#pragma once

#include <string>

namespace pinscope {

// Creates `path` empty with mode 0600, or truncates it and sets 0600 if it
// exists, so that a stream opened on it next writes a private file. Returns
// false with *error ("cannot write PATH: reason") otherwise.
bool CreatePrivateFile(const std::string& path, std::string* error);

}  // namespace pinscope
