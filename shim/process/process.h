// The process layer: what happens to a traced process as a whole - start
// (configuration, run folder, the recorder's header callback), fork (the
// pinning, recorder and stacks handlers in the order they need), exit and
// exec (last device records, counters, the exit packet), and the flusher
// thread that writes buffered packets every PINSCOPE_FLUSH_MS. It ties the
// record, stacks, pin and device layers' process-wide handling together;
// nothing below calls it.
//
// Contract: InitProcess runs from the library constructor, before any hook
// records; the fork handlers are pthread_atfork handlers (no CUDA call in
// them: pinning prepares fork from the fork() hook, pin/pinning.h).
#pragma once

#include <cstdint>

namespace pinscope::shim {

// Reads the configuration, names the run and its folder, and starts the
// recorder. Idempotent. Under secure execution (getauxval(AT_SECURE)) it
// reads nothing and stays passive, saying so once. The run folder is
// opened without following links and refused unless this user owns it and
// no other may write in it (trace files are then created in it with
// openat, 0600).
void InitProcess();
// InitProcess with the secure-execution flag given (tests).
void InitProcessIn(bool secure);

// pthread_atfork handlers (registered by InitProcess).
void ForkPrepare();
void ForkParent();
void ForkChild();

// Last device records, counters and ProcessExit; `how` is a
// fields::ExitHow. After kUnderscoreExit the file is closed.
void FinishProcess(uint32_t how, int status);
// FinishProcess where waiting on a lock could hang the process for ever: a
// signal handler or a hook of this thread was interrupted, and the frame
// below may hold the trace writer's lock, malloc's, or the CUDA driver's.
// Writes only ProcessExit, with try-locks (RecorderFinishFromSignal): no
// last device records, thread samples or counters.
void FinishProcessFromSignal(uint32_t how, int status);

// Recording paused or resumed in this process (PauseRecording) from a
// program thread, its CUDA work done: pausing also ends a device-record
// window open now (CuptiEndWindow), so that none spans the pause. 0 when the
// recorder is now as asked; 1 paused, the window still open (CUPTI's lock
// busy for 100 ms); -1 not recording here (not started, or passive).
int PauseProcessRecording(bool pause);

// One period's work of the flusher thread: idle pinned blocks, device
// records (CuptiFlushPeriodic), the thread sample and counters, then the
// trace buffer written out. The flusher calls it every PINSCOPE_FLUSH_MS;
// tools/bench/device_cost_bench.cc times it on its own thread.
void FlusherTick();

// An exec family call returned (it failed with errno `err`): the process
// goes on, and so does its trace, with a notice saying which exec failed.
void ResumeAfterFailedExec(const char* path, int err);

}  // namespace pinscope::shim
