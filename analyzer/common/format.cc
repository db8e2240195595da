// Human units, colour and aligned tables for the text reports. Formatting is
// locale independent (snprintf with "C" numbers) so expected outputs are
// stable across machines.
#include "analyzer/common/format.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <sstream>
#include <vector>

namespace pinscope {

std::string StringPrintf(const char* format, ...) {
  char small[256];
  va_list args;
  va_start(args, format);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(small, sizeof(small), format, args);
  va_end(args);
  std::string result;
  if (n < 0) {
    va_end(copy);
    return result;
  }
  if (static_cast<size_t>(n) < sizeof(small)) {
    result.assign(small, static_cast<size_t>(n));
  } else {
    result.resize(static_cast<size_t>(n) + 1);
    std::vsnprintf(result.data(), result.size(), format, copy);
    result.resize(static_cast<size_t>(n));
  }
  va_end(copy);
  return result;
}

std::string FormatBytes(uint64_t bytes) {
  if (bytes < kKiB) return StringPrintf("%llu B", static_cast<unsigned long long>(bytes));
  if (bytes < kMiB) return StringPrintf("%.1f KiB", static_cast<double>(bytes) / kKiB);
  if (bytes < kGiB) return StringPrintf("%.1f MiB", static_cast<double>(bytes) / kMiB);
  return StringPrintf("%.2f GiB", static_cast<double>(bytes) / kGiB);
}

std::string FormatDuration(uint64_t ns) {
  const double ms = static_cast<double>(ns) / 1e6;
  if (ns == 0) return "0 ms";
  if (ms < 1) return StringPrintf("%.3f ms", ms);
  if (ms < 10) return StringPrintf("%.2f ms", ms);
  if (ms < 1000) return StringPrintf("%.1f ms", ms);
  return StringPrintf("%.2f s", ms / 1000);
}

std::string FormatGbps(double gbps) {
  if (!std::isfinite(gbps) || gbps <= 0) return "-";
  if (gbps >= 1000) return StringPrintf("%.0f GB/s", gbps);
  return StringPrintf("%.1f GB/s", gbps);
}

std::string FormatCount(uint64_t count) {
  std::string digits = std::to_string(count);
  std::string result;
  const size_t n = digits.size();
  for (size_t i = 0; i < n; ++i) {
    if (i > 0 && (n - i) % 3 == 0) result += ',';
    result += digits[i];
  }
  return result;
}

std::string FormatPercent(double fraction) {
  if (!std::isfinite(fraction)) return "-";
  return StringPrintf("%.1f%%", fraction * 100);
}

size_t DisplayWidth(const std::string& text) {
  size_t width = 0;
  for (unsigned char c : text) {
    if ((c & 0xC0) != 0x80) ++width;
  }
  return width;
}

namespace {

// A unit the report prints after a number, with the punctuation that may
// follow it ("ms,", "GB/s)").
bool IsUnit(std::string word) {
  while (!word.empty() && std::strchr(",.;:)", word.back()) != nullptr) word.pop_back();
  static constexpr const char* kUnits[] = {"ns",  "us",  "ms",  "s",    "B",     "KiB",
                                           "MiB", "GiB", "TiB", "GB/s", "cores", "%"};
  for (const char* unit : kUnits)
    if (word == unit) return true;
  return false;
}

}  // namespace

std::string WrapWords(const std::string& text, size_t first_width, size_t width,
                      const std::string& indent) {
  // Words, with a unit glued to the number before it.
  std::vector<std::string> words;
  std::istringstream in(text);
  for (std::string word; in >> word;) {
    if (!words.empty() && IsUnit(word) && !words.back().empty() &&
        std::isdigit(static_cast<unsigned char>(words.back().back()))) {
      words.back() += " " + word;
    } else {
      words.push_back(word);
    }
  }
  std::string result, line;
  size_t limit = first_width;
  for (const std::string& word : words) {
    if (!line.empty() && DisplayWidth(line) + 1 + DisplayWidth(word) > limit) {
      result += line + "\n" + indent;
      line.clear();
      limit = width;
    }
    line += (line.empty() ? "" : " ") + word;
  }
  return result + line;
}

std::string Truncate(const std::string& text, size_t width) {
  if (DisplayWidth(text) <= width) return text;
  if (width <= 3) return std::string(width, '.');
  std::string result;
  size_t used = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c & 0xC0) != 0x80) {
      if (used == width - 3) break;
      ++used;
    }
    result += text[i];
  }
  return result + "...";
}

