// Diagnostics to stderr with write(2) only: no stdio, no allocation (tcmalloc
// internal/logging.h: FILE buffering may call malloc). Every message starts
// with "pinscope: ".
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace pinscope::shim {

// Formats into a fixed stack buffer (vsnprintf with %s/%d/%u/%lu/%llu/%x
// only, which glibc serves without malloc) and writes one line to fd 2.
void Log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Where Log lines go instead of fd 2 when set (nullptr: fd 2). For
// `pinscope run`, which links this library to check the job's PINSCOPE_*
// variables with LoadConfig before starting it; the shim never sets it.
// `line` starts with "pinscope: ", has no newline and lives for the call.
using LogSink = void (*)(const char* line, size_t length);
void SetLogSink(LogSink sink);

// Logs only the first time `flag` is seen false; forked children inherit the
// flag, so a message said by the parent is not repeated by its workers.
void LogOnce(std::atomic<bool>* flag, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// Small helpers for code that must not allocate.
size_t CopyString(char* dst, size_t cap, const char* src);  // strlcpy
size_t FormatU64(char* dst, size_t cap, uint64_t v);

}  // namespace pinscope::shim
