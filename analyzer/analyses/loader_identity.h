// Which DataLoader an event of the Python hook belongs to
// (PipelineAnalysis; docs/pipeline-model.md, "Which loader").
//
// The hook names a DataLoader object by Python's id(), which a new
// DataLoader takes over once the old one is freed, and counts epochs per
// object: an epoch 0 is a new object. A new object made at the same site
// with the same settings, once the last one of those has handed out a
// batch, is the same loader made anew for the epoch (a loop that builds
// its DataLoader every epoch): its events go to that loader, marked
// remade. Any other new object at a known id is a loader of its own (the
// id with a generation in its top bits). When ids were taken as they came,
// loaders made one after another (a benchmark over worker counts) read as
// one loader restarted every epoch, and persistent_workers=True was
// advised where it can change nothing (seedbench on the H200, 2026-12-05).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "trace.pb.h"

namespace pinscope {

class LoaderIdentity {
 public:
  // The loader an epoch (LOADER_ITER) belongs to; from here the object's
  // events (Of) go to it.
  uint64_t OfIter(const trace::LoaderEvent& l);
  // The loader of the object the hook named `raw` (raw itself if unseen).
  uint64_t Of(uint64_t raw) const;
  // A __next__ of loader `id`: it has handed out a batch this epoch.
  void Served(uint64_t id);
  // Whether an epoch of loader `id` was a new DataLoader object.
  bool Remade(uint64_t id) const;

 private:
  struct Loader {
    uint64_t id = 0;
    std::string key;      // site and settings
    bool served = false;  // a __next__ since its last epoch began
    bool remade = false;  // an epoch of it was a new DataLoader object
  };
  std::unordered_map<uint64_t, uint64_t> alias_;  // raw id -> loader id
  std::vector<Loader> loaders_;
  std::unordered_map<uint64_t, size_t> index_;  // loader id -> its entry
  uint64_t generations_ = 0;
};

}  // namespace pinscope
