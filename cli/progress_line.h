// The progress line of `pinscope report`, `export` and `diff` on a terminal:
// one self-overwriting line on stderr ("\r", padded with spaces over the
// previous text, erased at the end), shown only once the command has worked
// for a while (2 s), redrawn at most every 200 ms from the analyzer's
// Progress hooks (no thread, no timer). Whether it is shown at all is
// decided once, by CommandProgress: a terminal on stderr, or
// PINSCOPE_PROGRESS=1; PINSCOPE_PROGRESS=0 turns it off (docs/cli.md).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <streambuf>
#include <string>
#include <string_view>

#include "analyzer/common/progress.h"

namespace pinscope::cli {

class ProgressLine : public Progress {
 public:
  static constexpr uint64_t kDefaultAfterMs = 2000;
  static constexpr uint64_t kRedrawMs = 200;
  // Longer text is cut: a line that wraps on an 80-column terminal can no
  // longer be overwritten with "\r".
  static constexpr size_t kMaxWidth = 79;
  // Milliseconds on a monotonic clock; injectable for tests.
  using Clock = std::function<uint64_t()>;
  static uint64_t SteadyMs();

  // `command` prefixes the line ("pinscope report"). Nothing is drawn
  // before `after_ms` have passed since construction.
  ProgressLine(std::string command, std::ostream* out, uint64_t after_ms, Clock clock = SteadyMs);
  ~ProgressLine() override;

  void Stage(std::string_view stage) override;
  void Bytes(uint64_t done_bytes, uint64_t total_bytes, uint64_t packets) override;
  // Erases the line if one is shown (before any other output on the
  // terminal, and at the end); the next hook draws it again.
  void Clear();
  bool shown() const { return shown_width_ > 0; }
  // The text of the line now, without "\r" and padding (for tests).
  std::string Text(uint64_t now_ms) const;

 private:
  void MaybeDraw(bool force);

  std::string command_;
  std::ostream* out_;
  uint64_t after_ms_;
  Clock clock_;
  uint64_t start_ms_;
  std::string stage_;
  uint64_t stage_start_ms_ = 0;
  bool have_bytes_ = false;
  uint64_t done_ = 0, total_ = 0, packets_ = 0;
  bool stage_drawn_ = false;  // the stage, and its first bytes, drawn once each
  bool bytes_drawn_ = false;
  uint64_t last_draw_ms_ = 0;
  size_t shown_width_ = 0;  // characters on the line now; 0: nothing shown
};

// A stream buffer that clears the progress line before passing each write
// to `target` (and syncs `target` after it, so that buffered stdout never
// lands after a line drawn later). Unbuffered itself.
class ClearingBuf : public std::streambuf {
 public:
  ClearingBuf(ProgressLine* line, std::streambuf* target) : line_(line), target_(target) {}

 protected:
  int overflow(int c) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int sync() override;

 private:
  ProgressLine* line_;
  std::streambuf* target_;
};

// What a command writes through: std::cout and std::cerr as they are when no
// line is shown, else the two through ClearingBufs. The line is cleared when
// this goes away.
class CommandProgress {
 public:
  // `command`: "pinscope report". Reads PINSCOPE_PROGRESS ("0", "1"; unset
  // or empty: a terminal on stderr decides; anything else: a warning, and
  // as unset) and PINSCOPE_PROGRESS_AFTER_MS (a test hook: the 2 s, as a
  // whole number of milliseconds).
  explicit CommandProgress(const char* command);
  ~CommandProgress();
  CommandProgress(const CommandProgress&) = delete;
  CommandProgress& operator=(const CommandProgress&) = delete;

  // nullptr when no line is shown.
  Progress* progress() { return line_.get(); }
  std::ostream& out() { return *out_; }
  std::ostream& err() { return *err_; }

 private:
  std::unique_ptr<ProgressLine> line_;
  std::unique_ptr<ClearingBuf> out_buf_, err_buf_;
  std::unique_ptr<std::ostream> out_stream_, err_stream_;
  std::ostream* out_;
  std::ostream* err_;
};

// The decision of CommandProgress, without the environment (for tests):
// `setting` is PINSCOPE_PROGRESS (nullptr: unset). Sets *warning for a
// value that is not 0, 1 or empty.
bool WantProgress(const char* setting, bool stderr_is_terminal, std::string* warning);

}  // namespace pinscope::cli
