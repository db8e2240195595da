// Address-interval map used for a process's live host allocations and shm
// mappings: non-overlapping [start, end) ranges, each with a value. Lookup of
// the range containing an address is O(log n). Not thread safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

namespace pinscope {

template <typename T>
class IntervalMap {
 public:
  struct Entry {
    uint64_t end = 0;
    T value;
  };
  using Map = std::map<uint64_t, Entry>;

  // One piece removed by Insert or Erase.
  struct Removed {
    uint64_t start;
    uint64_t end;
    T value;
  };

  // Inserts [start, end). Ranges it overlaps are dropped whole (a missed free
  // left them stale) and returned.
  std::vector<Removed> Insert(uint64_t start, uint64_t end, T value) {
    std::vector<Removed> removed;
    if (end <= start) end = start + 1;
    auto it = map_.lower_bound(start);
    if (it != map_.begin()) {
      auto prev = std::prev(it);
      if (prev->second.end > start) it = prev;
    }
    while (it != map_.end() && it->first < end) {
      removed.push_back({it->first, it->second.end, std::move(it->second.value)});
      it = map_.erase(it);
    }
    map_.emplace(start, Entry{end, std::move(value)});
    return removed;
  }

  // The entry containing `address`, or nullptr.
  const T* Find(uint64_t address, uint64_t* start = nullptr, uint64_t* end = nullptr) const {
    auto it = map_.upper_bound(address);
    if (it == map_.begin()) return nullptr;
    --it;
    if (address >= it->second.end) return nullptr;
    if (start != nullptr) *start = it->first;
    if (end != nullptr) *end = it->second.end;
    return &it->second.value;
  }

  // The entry starting exactly at `address`, or nullptr.
  const T* FindExact(uint64_t address) const {
    auto it = map_.find(address);
    return it == map_.end() ? nullptr : &it->second.value;
  }

  // Removes the entry starting exactly at `address`; false if none.
  bool EraseExact(uint64_t address, Removed* removed) {
    auto it = map_.find(address);
    if (it == map_.end()) return false;
    if (removed != nullptr) *removed = {it->first, it->second.end, std::move(it->second.value)};
    map_.erase(it);
    return true;
  }

  // Removes [start, end) from the map, splitting entries that straddle its
  // edges (munmap of part of a mapping). Returns one removed piece per entry
  // it touched; `kept` (if given) receives the value of each remainder left
  // in the map, so the caller can count references.
  std::vector<Removed> EraseRange(uint64_t start, uint64_t end, std::vector<T>* kept = nullptr) {
    std::vector<Removed> removed;
    if (end <= start) end = start + 1;
    auto it = map_.lower_bound(start);
    if (it != map_.begin()) {
      auto prev = std::prev(it);
      if (prev->second.end > start) it = prev;
    }
    while (it != map_.end() && it->first < end) {
      const uint64_t piece_start = it->first;
      const uint64_t piece_end = it->second.end;
      T value = it->second.value;
      it = map_.erase(it);
      if (piece_start < start) {
        map_.emplace(piece_start, Entry{start, value});
        if (kept != nullptr) kept->push_back(value);
      }
      if (piece_end > end) {
        it = map_.emplace(end, Entry{piece_end, value}).first;
        ++it;
        if (kept != nullptr) kept->push_back(value);
      }
      removed.push_back({std::max(piece_start, start), std::min(piece_end, end), std::move(value)});
    }
    return removed;
  }

  // Removes everything, returning all entries.
  std::vector<Removed> Clear() {
    std::vector<Removed> removed;
    removed.reserve(map_.size());
    for (auto& [start, entry] : map_) removed.push_back({start, entry.end, std::move(entry.value)});
    map_.clear();
    return removed;
  }

  size_t size() const { return map_.size(); }
  bool empty() const { return map_.empty(); }
  const Map& entries() const { return map_; }

 private:
  Map map_;
};

}  // namespace pinscope
