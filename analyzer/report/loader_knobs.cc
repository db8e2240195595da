// Where a DataLoader change is made; see loader_knobs.h.
#include "analyzer/report/loader_knobs.h"

#include <string>

namespace pinscope {
namespace {

constexpr const char* kInstalled[] = {"/site-packages/", "/dist-packages/"};

// The part of an installed file's path from its package on
// ("accelerate/data_loader.py:370"); the site as it is otherwise.
std::string Short(const std::string& site) {
  for (const char* folder : kInstalled) {
    const size_t at = site.rfind(folder);
    if (at != std::string::npos) return site.substr(at + std::char_traits<char>::length(folder));
  }
  return site;
}

struct Knob {
  std::string plain;         // the DataLoader's argument: "num_workers=8"
  std::string transformers;  // TrainingArguments' field: "dataloader_num_workers=8"
  std::string also;          // what goes with it: ", and run under PINSCOPE_PIN=1"
};

// The knob a change turns; empty for changes that are not DataLoader
// settings (pinscope's own variables, code changes elsewhere).
Knob KnobOf(const std::string& id, int batch_size) {
  Knob k;
  if (id.rfind("num_workers=", 0) == 0) {
    k.plain = id;
    k.transformers = "dataloader_" + id;
  } else if (id == "persistent_workers=True") {
    k.plain = id;
    k.transformers = "dataloader_persistent_workers=True (transformers 4.36 or later)";
  } else if (id == "pin_memory=True" || id == "pin_memory=False") {
    k.plain = id;
    k.transformers = "dataloader_" + id;
  } else if (id == "pin_memory=False+PINSCOPE_PIN=1") {
    k.plain = "pin_memory=False";
    k.transformers = "dataloader_pin_memory=False";
    k.also = ", and run under PINSCOPE_PIN=1";
  } else if (id == "batch_size_x2") {
    const std::string twice = batch_size > 0 ? std::to_string(2 * batch_size) : "";
    k.plain = twice.empty() ? "batch_size twice as large"
                            : "batch_size=" + twice + " (from " + std::to_string(batch_size) + ")";
    k.transformers = twice.empty() ? "per_device_train_batch_size twice as large"
                                   : "per_device_train_batch_size=" + twice;
  }
  return k;
}

}  // namespace

std::string PackageOf(const std::string& site) {
  const std::string path = Short(site);
  if (path == site) return "";
  const size_t slash = path.find_first_of("/:");
  return path.substr(0, slash);
}

std::string SetBy(const std::string& site, const std::string& framework) {
  const std::string package = PackageOf(site);
  if (package.empty()) return "";
  if (!framework.empty()) return framework;
  if (package == "lightning" || package == "pytorch_lightning" || package == "lightning_fabric")
    return "lightning";
  return package;  // "transformers", "accelerate", or another library
}

std::string WhereToChange(const model::Change& change, const model::LoaderFacts& loader) {
  if (!loader.hooked || loader.site.empty()) return "";
  if (change.id == "made_once+persistent_workers=True") {
    return "build the DataLoader at " + Short(loader.site) +
           " once, before the epochs, with persistent_workers=True";
  }
  const Knob k = KnobOf(change.id, loader.batch_size);
  if (k.plain.empty()) return "";
  const std::string by = SetBy(loader.site, loader.framework);
  if (by.empty()) {
    // The job's own DataLoader, also under a framework (a Trainer subclass
    // that builds its own): the change's line already names the knob,
    // except the batch size's value.
    return (change.id == "batch_size_x2" ? k.plain + " in " : std::string()) +
           "the DataLoader built at " + loader.site;
  }
  if (by == "transformers") {
    return k.transformers + " in TrainingArguments: the Hugging Face Trainer" +
           (loader.user_site.empty() ? "" : " run from " + Short(loader.user_site)) +
           " builds this DataLoader" + k.also;
  }
  if (by == "lightning") {
    return k.plain +
           " in the DataLoader that train_dataloader() returns (your LightningModule or "
           "LightningDataModule); Lightning rebuilds it with the same arguments at " +
           Short(loader.site) + k.also;
  }
  if (by == "accelerate") {
    if (!loader.user_site.empty()) {
      return k.plain + " in the DataLoader handed to accelerator.prepare() from " +
             Short(loader.user_site) + "; accelerate rebuilds it with the same arguments" + k.also;
    }
    // Which code called prepare() was not recorded: the Hugging Face
    // Trainer does, with its own DataLoader, or the job.
    return k.plain + " in the DataLoader handed to accelerator.prepare(), which rebuilds it at " +
           Short(loader.site) + " (under the Hugging Face Trainer: " + k.transformers +
           " in TrainingArguments)" + k.also;
  }
  return k.plain + " through " + PackageOf(loader.site) + ", which builds this DataLoader at " +
         Short(loader.site) +
         (loader.user_site.empty() ? "" : ", called from " + Short(loader.user_site)) + k.also;
}

}  // namespace pinscope
