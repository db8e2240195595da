// The shim's settings, read once from the environment at load time (and
// inherited unchanged by forked children). Every variable is documented in
// docs/environment.md; a bad value is reported on stderr, naming the
// variable, and the default is used.
#pragma once

#include <cstdint>

namespace pinscope::shim {

enum class PinMode : uint32_t { kOff = 0, kOn = 1, kAsync = 2 };
// Kernel activity records (the costly CUPTI kind, ~10 us per launch):
// auto = continuous while the job launches at most cupti_kernel_rate kernels
// per second, sampled windows above that; all = always; off = never.
enum class KernelRecording : uint32_t { kAuto = 0, kAll = 1, kOff = 2 };

// The distributed launcher's labels of this process (torchrun and
// torch.distributed.run set RANK, LOCAL_RANK, WORLD_SIZE, GROUP_RANK and
// LOCAL_WORLD_SIZE in each rank's environment); -1 when unset or not a
// whole number. They are the launcher's variables, not pinscope's: a bad
// value is ignored without a word. Forked children (DataLoader workers)
// inherit them with the rest of the configuration.
struct RankEnv {
  int32_t rank = -1;
  int32_t local_rank = -1;
  int32_t world_size = -1;
  int32_t group_rank = -1;
  int32_t local_world_size = -1;
  bool labelled() const { return rank >= 0; }
};

struct Config {
  bool disabled = false;             // PINSCOPE_DISABLE=1
  char out_dir[4096] = {};           // PINSCOPE_OUT (absolute)
  int out_fd = -1;                   // out_dir, opened and checked (O_DIRECTORY|O_NOFOLLOW)
  char run_id[128] = {};             // PINSCOPE_RUN_ID
  uint32_t root_pid = 0;             // PINSCOPE_ROOT_PID
  uint64_t trace_min = 1ull << 20;   // PINSCOPE_TRACE_MIN
  uint32_t flush_ms = 1000;          // PINSCOPE_FLUSH_MS
  bool compress = true;              // PINSCOPE_COMPRESS (zstd frames, shim/record/trace_writer.h)
  uint32_t stack_depth = 32;         // PINSCOPE_STACKS (0 = off)
  bool python_stacks = true;         // PINSCOPE_PY_STACKS
  bool stack_cache = true;           // PINSCOPE_STACK_CACHE (shim/stacks/stacks.h)
  bool cupti = true;                 // PINSCOPE_CUPTI
  char cupti_path[4096] = {};        // PINSCOPE_CUPTI_PATH
  // Off by default: once enabled, CUPTI's kernel kind costs 15-20% of a
  // launch-bound step on the H200, even after it is disabled again (issue 16).
  KernelRecording cupti_kernels = KernelRecording::kOff;  // PINSCOPE_CUPTI_KERNELS
  uint32_t cupti_kernel_rate = 1000;  // PINSCOPE_CUPTI_KERNEL_RATE (records/s, auto)
  bool cupti_runtime = false;        // PINSCOPE_CUPTI_RUNTIME (1: RUNTIME kind, exact joins; issue 16)
  // Device records in windows (issue 16): CUPTI attached for cupti_window_ms
  // and at least cupti_window_calls hooked copies and syncs (at most
  // max(cupti_window_ms, 2 s)), then detached (cuptiFinalize: its cost on
  // every launch goes with it) until cupti_period_s after the window began.
  // The first window waits for the loop (cupti_start_at_loop): hooked calls
  // in three flush periods, not the start-up's first call. 0 ms: attached
  // all the time, from the first CUDA call.
  uint32_t cupti_window_ms = 100;    // PINSCOPE_CUPTI_WINDOW_MS
  uint32_t cupti_window_calls = 32;  // PINSCOPE_CUPTI_WINDOW_CALLS
  uint32_t cupti_period_s = 120;     // PINSCOPE_CUPTI_PERIOD_S (0: one window, never again)
  bool cupti_start_at_loop = true;   // PINSCOPE_CUPTI_START=loop (default) or first
  bool nvml = true;                  // PINSCOPE_NVML (GPU utilization samples)
  char nvml_path[4096] = {};         // PINSCOPE_NVML_PATH
  PinMode pin = PinMode::kOff;       // PINSCOPE_PIN
  uint64_t pin_min = 4ull << 20;     // PINSCOPE_PIN_MIN
  uint64_t pin_budget = 0;           // PINSCOPE_PIN_BUDGET (0: derived)
  bool pin_budget_explicit = false;
  uint64_t pin_keep = 1ull << 30;    // PINSCOPE_PIN_KEEP (0: no recycle list)
  bool pin_ahead = true;             // PINSCOPE_PIN_AHEAD (register shm batches at mmap)
  bool pin_pool = false;             // PINSCOPE_PIN_POOL (worker batches in registered slots)
  RankEnv rank;                      // RANK, LOCAL_RANK, ... (docs/environment.md)
};

// Parses a byte size: digits with an optional K/M/G/T suffix (binary
// multiples; "KiB", "KB", "k" all mean 1024). Returns false on anything else
// (empty, negative, overflow, trailing junk).
bool ParseSize(const char* text, uint64_t* out);

// Parses an unsigned integer with no suffix.
bool ParseUint(const char* text, uint64_t max, uint64_t* out);

// The launcher's rank variables (RankEnv) from the environment.
void LoadRankEnv(RankEnv* rank);

// Reads the environment into *config; complaints go to stderr. Does not
// create the output folder or touch other process state.
void LoadConfig(Config* config);

// The configuration this process runs with: loaded once by the process
// layer (InitProcess) before anything records, read by every layer.
const Config& GetConfig();
Config* MutableConfig();

}  // namespace pinscope::shim
