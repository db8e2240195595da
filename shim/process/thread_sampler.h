// Every thread of this process at one instant (ThreadSample packets): CPU
// time on a core and time waiting for one (/proc/self/task/<tid>/schedstat),
// and page faults (.../stat). Read with open/read/getdents64 into stack
// buffers: no allocation, no stdio. Called from the flusher thread every
// flush period and once at exit; costs a few microseconds per thread.
#pragma once

namespace pinscope::shim {

void WriteThreadSample();

}  // namespace pinscope::shim
