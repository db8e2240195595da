// A hand-written decoder for the packet kinds a long run is made of (copy,
// sync, alloc, free, device activity, correlation), below TraceReader::Next.
// It exists for speed only: libprotobuf's generated parse stays the
// reference and reads every other packet. On the copy-heavy replay of
// docs/benchmarks.md ("Hand-decoded hot packets (issue 18)") it takes the
// replay from 5.6 to over 6 M events per CPU second.
// Not thread-safe per packet; stateless otherwise.
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
// or truncated varint or length): *packet is then unspecified and the
// caller parses the bytes with libprotobuf.
bool DecodeHotPacket(const uint8_t* data, size_t size, trace::TracePacket* packet);

}  // namespace pinscope