std::string SanitizeTerminalText(const std::string& text, bool keep_color) {
  std::string out;
  out.reserve(text.size());
  const auto escape = [&](unsigned char byte) { out += StringPrintf("\\x%02x", byte); };
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte == '\n' || (byte >= 0x20 && byte < 0x7f)) {
      out += static_cast<char>(byte);
      ++i;
      continue;
    }
    if (byte == 0x1b && keep_color && i + 1 < n && text[i + 1] == '[') {
      size_t j = i + 2;
      while (j < n && (std::isdigit(static_cast<unsigned char>(text[j])) || text[j] == ';')) ++j;
      if (j < n && text[j] == 'm') {
        out.append(text, i, j + 1 - i);
        i = j + 1;
        continue;
      }
    }
    // A UTF-8 sequence: lead 0xC2..0xF4 and its continuation bytes, not a
    // C1 control (U+0080..U+009F, encoded C2 80..C2 9F).
    size_t length = byte >= 0xC2 && byte <= 0xDF   ? 2
                    : byte >= 0xE0 && byte <= 0xEF ? 3
                    : byte >= 0xF0 && byte <= 0xF4 ? 4
                                                   : 0;
    for (size_t k = 1; length != 0 && k < length; ++k) {
      if (i + k >= n || (static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) length = 0;
    }
    if (length == 2 && byte == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0) length = 0;
    if (length == 0) {
      escape(byte);
      ++i;
      continue;
    }
    out.append(text, i, length);
    i += length;
  }
  return out;
}

std::string Style::Wrap(const char* code, const std::string& text) const {
  if (!color_ || text.empty()) return text;
  return std::string("\x1b[") + code + "m" + text + "\x1b[0m";
}

void TextTable::AddRow(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

void TextTable::Render(std::ostream& out, const Style& style, const std::string& indent,
                       size_t width) const {
  const size_t n = columns_.size();
  std::vector<size_t> widths(n, 0);
  for (size_t c = 0; c < n; ++c) {
    widths[c] = DisplayWidth(columns_[c].title);
    for (const auto& row : rows_) widths[c] = std::max(widths[c], DisplayWidth(row[c]));
  }
  size_t total = indent.size() + (n > 0 ? 2 * (n - 1) : 0);
  for (size_t w : widths) total += w;
  // Cut flexible columns, widest first, until the table fits.
  while (total > width) {
    size_t widest = n;
    for (size_t c = 0; c < n; ++c) {
      if (columns_[c].flexible && widths[c] > DisplayWidth(columns_[c].title) && widths[c] > 8 &&
          (widest == n || widths[c] > widths[widest])) {
        widest = c;
      }
    }
    if (widest == n) break;
    const size_t cut = std::min(total - width, widths[widest] - 8);
    widths[widest] -= cut;
    total -= cut;
  }
  const auto emit = [&](const std::vector<std::string>& cells, bool title) {
    std::string line = indent;
    for (size_t c = 0; c < n; ++c) {
      const std::string text = Truncate(cells[c], widths[c]);
      const size_t pad = widths[c] - DisplayWidth(text);
      const bool last = c + 1 == n;
      if (columns_[c].align == Align::kRight) {
        line += std::string(pad, ' ') + text;
      } else {
        line += text;
        if (!last) line += std::string(pad, ' ');
      }
      if (!last) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << (title ? style.Bold(line) : line) << '\n';
  };
  std::vector<std::string> titles;
  for (const auto& column : columns_) titles.push_back(column.title);
  emit(titles, true);
  for (const auto& row : rows_) emit(row, false);
}

}  // namespace pinscope
