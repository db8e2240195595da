// A hand-written decoder for the packet kinds a long run is made of (copy,
// sync, alloc, free, shm, device activity, correlation), below
// TraceReader::Next. It exists for speed only (the project reads its trace
// with libprotobuf's generated code otherwise): on the replay benchmark it
// cuts the instructions per packet read from 1,140 to about 840 on the
// copy-heavy run and from 920 to about 580 on the DataLoader mix
// (docs/benchmarks.md, "Hand-decoded hot packets (issue 18)").
// Stateless: safe from several threads on distinct packets.
#pragma once

#include <cstddef>
#include <cstdint>

#include "trace.pb.h"

namespace pinscope {

// Decodes one encoded TracePacket (the bytes after its framing) into
// *packet when it is of a kind decoded here and holds nothing unusual.
// Returns true when it did: *packet is then exactly what
// packet->ParseFromArray(data, size) gives (tests/analyzer/pipeline/
// packet_decoder_test.cc checks that on random and edge-case packets).
// Returns false for anything else (another kind, an unknown field, a field
// with another wire type, a oneof set twice, a non-minimal tag, a malformed
// or truncated varint or length, text beyond ASCII): *packet is then
// unspecified and the caller parses the bytes with libprotobuf.
bool DecodeHotPacket(const uint8_t* data, size_t size, trace::TracePacket* packet);

}  // namespace pinscope
