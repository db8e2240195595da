// Python frames at a recorded event, interned as PythonFrame ids
// (stack_intern.h). Nothing is linked against Python: what is needed is
// resolved at run time with dlsym, so one build serves 3.10 to 3.13.
//
// Two ways to read them (docs/stacks.md):
//  - Frame walk (3.10-3.13): reads the calling thread's own frame chain from
//    the interpreter's structures, with per-version field offsets. It works
//    whether or not the thread holds the GIL, which matters because PyTorch
//    releases the GIL around its operators (a tensor's allocation or copy runs
//    without it). Safe without the GIL because only the owning thread changes
//    its frame chain, and this thread is inside the hook: the walk reads,
//    never writes, takes no reference and calls no Python code (line numbers
//    come from PyCode_Addr2Line / 3.10's PyFrame_GetLineNumber, which only
//    read the code object). The first walk of a process reads through
//    process_vm_readv and checks the object types, so a layout that does not
//    match turns the walk off instead of faulting.
//  - C API (any other version): only when the thread holds the GIL, with the
//    public frame API (PyEval_GetFrame, PyFrame_GetBack, ...), the cyclic GC
//    held off (materializing frame objects allocates; on <= 3.11 that may run
//    a collection and finalizers) and the thread's exception state kept.
//
// Contract: never takes the GIL, never runs Python code, does not allocate
// through malloc on the frame-walk path.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pinscope::shim::python {

// Resolves what is needed in this process. False (and Capture returns 0)
// when the process has no Python, or one older than 3.10.
bool Init();
bool Available();
// True when the frame walk is in use (else the GIL-only C API path).
bool FrameWalk();

// The calling thread's Python frames, innermost first, as interned
// PythonFrame ids: at most `max`; *truncated when more frames were left out.
// 0 when the thread runs no Python code, Python is not initialized or is
// finalizing, or the process has no Python. `where`, if given: a hash of
// the frames' instructions (the frame walk's; 0 on the C API path), which
// tells apart two calls on one line that the ids (file, function, line) do
// not: the stack cache's key (stacks.cc).
size_t Capture(uint64_t* ids, size_t max, bool* truncated, uint64_t* where = nullptr);

// The stack cache's key of the same frames, cheaper than Capture's `where`:
// on 3.11+ what each frame holds (its code object's address and its
// instruction), no field of the code objects, no names, no frame id
// tables. Fills *count (the frames on the thread's chain, at most `max`;
// Capture may leave out one being set up, or on 3.13 one without a code
// object: the count is part of the key only), *truncated and *key, and
// returns true; false when the frame walk is not in use yet (its first,
// careful walk has not run) or at all: Capture's `where` then.
bool CaptureKey(size_t max, size_t* count, bool* truncated, uint64_t* key);

}  // namespace pinscope::shim::python
