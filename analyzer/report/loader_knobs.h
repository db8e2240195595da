// Where a DataLoader change is made in the job's code: the DataLoader's
// construction site as the Python hook recorded it, and the knob by the name
// the framework that built it uses (the Hugging Face Trainer's
// TrainingArguments, Lightning's train_dataloader(), accelerate's prepare).
// docs/report.md, "Where to change it".
#pragma once

#include <string>

#include "analyzer/model/pipeline_model.h"

namespace pinscope {

// One sentence for a person ("the DataLoader built at train.py:42"), or ""
// when the change is not a DataLoader setting or the site is not known.
std::string WhereToChange(const model::Change& change, const model::LoaderFacts& loader);

// The installed package a file belongs to ("transformers" for
// .../site-packages/transformers/trainer.py), "" for the job's own code.
std::string PackageOf(const std::string& site);

// Who sets the arguments of the DataLoader built at `site` (the hook's
// framework, "" when not recorded): "" the job's own DataLoader call (also
// under a framework: a Trainer subclass that builds its own),
// "transformers" (the Hugging Face Trainer: TrainingArguments'
// dataloader_* fields), "lightning", "accelerate", or the name of the
// package that built it. A trace from a hook before the framework was
// recorded: the site's package names it.
std::string SetBy(const std::string& site, const std::string& framework);

}  // namespace pinscope
