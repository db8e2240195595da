// The lenient parse of text_rescue.h: trace.proto's descriptor copied into a
// private pool with TYPE_STRING turned into TYPE_BYTES (wire-identical, but
// not checked for UTF-8), a DynamicMessage parsed from it, its text fields
// escaped through reflection, and the result serialized and parsed as the
// generated TracePacket. Runs only for a packet the strict parse refused.
#include "analyzer/read/text_rescue.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>

#include <memory>

namespace pinscope {

namespace {

namespace pb = google::protobuf;

// Length of the valid UTF-8 sequence at text[i] (RFC 3629: no overlong
// forms, no surrogates, nothing past U+10FFFF), 0 if it is not one. The same
// rule as shim/record/wire.h's Utf8SeqLen.
size_t Utf8Length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[i + k]); };
  const uint8_t c = byte(0);
  if (c < 0x80) return 1;
  const size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
  if (len == 0 || len > text.size() - i) return 0;
  uint32_t cp = c & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) {
    if ((byte(k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(k) & 0x3F);
  }
  if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
      cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    return 0;
  }
  return len;
}

void MakeBytes(pb::DescriptorProto* message) {
  for (pb::FieldDescriptorProto& field : *message->mutable_field()) {
    if (field.type() == pb::FieldDescriptorProto::TYPE_STRING) {
      field.set_type(pb::FieldDescriptorProto::TYPE_BYTES);
    }
  }
  for (pb::DescriptorProto& nested : *message->mutable_nested_type()) MakeBytes(&nested);
}

// trace.proto with its text fields as bytes, built once.
class LenientSchema {
 public:
  LenientSchema() {
    pb::FileDescriptorProto file;
    trace::TracePacket::descriptor()->file()->CopyTo(&file);
    for (pb::DescriptorProto& message : *file.mutable_message_type()) MakeBytes(&message);
    const pb::FileDescriptor* built = pool_.BuildFile(file);
    if (built != nullptr) {
      const pb::Descriptor* packet =
          pool_.FindMessageTypeByName(trace::TracePacket::descriptor()->full_name());
      if (packet != nullptr) prototype_ = factory_.GetPrototype(packet);
    }
  }
  std::unique_ptr<pb::Message> New() const {
    return std::unique_ptr<pb::Message>(prototype_ != nullptr ? prototype_->New() : nullptr);
  }

 private:
  pb::DescriptorPool pool_;
  pb::DynamicMessageFactory factory_{&pool_};
  const pb::Message* prototype_ = nullptr;
};

int EscapeFields(pb::Message* message) {
  const pb::Reflection* reflection = message->GetReflection();
  std::vector<const pb::FieldDescriptor*> fields;
  reflection->ListFields(*message, &fields);
  int escaped = 0;
  for (const pb::FieldDescriptor* field : fields) {
    if (field->type() == pb::FieldDescriptor::TYPE_MESSAGE) {
      if (field->is_repeated()) {
        for (int i = 0; i < reflection->FieldSize(*message, field); ++i) {
          escaped += EscapeFields(reflection->MutableRepeatedMessage(message, field, i));
        }
      } else {
        escaped += EscapeFields(reflection->MutableMessage(message, field));
      }
      continue;
    }
    if (field->type() != pb::FieldDescriptor::TYPE_BYTES) continue;
    const auto fix = [&](const std::string& value, auto&& set) {
      std::string fixed = EscapeInvalidUtf8(value);
      if (fixed.size() == value.size()) return;  // escaping only ever grows
      set(std::move(fixed));
      ++escaped;
    };
    if (field->is_repeated()) {
      for (int i = 0; i < reflection->FieldSize(*message, field); ++i) {
        fix(reflection->GetRepeatedString(*message, field, i),
            [&](std::string v) { reflection->SetRepeatedString(message, field, i, std::move(v)); });
      }
    } else {
      fix(reflection->GetString(*message, field),
          [&](std::string v) { reflection->SetString(message, field, std::move(v)); });
    }
  }
  return escaped;
}

}  // namespace

std::string EscapeInvalidUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  static constexpr char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < text.size();) {
    const size_t len = Utf8Length(text, i);
    if (len != 0) {
      out.append(text.substr(i, len));
      i += len;
      continue;
    }
    const auto byte = static_cast<uint8_t>(text[i]);
    out += {'\\', 'x', kHex[byte >> 4], kHex[byte & 0xF]};
    ++i;
  }
  return out;
}

bool ParseRescuingText(const uint8_t* data, size_t size, trace::TracePacket* packet, int* escaped) {
  static const LenientSchema schema;
  std::unique_ptr<pb::Message> lenient = schema.New();
  if (lenient == nullptr || !lenient->ParseFromArray(data, static_cast<int>(size))) return false;
  const int changed = EscapeFields(lenient.get());
  if (escaped != nullptr) *escaped = changed;
  std::string wire;
  return lenient->SerializeToString(&wire) && packet->ParseFromString(wire);
}

}  // namespace pinscope
