// Helpers shared by the subcommands: option-error messages, number and size
// parsing whose errors name the bad value, colour resolution. Everything here
// writes to stderr only through the functions that say so.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analyzer/common/color.h"

namespace pinscope::cli {

// Exit status of a usage error (bad option, bad value, missing argument) for
// every subcommand but `run`, which uses kRunExitLauncher (run_command.cc) so
// that its other statuses stay the job's.
constexpr int kExitUsage = 2;

// Prints "pinscope CMD: MESSAGE" and a hint to `pinscope help CMD` on stderr.
void PrintUsageError(const char* cmd, const std::string& message);

// Turns getopt_long's '?' / ':' result into a message (opterr must be 0 and
// the option string must start with ':' after an optional '+').
void PrintGetoptError(const char* cmd, int c, char** argv);

// Resets getopt_long for a fresh argv (glibc: optind = 0 re-initializes).
void ResetGetopt();

// Parses a whole decimal number within [min, max]. On failure prints
// "pinscope CMD: OPTION expects a whole number from MIN to MAX, not 'TEXT'".
bool ParseIntOption(const char* cmd, const char* option, const char* text, long min, long max,
                    long* out);

// Parses a byte size: digits with an optional K/M/G/T suffix, binary
// multiples ("8M", "8MiB", "8MB" all mean 8 << 20). False on anything else.
bool ParseByteSize(const std::string& text, uint64_t* out);

// Parses "1M,8M,64M": at least one size, each > 0. On failure sets *bad to
// the offending item.
bool ParseSizeList(const std::string& text, std::vector<uint64_t>* out, std::string* bad);

// "512 KiB", "1 MiB", "1.5 GiB", "123 B".
std::string FormatBytes(uint64_t bytes);

// --color[=WHEN]: "auto", "always", "never" (also yes/no, on/off).
bool ParseColorWhen(const char* text, ColorMode* out);
// ParseColorWhen for `cmd --color=WHEN`, printing the usage error itself.
bool ParseColorOption(const char* cmd, const char* text, ColorMode* out);

// kAuto becomes kAlways when `fd` is a terminal, NO_COLOR is unset and TERM
// is not "dumb"; else kNever. The analyzer writes to std::ostream and cannot
// tell, so the CLI decides.
ColorMode ResolveColor(ColorMode requested, int fd);

// True if `path` names an existing directory; else prints
// "pinscope CMD: no such run folder: PATH" (or why it is not one).
bool CheckRunFolder(const char* cmd, const std::string& path);

}  // namespace pinscope::cli
