// GPU utilization from NVML (issue 16): what the GPU did, at no cost on the
// program's threads. CUPTI's kernel records cost 15-20% of a launch-bound
// step on the H200 (docs/benchmarks.md), and that cost stays after the kind
// is disabled again; NVML's utilization samples ("percent of the sample
// period in which one or more kernels ran", kept by the driver) are read by
// the flusher thread once a period and written as GpuUtilization packets.
// libnvidia-ml is loaded at run time (it ships with the driver, not the
// toolkit); a machine without it records no samples and says so once.
#pragma once

namespace pinscope::shim {

// From the flusher's tick: once this process has used CUDA, starts NVML
// (first call) and writes the samples since the previous call. Never in a
// forked child (NvmlForkChild), never from a program thread.
void NvmlSamplePeriodic();

// At exit, before the exit packet: the last samples.
void NvmlFinish();

// In a forked child: the parent's NVML state is not ours; sampling stays off.
void NvmlForkChild();

}  // namespace pinscope::shim
