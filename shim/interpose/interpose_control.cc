// The C ABI for measuring pinscope from inside the traced program: recording
// paused and resumed (process/process.h, PauseProcessRecording).
// tools/bench/turns.py's paired sides call it through ctypes between turns,
// so that one process times its own steps with recording and without
// (docs/benchmarks.md). Exported from libpinscope.so (interpose/pinscope.map:
// pinscope_*); a program without the shim finds no such symbol.
#include "shim/process/process.h"

#define PINSCOPE_EXPORT extern "C" __attribute__((visibility("default")))

// 0 while recording is paused here, else 1: the Python hook reads it
// (ctypes, without a call) and then calls the DataLoader's own methods
// straight, so that a paused turn holds none of pinscope's work.
PINSCOPE_EXPORT int pinscope_recording_on = 1;

// pause != 0: recording stops (hooks pass through as when passive); 0: it
// goes on. 0 when done, 1 paused with a device-record window still open,
// -1 when this process does not record.
PINSCOPE_EXPORT int pinscope_recording_pause(int pause) {
  const int rc = pinscope::shim::PauseProcessRecording(pause != 0);
  if (rc >= 0) __atomic_store_n(&pinscope_recording_on, pause ? 0 : 1, __ATOMIC_RELAXED);
  return rc;
}
