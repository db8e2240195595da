// Option and number helpers shared by the subcommands; see cli_common.h.
#include "cli/cli_common.h"

#include <getopt.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace pinscope::cli {

void PrintUsageError(const char* cmd, const std::string& message) {
  std::fprintf(stderr, "pinscope %s: %s\nTry 'pinscope help %s'.\n", cmd, message.c_str(), cmd);
}

void PrintGetoptError(const char* cmd, int c, char** argv) {
  // optind already points past the offending word, except for a missing
  // value of a short option at the end of argv.
  const char* word = optind > 0 ? argv[optind - 1] : "";
  std::string message;
  if (c == ':') {
    if (optopt && word[0] == '-' && word[1] != '-') {
      message = std::string("option -") + static_cast<char>(optopt) + " needs a value";
    } else {
      message = std::string("option ") + word + " needs a value";
    }
  } else if (optopt) {
    message = std::string("unknown option -") + static_cast<char>(optopt);
  } else {
    // Unknown long option, or an ambiguous/valueless one: show the word.
    std::string w = word;
    if (size_t eq = w.find('='); eq != std::string::npos && w.rfind("--", 0) == 0) {
      std::string name = w.substr(0, eq);
      message = "option " + name + " is unknown or takes no value";
    } else {
      message = "unknown option " + w;
    }
  }
  PrintUsageError(cmd, message);
}

void ResetGetopt() {
  optind = 0;
  opterr = 0;
  optopt = 0;
}

bool ParseIntOption(const char* cmd, const char* option, const char* text, long min, long max,
                    long* out) {
  bool ok = text != nullptr && *text != '\0';
  long value = 0;
  if (ok) {
    // Digits only (an optional leading '-' where negatives are allowed): no
    // "0x10", no " 5", no "5k", no "+5".
    const char* p = text;
    if (*p == '-' && min < 0) ++p;
    if (*p == '\0') ok = false;
    for (; ok && *p; ++p) ok = *p >= '0' && *p <= '9';
  }
  if (ok) {
    errno = 0;
    char* end = nullptr;
    value = std::strtol(text, &end, 10);
    ok = errno == 0 && end && *end == '\0' && value >= min && value <= max;
  }
  if (!ok) {
    std::fprintf(stderr, "pinscope %s: %s expects a whole number from %ld to %ld, not '%s'\n", cmd,
                 option, min, max, text ? text : "");
    return false;
  }
  *out = value;
  return true;
}

bool ParseByteSize(const std::string& text, uint64_t* out) {
  size_t i = 0;
  uint64_t v = 0;
  if (text.empty() || text[0] < '0' || text[0] > '9') return false;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    uint64_t d = static_cast<uint64_t>(text[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  std::string suffix = text.substr(i);
  for (char& c : suffix) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  unsigned shift = 0;
  if (!suffix.empty() && suffix != "b") {
    switch (suffix[0]) {
      case 'k':
        shift = 10;
        break;
      case 'm':
        shift = 20;
        break;
      case 'g':
        shift = 30;
        break;
      case 't':
        shift = 40;
        break;
      default:
        return false;
    }
    std::string rest = suffix.substr(1);
    if (!rest.empty() && rest != "b" && rest != "ib") return false;
  }
  if (shift && v > (UINT64_MAX >> shift)) return false;
  *out = v << shift;
  return true;
}

bool ParseSizeList(const std::string& text, std::vector<uint64_t>* out, std::string* bad) {
  out->clear();
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    uint64_t v = 0;
    if (!ParseByteSize(item, &v) || v == 0) {
      *bad = item;
      return false;
    }
    out->push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return !out->empty();
}

std::string FormatBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  double value = static_cast<double>(bytes);
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char buf[64];
  if (unit == 0) {
    std::snprintf(buf, sizeof buf, "%" PRIu64 " B", bytes);
  } else if (value == static_cast<double>(static_cast<uint64_t>(value))) {
    std::snprintf(buf, sizeof buf, "%.0f %s", value, kUnits[unit]);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", value, kUnits[unit]);
  }
  return buf;
}

bool ParseColorWhen(const char* text, ColorMode* out) {
  if (!text || !strcasecmp(text, "always") || !strcasecmp(text, "yes") || !strcasecmp(text, "on") ||
      !strcasecmp(text, "force")) {
    *out = ColorMode::kAlways;
  } else if (!strcasecmp(text, "never") || !strcasecmp(text, "no") || !strcasecmp(text, "off") ||
             !strcasecmp(text, "none")) {
    *out = ColorMode::kNever;
  } else if (!strcasecmp(text, "auto") || !strcasecmp(text, "tty") || !strcasecmp(text, "if-tty")) {
    *out = ColorMode::kAuto;
  } else {
    return false;
  }
  return true;
}

bool ParseColorOption(const char* cmd, const char* text, ColorMode* out) {
  if (ParseColorWhen(text, out)) return true;
  PrintUsageError(cmd, std::string("--color expects auto, always or never, not '") +
                           (text ? text : "") + "'");
  return false;
}

ColorMode ResolveColor(ColorMode requested, int fd) {
  if (requested != ColorMode::kAuto) return requested;
  // https://no-color.org: any non-empty NO_COLOR disables colour.
  const char* no_color = std::getenv("NO_COLOR");
  if (no_color && *no_color) return ColorMode::kNever;
  const char* term = std::getenv("TERM");
  if (term && !std::strcmp(term, "dumb")) return ColorMode::kNever;
  return isatty(fd) ? ColorMode::kAlways : ColorMode::kNever;
}

bool CheckRunFolder(const char* cmd, const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    int e = errno;
    if (e == ENOENT) {
      std::fprintf(stderr, "pinscope %s: no such run folder: %s\n", cmd, path.c_str());
    } else {
      std::fprintf(stderr, "pinscope %s: cannot open the run folder %s: %s\n", cmd, path.c_str(),
                   std::strerror(e));
    }
    return false;
  }
  if (!S_ISDIR(st.st_mode)) {
    std::fprintf(stderr,
                 "pinscope %s: %s is not a run folder (a directory of *.pstrace files made by "
                 "`pinscope run`)\n",
                 cmd, path.c_str());
    return false;
  }
  return true;
}

}  // namespace pinscope::cli
