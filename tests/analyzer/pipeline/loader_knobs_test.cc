// Where the report says to make a DataLoader change (analyzer/report/
// loader_knobs.h): the construction site the hook recorded, and the knob by
// the name of the framework that built the DataLoader.
#include "analyzer/report/loader_knobs.h"

#include <gtest/gtest.h>

namespace pinscope {
namespace {

model::Change Named(const std::string& id) {
  model::Change c;
  c.id = id;
  return c;
}

model::LoaderFacts Loader(const std::string& site, const std::string& user_site = "",
                          const std::string& framework = "", int batch_size = 64) {
  model::LoaderFacts l;
  l.hooked = l.present = true;
  l.site = site;
  l.user_site = user_site;
  l.framework = framework;
  l.batch_size = batch_size;
  return l;
}

constexpr const char* kPkgs = "/venv/lib/python3.12/site-packages/";

TEST(LoaderKnobs, TheJobsOwnDataLoader) {
  const auto l = Loader("/src/train.py:42");
  // The change's own line names the knob ("num_workers=8 in the
  // DataLoader"): where is the line.
  EXPECT_EQ(WhereToChange(Named("num_workers=8"), l), "the DataLoader built at /src/train.py:42");
  EXPECT_EQ(WhereToChange(Named("pin_memory=False+PINSCOPE_PIN=1"), l),
            "the DataLoader built at /src/train.py:42");
  EXPECT_EQ(WhereToChange(Named("batch_size_x2"), l),
            "batch_size=128 (from 64) in the DataLoader built at /src/train.py:42");
  EXPECT_EQ(WhereToChange(Named("made_once+persistent_workers=True"), l),
            "build the DataLoader at /src/train.py:42 once, before the epochs, with "
            "persistent_workers=True");
  // Not DataLoader settings: pinscope's own variables, code elsewhere.
  for (const char* id :
       {"PINSCOPE_PIN=1", "PINSCOPE_PIN_BUDGET", "no_per_step_sync", "batch_bytes_half"})
    EXPECT_EQ(WhereToChange(Named(id), l), "") << id;
  // No site recorded (no hook, or a hook that could not tell): nothing said.
  EXPECT_EQ(WhereToChange(Named("num_workers=8"), Loader("")), "");
  model::LoaderFacts inferred = l;
  inferred.hooked = false;
  EXPECT_EQ(WhereToChange(Named("num_workers=8"), inferred), "");
}

TEST(LoaderKnobs, TheHuggingFaceTrainerTakesTrainingArguments) {
  const auto l = Loader(std::string(kPkgs) + "accelerate/data_loader.py:441", "/src/run.py:51",
                        "transformers", 0);
  EXPECT_EQ(WhereToChange(Named("num_workers=6"), l),
            "dataloader_num_workers=6 in TrainingArguments: the Hugging Face Trainer run from "
            "/src/run.py:51 builds this DataLoader");
  EXPECT_EQ(WhereToChange(Named("pin_memory=False"), l),
            "dataloader_pin_memory=False in TrainingArguments: the Hugging Face Trainer run from "
            "/src/run.py:51 builds this DataLoader");
  EXPECT_EQ(WhereToChange(Named("persistent_workers=True"), l),
            "dataloader_persistent_workers=True (transformers 4.36 or later) in "
            "TrainingArguments: the Hugging Face Trainer run from /src/run.py:51 builds this "
            "DataLoader");
  // A Trainer subclass that builds its own DataLoader: the job's line.
  EXPECT_EQ(WhereToChange(Named("num_workers=6"), Loader("/src/run.py:20", "", "transformers")),
            "the DataLoader built at /src/run.py:20");
  EXPECT_EQ(WhereToChange(Named("batch_size_x2"), Loader(l.site, "", "transformers", 32)),
            "per_device_train_batch_size=64 in TrainingArguments: the Hugging Face Trainer "
            "builds this DataLoader");
}

TEST(LoaderKnobs, LightningAccelerateAndOtherLibraries) {
  // Lightning rebuilt the DataLoader (a distributed sampler): the job's
  // train_dataloader() is where its arguments come from.
  EXPECT_EQ(WhereToChange(Named("num_workers=4"),
                          Loader(std::string(kPkgs) + "lightning/pytorch/utilities/data.py:136",
                                 "/src/fit.py:9", "lightning")),
            "num_workers=4 in the DataLoader that train_dataloader() returns (your "
            "LightningModule or LightningDataModule); Lightning rebuilds it with the same "
            "arguments at lightning/pytorch/utilities/data.py:136");
  // Built by the job inside Lightning's fit: the job's own line.
  EXPECT_EQ(WhereToChange(Named("num_workers=4"), Loader("/src/model.py:30", "", "lightning")),
            "the DataLoader built at /src/model.py:30");
  EXPECT_EQ(WhereToChange(Named("num_workers=4"),
                          Loader(std::string(kPkgs) + "accelerate/data_loader.py:370",
                                 "/src/loop.py:12", "accelerate")),
            "num_workers=4 in the DataLoader handed to accelerator.prepare() from "
            "/src/loop.py:12; accelerate rebuilds it with the same arguments");
  EXPECT_EQ(WhereToChange(Named("num_workers=4"),
                          Loader("/usr/lib/python3/dist-packages/timm/data/loader.py:300",
                                 "/src/train.py:77")),
            "num_workers=4 through timm, which builds this DataLoader at "
            "timm/data/loader.py:300, called from /src/train.py:77");
}

// Traces from a hook before the framework was recorded: the package of the
// site names it.
TEST(LoaderKnobs, AnOlderTraceNamesTheFrameworkFromTheSitesPackage) {
  EXPECT_EQ(WhereToChange(Named("num_workers=4"),
                          Loader(std::string(kPkgs) + "accelerate/data_loader.py:441")),
            "num_workers=4 in the DataLoader handed to accelerator.prepare(), which rebuilds it "
            "at accelerate/data_loader.py:441 (under the Hugging Face Trainer: "
            "dataloader_num_workers=4 in TrainingArguments)");
  EXPECT_EQ(PackageOf(std::string(kPkgs) + "transformers/trainer.py:852"), "transformers");
  EXPECT_EQ(PackageOf("/src/train.py:42"), "");
}

}  // namespace
}  // namespace pinscope
