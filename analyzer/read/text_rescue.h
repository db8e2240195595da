// Rescue of packets whose text fields hold invalid UTF-8. trace.proto's text
// fields are proto3 `string`s, which libprotobuf refuses to parse unless they
// are UTF-8; a writer that copies argv, paths and names as it finds them
// (an older shim, another tool) made one bad byte in a command line lose the
// whole file ("protobuf parse failed" on its header). The reader retries
// such a packet here: parsed against a copy of the schema with every
// `string` read as `bytes`, each invalid byte escaped as \xHH (as the shim
// now writes them, shim/record/wire.h), then parsed for real.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "trace.pb.h"

namespace pinscope {

// `text` with each byte that is not part of a valid UTF-8 sequence written as
// the four characters \xHH (lower-case hex); valid text is returned as is.
std::string EscapeInvalidUtf8(std::string_view text);

// Parses [data, data + size) into *packet with every text field made valid
// UTF-8 by EscapeInvalidUtf8. Returns false if the bytes do not parse even so
// (real corruption). *escaped, if given, gets the number of fields changed.
bool ParseRescuingText(const uint8_t* data, size_t size, trace::TracePacket* packet,
                       int* escaped = nullptr);

}  // namespace pinscope
