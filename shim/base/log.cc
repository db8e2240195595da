// Stderr diagnostics for the shim; see log.h.
#include "shim/base/log.h"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace pinscope::shim {
namespace {

std::atomic<LogSink> g_sink{nullptr};

void VLog(const char* fmt, va_list ap) {
  char buf[1024];
  size_t n = CopyString(buf, sizeof buf, "pinscope: ");
  int m = vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
  if (m < 0) return;
  n += static_cast<size_t>(m) < sizeof buf - n - 1 ? static_cast<size_t>(m) : sizeof buf - n - 2;
  if (LogSink sink = g_sink.load(std::memory_order_acquire)) {
    sink(buf, n);
    return;
  }
  buf[n++] = '\n';
  size_t off = 0;
  while (off < n) {
    ssize_t w = write(2, buf + off, n - off);
    if (w <= 0) break;
    off += static_cast<size_t>(w);
  }
}

}  // namespace

void SetLogSink(LogSink sink) { g_sink.store(sink, std::memory_order_release); }

void Log(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  VLog(fmt, ap);
  va_end(ap);
}

void LogOnce(std::atomic<bool>* flag, const char* fmt, ...) {
  if (flag->exchange(true)) return;
  va_list ap;
  va_start(ap, fmt);
  VLog(fmt, ap);
  va_end(ap);
}

size_t CopyString(char* dst, size_t cap, const char* src) {
  if (cap == 0) return 0;
  size_t n = strnlen(src, cap - 1);
  memcpy(dst, src, n);
  dst[n] = '\0';
  return n;
}

size_t FormatU64(char* dst, size_t cap, uint64_t v) {
  char tmp[24];
  size_t n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v && n < sizeof tmp);
  size_t out = 0;
  while (n && out + 1 < cap) dst[out++] = tmp[--n];
  if (cap) dst[out] = '\0';
  return out;
}

}  // namespace pinscope::shim
