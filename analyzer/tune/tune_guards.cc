// The guards; see tune_guards.h.
#include "analyzer/tune/tune_guards.h"

#include <algorithm>

#include "analyzer/common/format.h"

namespace pinscope::tune {
namespace {

// Saturating arithmetic: estimates of absurd settings must not wrap.
uint64_t Mul(uint64_t a, uint64_t b) { return b != 0 && a > UINT64_MAX / b ? UINT64_MAX : a * b; }
uint64_t Add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

std::string Workers(int n) { return std::to_string(n) + (n == 1 ? " worker" : " workers"); }

}  // namespace

uint64_t ShmNeed(const Limits& limits, const Settings& s) {
  if (s.num_workers <= 0) return 0;
  return Mul(Mul(limits.batch_bytes, static_cast<uint64_t>(s.num_workers)),
             static_cast<uint64_t>(EffectivePrefetch(s)));
}

uint64_t PinnedNeed(const Limits& limits, const Settings& s) {
  if (!s.pin_memory && !s.pinscope_pin) return 0;
  const uint64_t queued =
      static_cast<uint64_t>(s.num_workers) * static_cast<uint64_t>(EffectivePrefetch(s));
  return Mul(limits.batch_bytes, queued + 2);
}

uint64_t MemoryNeed(const Limits& limits, const Settings& s) {
  uint64_t need = limits.main_bytes;
  need = Add(need, Mul(limits.worker_bytes, static_cast<uint64_t>(std::max(0, s.num_workers))));
  need = Add(need, ShmNeed(limits, s));
  return Add(need, PinnedNeed(limits, s));
}

std::string Guard(const Limits& limits, const Settings& s) {
  if (limits.cores > 0 && s.num_workers > static_cast<int>(limits.cores)) {
    std::string why = limits.cores_why.empty() ? "" : " (" + limits.cores_why + ")";
    return "cores: " + Workers(s.num_workers) + ", more than the " + std::to_string(limits.cores) +
           " cores the job may use" + why;
  }
  const uint64_t shm = ShmNeed(limits, s);
  if (limits.shm_free_bytes > 0 && limits.batch_bytes > 0 && shm > limits.shm_free_bytes) {
    return "/dev/shm: " + Workers(s.num_workers) + " x prefetch " +
           std::to_string(EffectivePrefetch(s)) + " x " + FormatBytes(limits.batch_bytes) +
           " batches = " + FormatBytes(shm) + ", over the " + FormatBytes(limits.shm_free_bytes) +
           " free";
  }
  if (s.pinscope_pin && limits.batch_bytes > 0) {
    uint64_t budget = limits.pin_budget_bytes;
    std::string source = "pinscope's pinning budget";
    uint64_t own = 0;
    if (!s.pin_budget.empty() && ParseSize(s.pin_budget, &own)) {
      budget = own;
      source = "PINSCOPE_PIN_BUDGET=" + s.pin_budget;
    }
    const uint64_t pinned = PinnedNeed(limits, s);
    if (budget > 0 && pinned > budget) {
      return "pinning budget: PINSCOPE_PIN=1 would pin about " + FormatBytes(pinned) + " (" +
             std::to_string(s.num_workers * EffectivePrefetch(s) + 2) + " batches of " +
             FormatBytes(limits.batch_bytes) + "), over " + source + " (" + FormatBytes(budget) +
             ")";
    }
  }
  if (limits.memory_bytes > 0) {
    const uint64_t need = MemoryNeed(limits, s);
    if (need > limits.memory_bytes) {
      return "memory: needs about " + FormatBytes(need) + " (the main process " +
             FormatBytes(limits.main_bytes) + ", " + Workers(s.num_workers) + " x " +
             FormatBytes(limits.worker_bytes) + ", /dev/shm " + FormatBytes(ShmNeed(limits, s)) +
             ", pinned " + FormatBytes(PinnedNeed(limits, s)) + "), over the " +
             FormatBytes(limits.memory_bytes) + " available";
    }
  }
  return "";
}

bool ParseSize(const std::string& text, uint64_t* bytes) {
  if (text.empty() || text[0] < '0' || text[0] > '9') return false;
  uint64_t v = 0;
  size_t i = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    const uint64_t d = static_cast<uint64_t>(text[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  unsigned shift = 0;
  if (i < text.size()) {
    switch (text[i]) {
      case 'k':
      case 'K':
        shift = 10;
        break;
      case 'm':
      case 'M':
        shift = 20;
        break;
      case 'g':
      case 'G':
        shift = 30;
        break;
      case 't':
      case 'T':
        shift = 40;
        break;
      case 'b':
      case 'B':
        break;
      default:
        return false;
    }
    ++i;
    if (shift && i < text.size() && (text[i] == 'i' || text[i] == 'I')) ++i;
    if (shift && i < text.size() && (text[i] == 'b' || text[i] == 'B')) ++i;
  }
  if (i != text.size()) return false;
  if (shift && v > (UINT64_MAX >> shift)) return false;
  *bytes = v << shift;
  return true;
}

}  // namespace pinscope::tune
