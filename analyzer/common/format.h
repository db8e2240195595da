// Text output helpers for the reports: human units (MiB, GB/s, ms), counts
// with separators, ANSI colour that can be switched off, and an aligned table
// that fits a given width (100 columns for the report).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace pinscope {

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;
inline constexpr uint64_t kGiB = 1024 * kMiB;
inline constexpr size_t kReportWidth = 100;

// "512 B", "1.5 KiB", "73.5 MiB", "2.87 GiB".
std::string FormatBytes(uint64_t bytes);
// "0.042 ms", "5.25 ms", "512.3 ms", "12.35 s".
std::string FormatDuration(uint64_t ns);
// "6.0 GB/s" (GB = 1e9 bytes); "-" for a zero or non-finite rate.
std::string FormatGbps(double gbps);
// "4,812".
std::string FormatCount(uint64_t count);
// "31.2%" for 0.312.
std::string FormatPercent(double fraction);
// printf-style into a std::string.
std::string StringPrintf(const char* format, ...) __attribute__((format(printf, 1, 2)));

// Display width of UTF-8 text (code points; the report prints no wide
// characters of its own).
size_t DisplayWidth(const std::string& text);
// Greedy word wrap: the first line holds at most `first_width` columns, the
// others `width` after `indent`, which the result puts at their start (the
// first line's prefix is the caller's). A number and the unit after it
// ("11.34 s", "3.0 MiB", "4.2 GB/s") stay on one line.
std::string WrapWords(const std::string& text, size_t first_width, size_t width,
                      const std::string& indent);
// Cuts `text` to `width` columns, ending in "..." when cut.
std::string Truncate(const std::string& text, size_t width);

// Text from a trace (run id, command line, paths, thread names, Python
// frames) made safe to print on a terminal: every control byte but '\n'
// (C0, DEL, C1 whether UTF-8 encoded or a lone byte, bytes of broken UTF-8)
// becomes a visible "\xHH", so no escape sequence from a trace can clear
// the screen, move the cursor or set the title. With `keep_color`, the
// colour codes Style writes (ESC [ digits and ';' m) stay. Valid UTF-8
// text is unchanged. JSON output is not passed through it (it stays exact).
std::string SanitizeTerminalText(const std::string& text, bool keep_color);

// ANSI styling; every function returns the text unchanged when disabled.
class Style {
 public:
  explicit Style(bool color) : color_(color) {}
  bool color() const { return color_; }
  std::string Bold(const std::string& text) const { return Wrap("1", text); }
  std::string Warn(const std::string& text) const { return Wrap("33", text); }
  std::string Bad(const std::string& text) const { return Wrap("31", text); }
  std::string Good(const std::string& text) const { return Wrap("32", text); }
  std::string Dim(const std::string& text) const { return Wrap("2", text); }

 private:
  std::string Wrap(const char* code, const std::string& text) const;
  bool color_;
};

// Columns separated by two spaces; the widest flexible column is cut so the
// table fits the width given to Render.
class TextTable {
 public:
  enum class Align { kLeft, kRight };
  struct Column {
    std::string title;
    Align align = Align::kLeft;
    // May be cut (with "...") to fit; typically a command or buffer column.
    bool flexible = false;
  };

  explicit TextTable(std::vector<Column> columns) : columns_(std::move(columns)) {}
  void AddRow(std::vector<std::string> cells);
  size_t rows() const { return rows_.size(); }
  // Writes the title row (bold) and the rows, each prefixed by `indent`.
  void Render(std::ostream& out, const Style& style, const std::string& indent = "  ",
              size_t width = kReportWidth) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace pinscope
