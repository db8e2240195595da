// Canonical text of a Perfetto trace through pinscope's schema subset; the
// rules checked are those trace_processor applies to TrackEvent traces.
// Keep the text format in step with perfetto_schema_check.py.
#include "perfetto_dump.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

#include "perfetto_subset.pb.h"

namespace pinscope::testing {

namespace {

using perfetto::DebugAnnotation;
using perfetto::TrackDescriptor;
using perfetto::TrackEvent;
using PerfettoPacket = perfetto::TracePacket;

std::string Quote(const std::string& text) { return "\"" + text + "\""; }

std::string Double(double value) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.6g", value);
  return text;
}

std::string List(const google::protobuf::RepeatedPtrField<std::string>& items) {
  std::string text = "[";
  for (int i = 0; i < items.size(); ++i) text += (i ? "," : "") + Quote(items[i]);
  return text + "]";
}

std::string Annotation(const DebugAnnotation& annotation) {
  std::string value;
  switch (annotation.value_case()) {
    case DebugAnnotation::kBoolValue:
      value = annotation.bool_value() ? "true" : "false";
      break;
    case DebugAnnotation::kUintValue:
      value = std::to_string(annotation.uint_value());
      break;
    case DebugAnnotation::kIntValue:
      value = std::to_string(annotation.int_value());
      break;
    case DebugAnnotation::kDoubleValue:
      value = Double(annotation.double_value());
      break;
    case DebugAnnotation::kStringValue:
      value = Quote(annotation.string_value());
      break;
    default:
      value = "?";
  }
  return annotation.name() + "=" + value;
}

struct Track {
  size_t order = 0;
  TrackDescriptor descriptor;
};

struct Item {
  uint64_t ts = 0;
  size_t file_order = 0;
  TrackEvent event;
};

}  // namespace

