// Environment parsing for the shim; see config.h and docs/environment.md.
#include "shim/base/config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shim/base/log.h"

namespace pinscope::shim {

bool ParseUint(const char* text, uint64_t max, uint64_t* out) {
  if (!text || !*text) return false;
  uint64_t v = 0;
  for (const char* p = text; *p; ++p) {
    if (*p < '0' || *p > '9') return false;
    uint64_t d = static_cast<uint64_t>(*p - '0');
    if (v > (max - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

bool ParseSize(const char* text, uint64_t* out) {
  if (!text || *text < '0' || *text > '9') return false;
  uint64_t v = 0;
  const char* p = text;
  for (; *p >= '0' && *p <= '9'; ++p) {
    uint64_t d = static_cast<uint64_t>(*p - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  unsigned shift = 0;
  switch (*p) {
    case '\0': break;
    case 'k': case 'K': shift = 10; ++p; break;
    case 'm': case 'M': shift = 20; ++p; break;
    case 'g': case 'G': shift = 30; ++p; break;
    case 't': case 'T': shift = 40; ++p; break;
    case 'b': case 'B': break;
    default: return false;
  }
  if (shift && (*p == 'i' || *p == 'I')) ++p;
  if (*p == 'b' || *p == 'B') ++p;
  if (*p != '\0') return false;
  if (shift && v > (UINT64_MAX >> shift)) return false;
  *out = v << shift;
  return true;
}

namespace {

void SizeVar(const char* name, uint64_t* value) {
  const char* s = getenv(name);
  if (!s || !*s) return;
  uint64_t v;
  if (ParseSize(s, &v)) {
    *value = v;
  } else {
    Log("%s=\"%s\" is not a size (use e.g. 1048576, 512K, 4M, 2G); using the default %llu bytes",
        name, s, static_cast<unsigned long long>(*value));
  }
}

void BoolVar(const char* name, bool* value) {
  const char* s = getenv(name);
  if (!s || !*s) return;
  if (!strcmp(s, "1") || !strcasecmp(s, "on") || !strcasecmp(s, "yes") || !strcasecmp(s, "true")) {
    *value = true;
  } else if (!strcmp(s, "0") || !strcasecmp(s, "off") || !strcasecmp(s, "no") ||
             !strcasecmp(s, "false")) {
    *value = false;
  } else {
    Log("%s=\"%s\" is not 0 or 1; using the default %d", name, s, *value ? 1 : 0);
  }
}

void UintVar(const char* name, uint64_t max, uint32_t* value) {
  const char* s = getenv(name);
  if (!s || !*s) return;
  uint64_t v;
  if (ParseUint(s, max, &v)) {
    *value = static_cast<uint32_t>(v);
  } else {
    Log("%s=\"%s\" is not a whole number from 0 to %llu; using the default %u", name, s,
        static_cast<unsigned long long>(max), *value);
  }
}

// A launcher's label: a whole number below 2^24, else -1 (unset or bad).
int32_t LabelVar(const char* name) {
  uint64_t v;
  const char* s = getenv(name);
  return s && ParseUint(s, (1u << 24) - 1, &v) ? static_cast<int32_t>(v) : -1;
}

}  // namespace

void LoadRankEnv(RankEnv* rank) {
  rank->rank = LabelVar("RANK");
  rank->local_rank = LabelVar("LOCAL_RANK");
  rank->world_size = LabelVar("WORLD_SIZE");
  rank->group_rank = LabelVar("GROUP_RANK");
  rank->local_world_size = LabelVar("LOCAL_WORLD_SIZE");
}

namespace {
Config g_config;
}  // namespace

const Config& GetConfig() { return g_config; }
Config* MutableConfig() { return &g_config; }

void LoadConfig(Config* c) {
  *c = Config{};
  BoolVar("PINSCOPE_DISABLE", &c->disabled);
  if (const char* s = getenv("PINSCOPE_OUT")) CopyString(c->out_dir, sizeof c->out_dir, s);
  if (const char* s = getenv("PINSCOPE_RUN_ID")) CopyString(c->run_id, sizeof c->run_id, s);
  if (const char* s = getenv("PINSCOPE_ROOT_PID")) {
    uint64_t v;
    if (ParseUint(s, 0x7fffffff, &v)) c->root_pid = static_cast<uint32_t>(v);
  }
  SizeVar("PINSCOPE_TRACE_MIN", &c->trace_min);
  UintVar("PINSCOPE_FLUSH_MS", 3600000, &c->flush_ms);
  if (c->flush_ms == 0) c->flush_ms = 1000;
  BoolVar("PINSCOPE_COMPRESS", &c->compress);
  UintVar("PINSCOPE_STACKS", 256, &c->stack_depth);
  BoolVar("PINSCOPE_PY_STACKS", &c->python_stacks);
  BoolVar("PINSCOPE_STACK_CACHE", &c->stack_cache);
  BoolVar("PINSCOPE_CUPTI", &c->cupti);
  if (const char* s = getenv("PINSCOPE_CUPTI_PATH")) CopyString(c->cupti_path, sizeof c->cupti_path, s);
  if (const char* s = getenv("PINSCOPE_CUPTI_KERNELS"); s && *s) {
    if (!strcasecmp(s, "auto")) {
      c->cupti_kernels = KernelRecording::kAuto;
    } else if (!strcasecmp(s, "all") || !strcmp(s, "1")) {
      c->cupti_kernels = KernelRecording::kAll;
    } else if (!strcasecmp(s, "off") || !strcmp(s, "0")) {
      c->cupti_kernels = KernelRecording::kOff;
    } else {
      Log("PINSCOPE_CUPTI_KERNELS=\"%s\" is not auto, all or off; using auto", s);
    }
  }
  UintVar("PINSCOPE_CUPTI_KERNEL_RATE", 100000000, &c->cupti_kernel_rate);
  if (c->cupti_kernel_rate == 0) {
    Log("PINSCOPE_CUPTI_KERNEL_RATE=0 is not allowed (use PINSCOPE_CUPTI_KERNELS=off); using 1000");
    c->cupti_kernel_rate = 1000;
  }
  BoolVar("PINSCOPE_CUPTI_RUNTIME", &c->cupti_runtime);
  UintVar("PINSCOPE_CUPTI_WINDOW_MS", 3600000, &c->cupti_window_ms);
  UintVar("PINSCOPE_CUPTI_WINDOW_CALLS", 1000000, &c->cupti_window_calls);
  UintVar("PINSCOPE_CUPTI_PERIOD_S", 86400, &c->cupti_period_s);
  if (const char* s = getenv("PINSCOPE_CUPTI_START"); s && *s) {
    if (!strcasecmp(s, "loop")) {
      c->cupti_start_at_loop = true;
    } else if (!strcasecmp(s, "first")) {
      c->cupti_start_at_loop = false;
    } else {
      Log("PINSCOPE_CUPTI_START=\"%s\" is not loop or first; using loop", s);
    }
  }
  if (c->cupti_period_s && uint64_t{c->cupti_period_s} * 1000 <= c->cupti_window_ms) {
    Log("PINSCOPE_CUPTI_PERIOD_S=%u is not longer than PINSCOPE_CUPTI_WINDOW_MS=%u; "
        "recording device activity all the time", c->cupti_period_s, c->cupti_window_ms);
    c->cupti_window_ms = 0;
  }
  BoolVar("PINSCOPE_NVML", &c->nvml);
  if (const char* s = getenv("PINSCOPE_NVML_PATH")) CopyString(c->nvml_path, sizeof c->nvml_path, s);
  if (const char* s = getenv("PINSCOPE_PIN"); s && *s) {
    if (!strcmp(s, "0") || !strcasecmp(s, "off")) {
      c->pin = PinMode::kOff;
    } else if (!strcmp(s, "1") || !strcasecmp(s, "on")) {
      c->pin = PinMode::kOn;
    } else if (!strcasecmp(s, "async")) {
      c->pin = PinMode::kAsync;
    } else {
      Log("PINSCOPE_PIN=\"%s\" is not 0, 1 or async; pinning stays off", s);
    }
  }
  SizeVar("PINSCOPE_PIN_MIN", &c->pin_min);
  if (const char* s = getenv("PINSCOPE_PIN_BUDGET"); s && *s) {
    uint64_t v;
    if (ParseSize(s, &v)) {
      c->pin_budget = v;
      c->pin_budget_explicit = true;
    } else {
      Log("PINSCOPE_PIN_BUDGET=\"%s\" is not a size (use e.g. 8G); using the derived default", s);
    }
  }
  SizeVar("PINSCOPE_PIN_KEEP", &c->pin_keep);
  BoolVar("PINSCOPE_PIN_AHEAD", &c->pin_ahead);
  // The pool comes with pinning (issue 15: PyTorch's DataLoader tests pass
  // under it on the GPU, docs/validation.md); PINSCOPE_PIN_POOL=0 turns it off.
  c->pin_pool = c->pin != PinMode::kOff;
  BoolVar("PINSCOPE_PIN_POOL", &c->pin_pool);
  if (c->pin_pool && c->pin == PinMode::kOff) {
    Log("PINSCOPE_PIN_POOL=1 needs PINSCOPE_PIN=1 (or async); the pool stays off");
    c->pin_pool = false;
  }
  LoadRankEnv(&c->rank);
}

}  // namespace pinscope::shim
