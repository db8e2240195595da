// The progress line on stderr; see progress_line.h for when it shows.
#include "cli/progress_line.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <ostream>

namespace pinscope::cli {

namespace {

// "0.4", "12", "1234": MiB with one decimal below 10.
std::string Mib(uint64_t bytes) {
  const double mib = static_cast<double>(bytes) / (1024.0 * 1024.0);
  char text[32];
  std::snprintf(text, sizeof(text), mib < 10 ? "%.1f" : "%.0f", mib);
  return text;
}

// "1.9 M ", "850 k ", "12 ": a rate per second, short, before its unit.
std::string Rate(double per_s) {
  char text[32];
  if (per_s >= 1e6) {
    std::snprintf(text, sizeof(text), "%.1f M ", per_s / 1e6);
  } else if (per_s >= 1e3) {
    std::snprintf(text, sizeof(text), "%.0f k ", per_s / 1e3);
  } else {
    std::snprintf(text, sizeof(text), "%.0f ", per_s);
  }
  return text;
}

}  // namespace

uint64_t ProgressLine::SteadyMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

ProgressLine::ProgressLine(std::string command, std::ostream* out, uint64_t after_ms, Clock clock)
    : command_(std::move(command)), out_(out), after_ms_(after_ms), clock_(std::move(clock)) {
  start_ms_ = clock_();
  stage_start_ms_ = start_ms_;
}

ProgressLine::~ProgressLine() { Clear(); }

void ProgressLine::Stage(std::string_view stage) {
  stage_ = stage;
  stage_start_ms_ = clock_();
  have_bytes_ = false;
  done_ = total_ = packets_ = 0;
  stage_drawn_ = false;
  bytes_drawn_ = false;
  MaybeDraw(false);
}

void ProgressLine::Bytes(uint64_t done_bytes, uint64_t total_bytes, uint64_t packets) {
  have_bytes_ = true;
  done_ = done_bytes;
  total_ = total_bytes;
  packets_ = packets;
  // The end of a stage's bytes is drawn whatever the redraw period says, so
  // the line never stays on an old figure while the next stage works.
  MaybeDraw(done_bytes >= total_bytes);
}

std::string ProgressLine::Text(uint64_t now_ms) const {
  std::string text = command_ + ": " + stage_;
  const uint64_t stage_ms = now_ms > stage_start_ms_ ? now_ms - stage_start_ms_ : 0;
  if (have_bytes_) {
    text += " " + Mib(done_) + " of " + Mib(total_) + " MiB";
    if (total_ > 0) text += " (" + std::to_string(done_ * 100 / total_) + "%)";
    if (stage_ms > 0) {
      const double seconds = static_cast<double>(stage_ms) / 1000.0;
      text += ", " + Mib(static_cast<uint64_t>(static_cast<double>(done_) / seconds)) + " MiB/s";
      text += ", " + Rate(static_cast<double>(packets_) / seconds) + "events/s";
    }
  } else {
    const uint64_t total_ms = now_ms > start_ms_ ? now_ms - start_ms_ : 0;
    char elapsed[32];
    std::snprintf(elapsed, sizeof(elapsed), " (%.1f s)", static_cast<double>(total_ms) / 1000.0);
    text += elapsed;
  }
  return text;
}

void ProgressLine::MaybeDraw(bool force) {
  const uint64_t now = clock_();
  if (now - start_ms_ < after_ms_) return;
  const bool first = have_bytes_ ? !bytes_drawn_ : !stage_drawn_;
  if (!force && !first && shown() && now - last_draw_ms_ < kRedrawMs) return;
  std::string text = Text(now);
  if (text.size() > kMaxWidth) text.resize(kMaxWidth);
  std::string line = "\r" + text;
  // Spaces over what the previous text left, then back to its end.
  if (text.size() < shown_width_) line.append(shown_width_ - text.size(), ' ');
  *out_ << line << std::flush;
  shown_width_ = text.empty() ? 1 : text.size();
  last_draw_ms_ = now;
  stage_drawn_ = true;
  if (have_bytes_) bytes_drawn_ = true;
}

void ProgressLine::Clear() {
  if (!shown()) return;
  *out_ << '\r' << std::string(shown_width_, ' ') << '\r' << std::flush;
  shown_width_ = 0;
}

int ClearingBuf::overflow(int c) {
  if (c == traits_type::eof()) return traits_type::not_eof(c);
  line_->Clear();
  const int put = target_->sputc(traits_type::to_char_type(c));
  target_->pubsync();
  return put;
}

std::streamsize ClearingBuf::xsputn(const char* s, std::streamsize n) {
  line_->Clear();
  const std::streamsize put = target_->sputn(s, n);
  target_->pubsync();
  return put;
}

int ClearingBuf::sync() { return target_->pubsync(); }

bool WantProgress(const char* setting, bool stderr_is_terminal, std::string* warning) {
  if (setting == nullptr || *setting == '\0') return stderr_is_terminal;
  const std::string value = setting;
  if (value == "0") return false;
  if (value == "1") return true;
  *warning = "PINSCOPE_PROGRESS=\"" + value + "\" is not 0 or 1; ignored";
  return stderr_is_terminal;
}

CommandProgress::CommandProgress(const char* command) : out_(&std::cout), err_(&std::cerr) {
  std::string warning;
  const bool want =
      WantProgress(std::getenv("PINSCOPE_PROGRESS"), isatty(STDERR_FILENO) == 1, &warning);
  if (!warning.empty()) std::cerr << command << ": warning: " << warning << '\n';
  if (!want) return;
  uint64_t after_ms = ProgressLine::kDefaultAfterMs;
  if (const char* after = std::getenv("PINSCOPE_PROGRESS_AFTER_MS"); after != nullptr && *after) {
    char* end = nullptr;
    const unsigned long long value = std::strtoull(after, &end, 10);
    if (*end == '\0' && after[0] != '-') {
      after_ms = value;
    } else {
      std::cerr << command << ": warning: PINSCOPE_PROGRESS_AFTER_MS=\"" << after
                << "\" is not a whole number of milliseconds; ignored\n";
    }
  }
  line_ = std::make_unique<ProgressLine>(command, &std::cerr, after_ms);
  out_buf_ = std::make_unique<ClearingBuf>(line_.get(), std::cout.rdbuf());
  err_buf_ = std::make_unique<ClearingBuf>(line_.get(), std::cerr.rdbuf());
  out_stream_ = std::make_unique<std::ostream>(out_buf_.get());
  err_stream_ = std::make_unique<std::ostream>(err_buf_.get());
  out_ = out_stream_.get();
  err_ = err_stream_.get();
}

CommandProgress::~CommandProgress() {
  if (line_) line_->Clear();
  std::cout.flush();
}

}  // namespace pinscope::cli