PerfettoDump DumpPerfetto(const std::string& bytes) {
  PerfettoDump dump;
  perfetto::Trace trace;
  if (!trace.ParseFromString(bytes)) {
    dump.errors.push_back("not a Trace message");
    return dump;
  }
  dump.packets = static_cast<size_t>(trace.packet_size());
  std::map<uint64_t, Track> tracks;
  std::map<uint64_t, std::vector<Item>> events;  // by track uuid
  uint32_t sequence = 0;
  // Interned names of the sequence, by iid (events, annotations, categories).
  std::map<uint64_t, std::string> event_names, annotation_names, category_names;
  const auto intern = [&](auto& table, const auto& entries, const std::string& where,
                          const char* what) {
    for (const auto& entry : entries) {
      if (entry.iid() == 0) dump.errors.push_back(where + what + " iid 0");
      if (!table.emplace(entry.iid(), entry.name()).second) {
        dump.errors.push_back(where + what + " iid " + std::to_string(entry.iid()) +
                              " interned again");
      }
    }
  };
  std::map<std::string, size_t> name_strings;  // TrackEvent names sent as strings
  for (int i = 0; i < trace.packet_size(); ++i) {
    PerfettoPacket& packet = *trace.mutable_packet(i);
    const std::string where = "packet " + std::to_string(i) + ": ";
    if (!packet.has_trusted_packet_sequence_id() || packet.trusted_packet_sequence_id() == 0) {
      dump.errors.push_back(where + "no trusted_packet_sequence_id");
    } else if (i == 0) {
      sequence = packet.trusted_packet_sequence_id();
    } else if (packet.trusted_packet_sequence_id() != sequence) {
      dump.errors.push_back(where + "another sequence id");
    }
    if (i == 0 && (packet.sequence_flags() & PerfettoPacket::SEQ_INCREMENTAL_STATE_CLEARED) == 0) {
      dump.errors.push_back(where + "first packet does not clear the incremental state");
    }
    if (i > 0 && (packet.sequence_flags() & PerfettoPacket::SEQ_INCREMENTAL_STATE_CLEARED) != 0) {
      dump.errors.push_back(where + "incremental state cleared again");
    }
    if (packet.has_interned_data()) {
      if ((packet.sequence_flags() & (PerfettoPacket::SEQ_NEEDS_INCREMENTAL_STATE |
                                      PerfettoPacket::SEQ_INCREMENTAL_STATE_CLEARED)) == 0) {
        dump.errors.push_back(where + "interned data without incremental state flags");
      }
      intern(event_names, packet.interned_data().event_names(), where, "event name");
      intern(annotation_names, packet.interned_data().debug_annotation_names(), where,
             "annotation name");
      intern(category_names, packet.interned_data().event_categories(), where, "category");
    }
    if (packet.has_track_descriptor()) {
      const TrackDescriptor& descriptor = packet.track_descriptor();
      if (descriptor.uuid() == 0) dump.errors.push_back(where + "track uuid 0");
      if (descriptor.has_parent_uuid() && tracks.count(descriptor.parent_uuid()) == 0) {
        dump.errors.push_back(where + "parent track not described yet");
      }
      if (descriptor.has_thread()) {
        auto parent = tracks.find(descriptor.parent_uuid());
        if (parent == tracks.end() || !parent->second.descriptor.has_process() ||
            parent->second.descriptor.process().pid() != descriptor.thread().pid()) {
          dump.errors.push_back(where + "thread track's parent is not its process");
        }
      }
      auto [it, inserted] = tracks.try_emplace(descriptor.uuid());
      if (inserted) {
        it->second.order = tracks.size();
      } else if (it->second.descriptor.has_thread() != descriptor.has_thread() ||
                 it->second.descriptor.has_process() != descriptor.has_process() ||
                 (descriptor.has_thread() &&
                  it->second.descriptor.thread().tid() != descriptor.thread().tid())) {
        dump.errors.push_back(where + "track described again as another kind");
      }
      it->second.descriptor = descriptor;
    } else if (packet.has_track_event()) {
      TrackEvent& event = *packet.mutable_track_event();
      // Resolve interned names into the strings they stand for.
      const bool interned = event.has_name_iid() || event.category_iids_size() > 0;
      if (interned &&
          (packet.sequence_flags() & PerfettoPacket::SEQ_NEEDS_INCREMENTAL_STATE) == 0) {
        dump.errors.push_back(where + "interned ids without SEQ_NEEDS_INCREMENTAL_STATE");
      }
      if (event.has_name()) ++name_strings[event.name()];
      if (event.has_name_iid()) {
        auto name = event_names.find(event.name_iid());
        if (name == event_names.end()) dump.errors.push_back(where + "unknown event name iid");
        event.set_name(name == event_names.end() ? "?" : name->second);
      }
      for (uint64_t iid : event.category_iids()) {
        auto name = category_names.find(iid);
        if (name == category_names.end()) dump.errors.push_back(where + "unknown category iid");
        event.add_categories(name == category_names.end() ? "?" : name->second);
      }
      event.clear_category_iids();
      for (DebugAnnotation& annotation : *event.mutable_debug_annotations()) {
        if (!annotation.has_name_iid()) continue;
        auto name = annotation_names.find(annotation.name_iid());
        if (name == annotation_names.end()) {
          dump.errors.push_back(where + "unknown annotation name iid");
        }
        annotation.set_name(name == annotation_names.end() ? "?" : name->second);
      }
      auto it = tracks.find(event.track_uuid());
      if (it == tracks.end()) {
        dump.errors.push_back(where + "event on a track not described yet");
        continue;
      }
      if (event.type() == TrackEvent::TYPE_COUNTER && !it->second.descriptor.has_counter()) {
        dump.errors.push_back(where + "counter value on a non-counter track");
      }
      if (event.type() != TrackEvent::TYPE_COUNTER && it->second.descriptor.has_counter()) {
        dump.errors.push_back(where + "slice on a counter track");
      }
      events[event.track_uuid()].push_back({packet.timestamp(), static_cast<size_t>(i), event});
    } else {
      dump.errors.push_back(where + "neither a track descriptor nor a track event");
    }
  }

  std::vector<const std::pair<const uint64_t, Track>*> ordered;
  for (const auto& entry : tracks) ordered.push_back(&entry);
  std::sort(ordered.begin(), ordered.end(),
            [](auto* a, auto* b) { return a->second.order < b->second.order; });
  const auto label = [&](uint64_t uuid) -> std::string {
    auto it = tracks.find(uuid);
    if (it == tracks.end()) return "-";
    const TrackDescriptor& d = it->second.descriptor;
    if (d.has_process()) return "process " + std::to_string(d.process().pid());
    if (d.has_thread()) {
      return "thread " + std::to_string(d.thread().pid()) + "/" + std::to_string(d.thread().tid());
    }
    return Quote(d.name());
  };

  std::string& out = dump.text;
  out += "tracks\n";
  for (const auto* entry : ordered) {
    const TrackDescriptor& d = entry->second.descriptor;
    if (d.has_process()) {
      const perfetto::ProcessDescriptor& p = d.process();
      out += "  process pid=" + std::to_string(p.pid()) + " name=" + Quote(p.process_name()) +
             " cmdline=" + List(p.cmdline()) + " labels=" + List(p.process_labels()) +
             " start=" + std::to_string(p.start_timestamp_ns()) + "\n";
    } else if (d.has_thread()) {
      out += "  thread pid=" + std::to_string(d.thread().pid()) +
             " tid=" + std::to_string(d.thread().tid()) +
             " name=" + Quote(d.thread().thread_name()) + " parent=" + label(d.parent_uuid()) +
             "\n";
    } else if (d.has_counter()) {
      out += "  counter name=" + Quote(d.name()) +
             " unit=" + perfetto::CounterDescriptor::Unit_Name(d.counter().unit()) +
             " parent=" + label(d.parent_uuid()) + "\n";
    } else {
      out += "  track name=" + Quote(d.name()) + " parent=" + label(d.parent_uuid()) + "\n";
    }
  }

  for (const auto& [name, count] : name_strings) {
    if (count > 1)
      dump.errors.push_back("name \"" + name + "\" sent as a string " + std::to_string(count) +
                            " times, not interned");
  }
  std::string slices = "slices\n";
  std::string counters = "counters\n";
  // Flow ids -> the slice that started them ("label ts=N"), and the arrows.
  std::map<uint64_t, std::string> flow_starts;
  std::vector<std::string> flow_lines;
  for (const auto* entry : ordered) {
    auto found = events.find(entry->first);
    if (found == events.end()) continue;
    std::vector<Item>& items = found->second;
    // trace_processor sorts by time; equal times keep the file order.
    std::stable_sort(items.begin(), items.end(),
                     [](const Item& a, const Item& b) { return a.ts < b.ts; });
    std::vector<const Item*> open;
    std::vector<std::pair<const Item*, uint64_t>> done;  // begin, duration
    for (const Item& item : items) {
      switch (item.event.type()) {
        case TrackEvent::TYPE_SLICE_BEGIN:
          open.push_back(&item);
          break;
        case TrackEvent::TYPE_SLICE_END:
          if (open.empty()) {
            dump.errors.push_back("END without BEGIN on " + label(entry->first));
            break;
          }
          done.emplace_back(open.back(), item.ts - open.back()->ts);
          open.pop_back();
          break;
        case TrackEvent::TYPE_COUNTER:
          counters +=
              "  " + label(entry->first) + " ts=" + std::to_string(item.ts) + " value=" +
              (item.event.has_double_counter_value() ? Double(item.event.double_counter_value())
                                                     : std::to_string(item.event.counter_value())) +
              "\n";
          ++dump.counter_values;
          break;
        default:
          dump.errors.push_back("unexpected event type on " + label(entry->first));
      }
    }
    if (!open.empty()) dump.errors.push_back("unclosed slice on " + label(entry->first));
    std::sort(done.begin(), done.end(), [](const auto& a, const auto& b) {
      return std::tie(a.first->ts, a.first->file_order) <
             std::tie(b.first->ts, b.first->file_order);
    });
    for (const auto& [begin, duration] : done) {
      const TrackEvent& event = begin->event;
      slices += "  " + label(entry->first) + " ts=" + std::to_string(begin->ts) +
                " dur=" + std::to_string(duration) + " " + Quote(event.name()) +
                " categories=" + List(event.categories()) + "\n";
      for (const DebugAnnotation& annotation : event.debug_annotations()) {
        slices += "    " + Annotation(annotation) + "\n";
      }
      ++dump.slices;
    }
  }
  // Flows in trace_processor's v1 sense, resolved once all slices are known:
  // a flow id's start is the slice listing it in flow_ids; the slice listing
  // it in terminating_flow_ids is the end.
  std::vector<std::tuple<uint64_t, size_t, std::string, const TrackEvent*>> flow_events;
  for (const auto* entry : ordered) {
    auto found = events.find(entry->first);
    if (found == events.end()) continue;
    for (const Item& item : found->second) {
      if (item.event.type() != TrackEvent::TYPE_SLICE_BEGIN) continue;
      flow_events.emplace_back(item.ts, item.file_order,
                               label(entry->first) + " ts=" + std::to_string(item.ts), &item.event);
    }
  }
  std::sort(flow_events.begin(), flow_events.end(), [](const auto& a, const auto& b) {
    return std::tie(std::get<0>(a), std::get<1>(a)) < std::tie(std::get<0>(b), std::get<1>(b));
  });
  for (const auto& [ts, order, where, event] : flow_events) {
    for (uint64_t id : event->flow_ids()) {
      if (!flow_starts.emplace(id, where).second) {
        dump.errors.push_back("flow " + std::to_string(id) + " started twice");
      }
    }
    for (uint64_t id : event->terminating_flow_ids()) {
      auto start = flow_starts.find(id);
      if (start == flow_starts.end()) {
        dump.errors.push_back("flow " + std::to_string(id) + " ends without a start");
        continue;
      }
      flow_lines.push_back("  " + start->second + " -> " + where + "\n");
      flow_starts.erase(start);
      ++dump.flows;
    }
  }
  std::string flows = "flows " + std::to_string(flow_lines.size()) + "\n";
  // The full list only for small traces (the checked-in scenario).
  if (flow_lines.size() <= 64) {
    for (const std::string& line : flow_lines) flows += line;
  }
  out += slices + counters + flows;
  return dump;
}

}  // namespace pinscope::testing
