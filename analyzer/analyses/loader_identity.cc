// DataLoader objects to loaders; see loader_identity.h.
#include "analyzer/analyses/loader_identity.h"

namespace pinscope {

uint64_t LoaderIdentity::Of(uint64_t raw) const {
  auto it = alias_.find(raw);
  return it == alias_.end() ? raw : it->second;
}

bool LoaderIdentity::Remade(uint64_t id) const {
  auto it = index_.find(id);
  return it != index_.end() && loaders_[it->second].remade;
}

uint64_t LoaderIdentity::OfIter(const trace::LoaderEvent& l) {
  const uint64_t raw = l.loader_id();
  auto seen = alias_.find(raw);
  if (seen != alias_.end() && l.index() > 0) {  // the object's next epoch
    auto it = index_.find(seen->second);
    if (it != index_.end()) loaders_[it->second].served = false;
    return seen->second;
  }
  const std::string key = l.site() + "|" + std::to_string(l.num_workers()) + "|" +
                          std::to_string(l.batch_size()) + "|" +
                          std::to_string(l.dataset_length()) + "|" +
                          std::to_string(l.pin_memory()) + std::to_string(l.persistent_workers()) +
                          std::to_string(l.iterable()) + "|" + std::to_string(l.prefetch_factor());
  uint64_t id = 0;
  for (Loader& g : loaders_) {
    if (g.key != key || !g.served) continue;
    g.served = false;
    g.remade = true;
    id = g.id;
    break;
  }
  if (id == 0) {
    // Addresses use the low 48 bits; a generation in the top 16 keeps a
    // new loader at a known id apart from every address.
    id = seen == alias_.end() && raw != 0
             ? raw
             : (raw & ((uint64_t{1} << 48) - 1)) | (++generations_ << 48);
    if (loaders_.size() < 4096) {
      index_[id] = loaders_.size();
      loaders_.push_back({id, key, false, false});
    }
  }
  alias_[raw] = id;
  return id;
}

void LoaderIdentity::Served(uint64_t id) {
  if (auto it = index_.find(id); it != index_.end()) loaders_[it->second].served = true;
}

}  // namespace pinscope
