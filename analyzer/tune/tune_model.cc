// Settings, their labels and environments, and a run's report read into a
// RunModel; see tune_model.h.
#include "analyzer/tune/tune_model.h"

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

namespace pinscope::tune {
namespace {

using nlohmann::json;

const char* Bool(bool b) { return b ? "True" : "False"; }

// j[key] as T when present and of the right kind, else `fallback`.
template <typename T>
T Get(const json& j, const char* key, T fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    return fallback;
  }
}

const json& Sub(const json& j, const char* key) {
  static const json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

std::vector<Predicted> ReadPredictions(const json& list) {
  std::vector<Predicted> out;
  if (!list.is_array()) return out;
  for (const json& p : list) {
    Predicted x;
    x.change = Get<std::string>(p, "change", "");
    x.code_change = Get<bool>(p, "code_change", false);
    x.speedup = Get<double>(p, "speedup", 1.0);
    x.limit_next = Get<std::string>(p, "limit_next", "");
    x.uncertain = Get<bool>(p, "uncertain", false);
    const json& env = Sub(p, "env");
    if (env.is_object()) {
      for (auto it = env.begin(); it != env.end(); ++it)
        if (it->is_string()) x.env.emplace_back(it.key(), it->get<std::string>());
    }
    out.push_back(std::move(x));
  }
  return out;
}

bool Truthy(const std::string& v) { return v == "1" || v == "true" || v == "True" || v == "on"; }

// The prefetch factor `s` would run with if it had workers: a trial that
// adds workers to a loader without them gets DataLoader's default, which is
// no change to name.
int PrefetchIfWorkers(const Settings& s) {
  return s.num_workers > 0 ? EffectivePrefetch(s) : (s.prefetch_factor > 0 ? s.prefetch_factor : 2);
}

}  // namespace

int EffectivePrefetch(const Settings& s) {
  if (s.num_workers <= 0) return 0;
  return s.prefetch_factor > 0 ? s.prefetch_factor : 2;
}

RunLength TrialRunLength(const Settings& s, int warmup, int batches) {
  const int queued = s.num_workers * EffectivePrefetch(s);
  RunLength r;
  r.warmup = std::max(warmup, 2 * queued);
  r.batches = r.warmup + std::max(batches - warmup, 2 * queued);
  return r;
}

bool PrefetchDiffers(const Settings& base, const Settings& s) {
  return s.num_workers > 0 && PrefetchIfWorkers(s) != PrefetchIfWorkers(base);
}

std::string Label(const Settings& base, const Settings& s) {
  std::string out;
  const auto add = [&out](const std::string& part) {
    if (!out.empty()) out += ' ';
    out += part;
  };
  if (s.num_workers != base.num_workers) add("num_workers=" + std::to_string(s.num_workers));
  if (s.pin_memory != base.pin_memory) add(std::string("pin_memory=") + Bool(s.pin_memory));
  if (PrefetchDiffers(base, s)) add("prefetch_factor=" + std::to_string(EffectivePrefetch(s)));
  if (s.persistent_workers != base.persistent_workers && s.num_workers > 0)
    add(std::string("persistent_workers=") + Bool(s.persistent_workers));
  if (s.pinscope_pin != base.pinscope_pin)
    add(s.pinscope_pin ? "PINSCOPE_PIN=1" : "PINSCOPE_PIN=0");
  if (s.pin_budget != base.pin_budget && !s.pin_budget.empty())
    add("PINSCOPE_PIN_BUDGET=" + s.pin_budget);
  return out.empty() ? "baseline" : out;
}

EnvList TrialEnv(const Settings& base, const Settings& s) {
  EnvList env;
  if (s.num_workers != base.num_workers)
    env.emplace_back("PINSCOPE_SET_NUM_WORKERS", std::to_string(s.num_workers));
  if (s.pin_memory != base.pin_memory)
    env.emplace_back("PINSCOPE_SET_PIN_MEMORY", s.pin_memory ? "1" : "0");
  if (PrefetchDiffers(base, s))
    env.emplace_back("PINSCOPE_SET_PREFETCH_FACTOR", std::to_string(EffectivePrefetch(s)));
  if (s.num_workers > 0 && s.persistent_workers != base.persistent_workers)
    env.emplace_back("PINSCOPE_SET_PERSISTENT_WORKERS", s.persistent_workers ? "1" : "0");
  if (s.pinscope_pin != base.pinscope_pin)
    env.emplace_back("PINSCOPE_PIN", s.pinscope_pin ? "1" : "0");
  if (s.pin_budget != base.pin_budget && !s.pin_budget.empty())
    env.emplace_back("PINSCOPE_PIN_BUDGET", s.pin_budget);
  return env;
}

Settings Apply(Settings s, const EnvList& env) {
  for (const auto& [key, value] : env) {
    if (key == "PINSCOPE_SET_NUM_WORKERS") {
      s.num_workers = std::max(0, std::atoi(value.c_str()));
    } else if (key == "PINSCOPE_SET_PIN_MEMORY") {
      s.pin_memory = Truthy(value);
    } else if (key == "PINSCOPE_SET_PREFETCH_FACTOR") {
      s.prefetch_factor = std::max(0, std::atoi(value.c_str()));
    } else if (key == "PINSCOPE_SET_PERSISTENT_WORKERS") {
      s.persistent_workers = Truthy(value);
    } else if (key == "PINSCOPE_PIN") {
      s.pinscope_pin = Truthy(value);
    } else if (key == "PINSCOPE_PIN_BUDGET") {
      s.pin_budget = value;
    }
  }
  // DataLoader takes neither without workers (the hook drops them too).
  if (s.num_workers == 0) {
    s.prefetch_factor = 0;
    s.persistent_workers = false;
  } else if (s.prefetch_factor == 0) {
    s.prefetch_factor = 2;
  }
  return s;
}

RunModel ParseRunModel(const json& report, bool pinscope_pin) {
  RunModel m;
  const json& p = Sub(report, "pipeline");
  const json& loader = Sub(p, "loader");
  m.loader_present = Get<bool>(loader, "present", false);
  m.loader_hooked = Get<bool>(loader, "hooked", false);
  m.settings.num_workers = Get<int>(loader, "num_workers", 0);
  m.settings.pin_memory = Get<bool>(loader, "pin_memory", false);
  m.settings.prefetch_factor = Get<int>(loader, "prefetch_factor", 0);
  m.settings.persistent_workers = Get<bool>(loader, "persistent_workers", false);
  m.settings.pinscope_pin = pinscope_pin;
  if (m.settings.num_workers > 0 && m.settings.prefetch_factor == 0) m.settings.prefetch_factor = 2;
  m.batch_size = Get<int>(loader, "batch_size", 0);
  m.epochs = Get<uint64_t>(loader, "epochs", 0);
  m.remade = Get<bool>(loader, "remade", false);
  m.site = Get<std::string>(loader, "site", "");
  m.user_site = Get<std::string>(loader, "user_site", "");
  m.framework = Get<std::string>(loader, "framework", "");

  m.ranks = Get<int>(Sub(report, "ranks"), "count", 0);
  m.model_valid = Get<bool>(p, "valid", false);
  m.why_not = Get<std::string>(p, "why_not", "");
  m.verdict_id = Get<std::string>(Sub(report, "verdict"), "id", "");
  m.verdict_text = Get<std::string>(Sub(report, "verdict"), "text", "");
  m.critical_stage = Get<std::string>(p, "critical_stage", "");
  m.step_ns = Get<double>(p, "step_ns", 0.0);
  m.predictions = ReadPredictions(Sub(p, "predictions"));
  m.all_predictions = ReadPredictions(Sub(p, "all_predictions"));

  const json& shm = Sub(report, "shm");
  m.shm_segments = Get<uint64_t>(shm, "segments", 0);
  m.shm_peak_bytes = Get<uint64_t>(shm, "peak_bytes", 0);
  const uint64_t created = Get<uint64_t>(shm, "bytes_created", 0);
  if (m.shm_segments > 0 && created > 0) {
    m.batch_bytes = created / m.shm_segments;
  } else {
    m.batch_bytes = Get<uint64_t>(Sub(p, "main"), "batch_bytes", 0);
  }

  const json& host = Sub(report, "host");
  m.logical_cores = Get<uint32_t>(host, "logical_cores", 0);
  m.physical_cores = Get<uint32_t>(host, "physical_cores", 0);
  m.affinity_cores = Get<uint32_t>(host, "affinity_cores", 0);
  m.cgroup_quota_millicores = Get<uint32_t>(host, "cgroup_cpu_quota_millicores", 0);
  m.ram_bytes = Get<uint64_t>(host, "ram_bytes", 0);
  m.cgroup_memory_limit_bytes = Get<uint64_t>(host, "cgroup_memory_limit_bytes", 0);
  m.shm_capacity_bytes = Get<uint64_t>(host, "shm_capacity_bytes", 0);
  m.shm_free_bytes = Get<uint64_t>(host, "shm_free_bytes", 0);
  const json& cuda = Sub(report, "cuda");
  if (cuda.is_object()) m.gpus = Get<int>(cuda, "device_count", -1);
  const json& names = Sub(host, "gpus");
  if (m.gpus < 0 && names.is_array() && !names.empty()) m.gpus = static_cast<int>(names.size());

  const json& processes = Sub(report, "processes");
  if (processes.is_array()) {
    for (const json& proc : processes) {
      if (Get<std::string>(proc, "role", "") != "worker") continue;
      m.worker_alloc_bytes =
          std::max(m.worker_alloc_bytes, Get<uint64_t>(Sub(proc, "large_allocations"), "bytes", 0));
    }
  }
  return m;
}

}  // namespace pinscope::tune
