// Compile-time checks of the shim's hand-written encoder against the
// generated code of proto/trace.proto: every field number of
// shim/record/trace_fields.h and every enum value equals the schema's, and
// the shim's enums list every value the schema has. The runtime round trip
// is wire_roundtrip_test.cc.
#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include "shim/base/own_cost.h"
#include "shim/record/trace_fields.h"
#include "trace.pb.h"

namespace {

namespace pt = pinscope::trace;
namespace f = pinscope::shim::fields;

// --- compile-time: field numbers -------------------------------------------

#define FIELD(ns_const, Msg, Name) \
  static_assert(ns_const == pt::Msg::k##Name##FieldNumber, #Msg "." #Name)

FIELD(f::kTracePacket, Trace, Packet);

FIELD(f::packet::kTimestamp, TracePacket, TimestampNs);
FIELD(f::packet::kTid, TracePacket, Tid);
FIELD(f::packet::kHeader, TracePacket, Header);
FIELD(f::packet::kCopy, TracePacket, Copy);
FIELD(f::packet::kSync, TracePacket, Sync);
FIELD(f::packet::kAlloc, TracePacket, Alloc);
FIELD(f::packet::kFree, TracePacket, Free);
FIELD(f::packet::kShm, TracePacket, Shm);
FIELD(f::packet::kInternedString, TracePacket, InternedString);
FIELD(f::packet::kStack, TracePacket, Stack);
FIELD(f::packet::kPythonFrame, TracePacket, PythonFrame);
FIELD(f::packet::kModule, TracePacket, Module);
FIELD(f::packet::kDevice, TracePacket, Device);
FIELD(f::packet::kCorrelation, TracePacket, Correlation);
FIELD(f::packet::kPin, TracePacket, Pin);
FIELD(f::packet::kThread, TracePacket, Thread);
FIELD(f::packet::kNotice, TracePacket, Notice);
FIELD(f::packet::kExit, TracePacket, Exit);
FIELD(f::packet::kCuda, TracePacket, Cuda);
FIELD(f::packet::kCounters, TracePacket, Counters);
FIELD(f::packet::kRecording, TracePacket, Recording);
FIELD(f::packet::kThreadSample, TracePacket, ThreadSample);
FIELD(f::packet::kLoader, TracePacket, Loader);

FIELD(f::usage::kUserNs, ThreadUsage, UserNs);
FIELD(f::usage::kSysNs, ThreadUsage, SysNs);
FIELD(f::usage::kMinorFaults, ThreadUsage, MinorFaults);
FIELD(f::usage::kMajorFaults, ThreadUsage, MajorFaults);
FIELD(f::usage::kCpuNs, ThreadUsage, CpuNs);
FIELD(f::copy::kUsageEnter, CopyEvent, UsageEnter);
FIELD(f::copy::kUsageExit, CopyEvent, UsageExit);
FIELD(f::sync::kUsageEnter, SyncEvent, UsageEnter);
FIELD(f::sync::kUsageExit, SyncEvent, UsageExit);
FIELD(f::shm::kUsage, ShmEvent, Usage);
FIELD(f::thread_sample::kThreads, ThreadSample, Threads);
FIELD(f::thread_sample::entry::kTid, ThreadSample::Entry, Tid);
FIELD(f::thread_sample::entry::kCpuNs, ThreadSample::Entry, CpuNs);
FIELD(f::thread_sample::entry::kRunqueueNs, ThreadSample::Entry, RunqueueNs);
FIELD(f::thread_sample::entry::kMinorFaults, ThreadSample::Entry, MinorFaults);
FIELD(f::thread_sample::entry::kMajorFaults, ThreadSample::Entry, MajorFaults);
FIELD(f::loader::kKind, LoaderEvent, Kind);
FIELD(f::loader::kLoaderId, LoaderEvent, LoaderId);
FIELD(f::loader::kEnd, LoaderEvent, EndNs);
FIELD(f::loader::kIndex, LoaderEvent, Index);
FIELD(f::loader::kUsageBegin, LoaderEvent, UsageBegin);
FIELD(f::loader::kUsageEnd, LoaderEvent, UsageEnd);
FIELD(f::loader::kNumWorkers, LoaderEvent, NumWorkers);
FIELD(f::loader::kPinMemory, LoaderEvent, PinMemory);
FIELD(f::loader::kPrefetchFactor, LoaderEvent, PrefetchFactor);
FIELD(f::loader::kPersistentWorkers, LoaderEvent, PersistentWorkers);
FIELD(f::loader::kBatchSize, LoaderEvent, BatchSize);
FIELD(f::loader::kDatasetLength, LoaderEvent, DatasetLength);
FIELD(f::loader::kIterable, LoaderEvent, Iterable);
FIELD(f::loader::kSite, LoaderEvent, Site);
FIELD(f::loader::kWorkerId, LoaderEvent, WorkerId);
FIELD(f::loader::kBatchSamples, LoaderEvent, BatchSamples);

FIELD(f::header::kFormatVersion, ProcessHeader, FormatVersion);
FIELD(f::header::kRunId, ProcessHeader, RunId);
FIELD(f::header::kPid, ProcessHeader, Pid);
FIELD(f::header::kPpid, ProcessHeader, Ppid);
FIELD(f::header::kOrigin, ProcessHeader, Origin);
FIELD(f::header::kCmdline, ProcessHeader, Cmdline);
FIELD(f::header::kExe, ProcessHeader, Exe);
FIELD(f::header::kHostname, ProcessHeader, Hostname);
FIELD(f::header::kStartWall, ProcessHeader, StartWallNs);
FIELD(f::header::kStartMono, ProcessHeader, StartMonoNs);
FIELD(f::header::kHost, ProcessHeader, Host);
FIELD(f::header::kConfig, ProcessHeader, Config);
FIELD(f::header::kShimVersion, ProcessHeader, ShimVersion);
FIELD(f::header::kHelper, ProcessHeader, Helper);
FIELD(f::header::kParentPid, ProcessHeader, ParentPid);
FIELD(f::header::kRank, ProcessHeader, Rank);
FIELD(f::rank::kRank, RankLabel, Rank);
FIELD(f::rank::kLocalRank, RankLabel, LocalRank);
FIELD(f::rank::kWorldSize, RankLabel, WorldSize);
FIELD(f::rank::kGroupRank, RankLabel, GroupRank);
FIELD(f::rank::kLocalWorldSize, RankLabel, LocalWorldSize);

FIELD(f::host::kLogical, HostFacts, LogicalCores);
FIELD(f::host::kPhysical, HostFacts, PhysicalCores);
FIELD(f::host::kAffinity, HostFacts, AffinityCores);
FIELD(f::host::kCgroupQuota, HostFacts, CgroupCpuQuotaMillicores);
FIELD(f::host::kRam, HostFacts, RamBytes);
FIELD(f::host::kCgroupMem, HostFacts, CgroupMemoryLimitBytes);
FIELD(f::host::kShmCapacity, HostFacts, ShmCapacityBytes);
FIELD(f::host::kShmFree, HostFacts, ShmFreeBytes);
FIELD(f::host::kGpuNames, HostFacts, GpuNames);
FIELD(f::host::kPcieSpeed, HostFacts, PcieLinkSpeedGtsX10);
FIELD(f::host::kPcieWidth, HostFacts, PcieLinkWidth);
FIELD(f::host::kKernel, HostFacts, KernelRelease);
FIELD(f::host::kLibc, HostFacts, LibcVersion);
FIELD(f::host::kMemlock, HostFacts, MemlockLimitBytes);

FIELD(f::config::kTraceMin, ShimConfig, TraceMinBytes);
FIELD(f::config::kPinMode, ShimConfig, PinMode);
FIELD(f::config::kPinMin, ShimConfig, PinMinBytes);
FIELD(f::config::kPinBudget, ShimConfig, PinBudgetBytes);
FIELD(f::config::kStackDepth, ShimConfig, StackDepth);
FIELD(f::config::kCupti, ShimConfig, Cupti);
FIELD(f::config::kFlushMs, ShimConfig, FlushPeriodMs);

FIELD(f::cuda::kPath, CudaRuntimeInfo, RuntimePath);
FIELD(f::cuda::kRuntimeVersion, CudaRuntimeInfo, RuntimeVersion);
FIELD(f::cuda::kDriverVersion, CudaRuntimeInfo, DriverVersion);
FIELD(f::cuda::kDeviceCount, CudaRuntimeInfo, DeviceCount);
FIELD(f::cuda::kDeviceNames, CudaRuntimeInfo, DeviceNames);

FIELD(f::thread::kTid, ThreadInfo, Tid);
FIELD(f::thread::kName, ThreadInfo, Name);

FIELD(f::notice::kSeverity, Notice, Severity);
FIELD(f::notice::kCode, Notice, Code);
FIELD(f::notice::kText, Notice, Text);

FIELD(f::exit::kHow, ProcessExit, How);
FIELD(f::exit::kStatus, ProcessExit, Status);
FIELD(f::exit::kDropped, ProcessExit, DroppedEvents);

FIELD(f::counters::kCopies, Counters, Copies);
FIELD(f::counters::kAllocsRecorded, Counters, AllocsRecorded);
FIELD(f::counters::kAllocsSeen, Counters, AllocsSeen);
FIELD(f::counters::kBytesWritten, Counters, BytesWritten);
FIELD(f::counters::kDropped, Counters, DroppedEvents);
FIELD(f::counters::kPinnedBytes, Counters, PinnedBytes);
FIELD(f::counters::kStacksCaptured, Counters, StacksCaptured);
FIELD(f::counters::kStackCaptureNs, Counters, StackCaptureNs);
FIELD(f::counters::kHookCalls, Counters, HookCalls);
FIELD(f::counters::kHookNs, Counters, HookNs);
FIELD(f::counters::kOwnThreadsCpuNs, Counters, OwnThreadsCpuNs);
FIELD(f::counters::kHookKinds, Counters, HookKinds);
FIELD(f::hook_kind_cost::kKind, HookKindCost, Kind);
FIELD(f::hook_kind_cost::kCalls, HookKindCost, Calls);
FIELD(f::hook_kind_cost::kNs, HookKindCost, Ns);

FIELD(f::recording::kKernels, DeviceRecording, Kernels);
FIELD(f::recording::kReason, DeviceRecording, Reason);
FIELD(f::recording::kKernelRate, DeviceRecording, KernelRate);
FIELD(f::recording::kPlannedNs, DeviceRecording, PlannedNs);

FIELD(f::copy::kApi, CopyEvent, Api);
FIELD(f::copy::kPerThread, CopyEvent, PerThread);
FIELD(f::copy::kDirection, CopyEvent, Direction);
FIELD(f::copy::kRequestedKind, CopyEvent, RequestedKind);
FIELD(f::copy::kBytes, CopyEvent, Bytes);
FIELD(f::copy::kSrcKind, CopyEvent, SrcKind);
FIELD(f::copy::kDstKind, CopyEvent, DstKind);
FIELD(f::copy::kSrcAddress, CopyEvent, SrcAddress);
FIELD(f::copy::kDstAddress, CopyEvent, DstAddress);
FIELD(f::copy::kSrcDevice, CopyEvent, SrcDevice);
FIELD(f::copy::kDstDevice, CopyEvent, DstDevice);
FIELD(f::copy::kStream, CopyEvent, Stream);
FIELD(f::copy::kEnd, CopyEvent, EndNs);
FIELD(f::copy::kResult, CopyEvent, Result);
FIELD(f::copy::kCallId, CopyEvent, CallId);
FIELD(f::copy::kStackId, CopyEvent, StackId);
FIELD(f::copy::kPin, CopyEvent, Pin);
FIELD(f::copy::kBatchIndex, CopyEvent, BatchIndex);
FIELD(f::copy::kHeight, CopyEvent, Height);

FIELD(f::sync::kApi, SyncEvent, Api);
FIELD(f::sync::kStream, SyncEvent, Stream);
FIELD(f::sync::kEnd, SyncEvent, EndNs);
FIELD(f::sync::kResult, SyncEvent, Result);
FIELD(f::sync::kStackId, SyncEvent, StackId);
FIELD(f::sync::kCallId, SyncEvent, CallId);

FIELD(f::alloc::kApi, HostAlloc, Api);
FIELD(f::alloc::kAddress, HostAlloc, Address);
FIELD(f::alloc::kSize, HostAlloc, Size);
FIELD(f::alloc::kAlignment, HostAlloc, Alignment);
FIELD(f::alloc::kOldAddress, HostAlloc, OldAddress);
FIELD(f::alloc::kStackId, HostAlloc, StackId);
FIELD(f::alloc::kDurationNs, HostAlloc, DurationNs);

FIELD(f::free_::kAddress, HostFree, Address);
FIELD(f::free_::kByRealloc, HostFree, ByRealloc);

FIELD(f::shm::kOp, ShmEvent, Op);
FIELD(f::shm::kName, ShmEvent, Name);
FIELD(f::shm::kFd, ShmEvent, Fd);
FIELD(f::shm::kSize, ShmEvent, Size);
FIELD(f::shm::kOffset, ShmEvent, Offset);
FIELD(f::shm::kAddress, ShmEvent, Address);
FIELD(f::shm::kFlags, ShmEvent, Flags);
FIELD(f::shm::kProt, ShmEvent, Prot);
FIELD(f::shm::kError, ShmEvent, Error);
FIELD(f::shm::kDevice, ShmEvent, Device);
FIELD(f::shm::kInode, ShmEvent, Inode);
FIELD(f::shm::kDriverInternal, ShmEvent, DriverInternal);
FIELD(f::shm::kPool, ShmEvent, Pool);
FIELD(f::shm::kStackId, ShmEvent, StackId);
FIELD(f::shm::kEnd, ShmEvent, EndNs);

FIELD(f::interned_string::kId, InternedString, Id);
FIELD(f::interned_string::kStr, InternedString, Str);

FIELD(f::python_frame::kId, PythonFrame, Id);
FIELD(f::python_frame::kFilenameId, PythonFrame, FilenameId);
FIELD(f::python_frame::kFunctionId, PythonFrame, FunctionId);
FIELD(f::python_frame::kLine, PythonFrame, Line);

FIELD(f::stack::kId, Stack, Id);
FIELD(f::stack::kNativePcs, Stack, NativePcs);
FIELD(f::stack::kPythonFrames, Stack, PythonFrames);
FIELD(f::stack::kTruncated, Stack, Truncated);
FIELD(f::stack::kPythonTruncated, Stack, PythonTruncated);

FIELD(f::module::kPath, Module, Path);
FIELD(f::module::kBuildId, Module, BuildId);
FIELD(f::module::kLoadAddress, Module, LoadAddress);
FIELD(f::module::kStart, Module, Start);
FIELD(f::module::kEnd, Module, End);

FIELD(f::device::kKind, DeviceActivity, Kind);
FIELD(f::device::kStart, DeviceActivity, StartNs);
FIELD(f::device::kEnd, DeviceActivity, EndNs);
FIELD(f::device::kBytes, DeviceActivity, Bytes);
FIELD(f::device::kDirection, DeviceActivity, Direction);
FIELD(f::device::kSrcKind, DeviceActivity, SrcKind);
FIELD(f::device::kDstKind, DeviceActivity, DstKind);
FIELD(f::device::kDeviceId, DeviceActivity, DeviceId);
FIELD(f::device::kStreamId, DeviceActivity, StreamId);
FIELD(f::device::kCorrelationId, DeviceActivity, CorrelationId);
FIELD(f::device::kNameId, DeviceActivity, NameId);

FIELD(f::correlation::kCorrelationId, ExternalCorrelation, CorrelationId);
FIELD(f::correlation::kCallId, ExternalCorrelation, CallId);

FIELD(f::pin::kOp, PinEvent, Op);
FIELD(f::pin::kAddress, PinEvent, Address);
FIELD(f::pin::kSize, PinEvent, Size);
FIELD(f::pin::kDuration, PinEvent, DurationNs);
FIELD(f::pin::kResult, PinEvent, Result);
FIELD(f::pin::kPinnedBytes, PinEvent, PinnedBytes);
FIELD(f::pin::kReason, PinEvent, Reason);

#undef FIELD

// --- compile-time: enum values ----------------------------------------------

#define ENUM(shim_value, proto_value) \
  static_assert(static_cast<int>(shim_value) == static_cast<int>(proto_value), #proto_value)

ENUM(pinscope::shim::HookKind::kCopy, pt::HOOK_COPY);
ENUM(pinscope::shim::HookKind::kSync, pt::HOOK_SYNC);
ENUM(pinscope::shim::HookKind::kAlloc, pt::HOOK_ALLOC);
ENUM(pinscope::shim::HookKind::kShm, pt::HOOK_SHM);
ENUM(pinscope::shim::HookKind::kLoader, pt::HOOK_LOADER);
static_assert(pinscope::shim::kHookKinds == pt::HookKind_ARRAYSIZE, "HookKind");

ENUM(f::kOriginUnknown, pt::ORIGIN_UNKNOWN);
ENUM(f::kOriginRoot, pt::ORIGIN_ROOT);
ENUM(f::kOriginFork, pt::ORIGIN_FORK);
ENUM(f::kOriginExec, pt::ORIGIN_EXEC);

ENUM(f::kApiUnknown, pt::API_UNKNOWN);
ENUM(f::kMemcpy, pt::MEMCPY);
ENUM(f::kMemcpyAsync, pt::MEMCPY_ASYNC);
ENUM(f::kMemcpy2D, pt::MEMCPY_2D);
ENUM(f::kMemcpy2DAsync, pt::MEMCPY_2D_ASYNC);
ENUM(f::kMemcpy3D, pt::MEMCPY_3D);
ENUM(f::kMemcpy3DAsync, pt::MEMCPY_3D_ASYNC);
ENUM(f::kMemcpyPeer, pt::MEMCPY_PEER);
ENUM(f::kMemcpyPeerAsync, pt::MEMCPY_PEER_ASYNC);
ENUM(f::kMemcpyToSymbol, pt::MEMCPY_TO_SYMBOL);
ENUM(f::kMemcpyToSymbolAsync, pt::MEMCPY_TO_SYMBOL_ASYNC);
ENUM(f::kMemcpyFromSymbol, pt::MEMCPY_FROM_SYMBOL);
ENUM(f::kMemcpyFromSymbolAsync, pt::MEMCPY_FROM_SYMBOL_ASYNC);
ENUM(f::kMemcpyBatchAsync, pt::MEMCPY_BATCH_ASYNC);

ENUM(f::kDirUnknown, pt::DIR_UNKNOWN);
ENUM(f::kH2H, pt::H2H);
ENUM(f::kH2D, pt::H2D);
ENUM(f::kD2H, pt::D2H);
ENUM(f::kD2D, pt::D2D);
ENUM(f::kPeer, pt::PEER);

ENUM(f::kMemUnknown, pt::MEM_UNKNOWN);
ENUM(f::kPageable, pt::PAGEABLE);
ENUM(f::kPinned, pt::PINNED);
ENUM(f::kDevice, pt::DEVICE);
ENUM(f::kManaged, pt::MANAGED);
ENUM(f::kSymbol, pt::SYMBOL);

ENUM(f::kPinNone, pt::PIN_NONE);
ENUM(f::kPinByProgram, pt::PIN_BY_PROGRAM);
ENUM(f::kPinRegistered, pt::PIN_REGISTERED);
ENUM(f::kPinCached, pt::PIN_CACHED);
ENUM(f::kPinSkippedBudget, pt::PIN_SKIPPED_BUDGET);
ENUM(f::kPinSkippedSmall, pt::PIN_SKIPPED_SMALL);
ENUM(f::kPinSkippedUnknownBuffer, pt::PIN_SKIPPED_UNKNOWN_BUFFER);
ENUM(f::kPinFailed, pt::PIN_FAILED);
ENUM(f::kPinSkippedCapture, pt::PIN_SKIPPED_CAPTURE);

ENUM(f::kSyncUnknown, pt::SYNC_UNKNOWN);
ENUM(f::kStreamSynchronize, pt::STREAM_SYNCHRONIZE);
ENUM(f::kDeviceSynchronize, pt::DEVICE_SYNCHRONIZE);
ENUM(f::kEventSynchronize, pt::EVENT_SYNCHRONIZE);
ENUM(f::kStreamQuery, pt::STREAM_QUERY);

ENUM(f::kAllocUnknown, pt::ALLOC_UNKNOWN);
ENUM(f::kMalloc, pt::MALLOC);
ENUM(f::kCalloc, pt::CALLOC);
ENUM(f::kRealloc, pt::REALLOC);
ENUM(f::kReallocarray, pt::REALLOCARRAY);
ENUM(f::kPosixMemalign, pt::POSIX_MEMALIGN);
ENUM(f::kAlignedAlloc, pt::ALIGNED_ALLOC);
ENUM(f::kMemalign, pt::MEMALIGN);
ENUM(f::kValloc, pt::VALLOC);
ENUM(f::kPvalloc, pt::PVALLOC);
ENUM(f::kCudaHostAlloc, pt::CUDA_HOST_ALLOC);

ENUM(f::kShmUnknown, pt::SHM_UNKNOWN);
ENUM(f::kShmOpen, pt::SHM_OPEN);
ENUM(f::kShmCreate, pt::SHM_CREATE);
ENUM(f::kShmUnlink, pt::SHM_UNLINK);
ENUM(f::kMemfdCreate, pt::MEMFD_CREATE);
ENUM(f::kShmTruncate, pt::SHM_TRUNCATE);
ENUM(f::kShmFallocate, pt::SHM_FALLOCATE);
ENUM(f::kShmMap, pt::SHM_MAP);
ENUM(f::kShmUnmap, pt::SHM_UNMAP);
ENUM(f::kShmClose, pt::SHM_CLOSE);
ENUM(f::kShmSigbus, pt::SHM_SIGBUS);
ENUM(f::kShmUnmapDone, pt::SHM_UNMAP_DONE);

ENUM(f::kHowUnknown, pt::ProcessExit::HOW_UNKNOWN);
ENUM(f::kExit, pt::ProcessExit::EXIT);
ENUM(f::kUnderscoreExit, pt::ProcessExit::UNDERSCORE_EXIT);
ENUM(f::kExec, pt::ProcessExit::EXEC);
ENUM(f::kSignal, pt::ProcessExit::SIGNAL);

ENUM(f::kInfo, pt::Notice::INFO);
ENUM(f::kWarning, pt::Notice::WARNING);
ENUM(f::kError, pt::Notice::ERROR);

ENUM(f::kPinOpUnknown, pt::PIN_OP_UNKNOWN);
ENUM(f::kRegister, pt::REGISTER);
ENUM(f::kUnregister, pt::UNREGISTER);
ENUM(f::kRegisterFailed, pt::REGISTER_FAILED);
ENUM(f::kBudgetFull, pt::BUDGET_FULL);
ENUM(f::kRecycle, pt::RECYCLE);
ENUM(f::kReuse, pt::REUSE);

ENUM(f::kActUnknown, pt::ACT_UNKNOWN);
ENUM(f::kActMemcpy, pt::ACT_MEMCPY);
ENUM(f::kActMemset, pt::ACT_MEMSET);
ENUM(f::kActKernel, pt::ACT_KERNEL);
ENUM(f::kActSync, pt::ACT_SYNC);
ENUM(f::kLoaderUnknown, pt::LOADER_UNKNOWN);
ENUM(f::kLoaderIter, pt::LOADER_ITER);
ENUM(f::kLoaderNext, pt::LOADER_NEXT);
ENUM(f::kLoaderFetch, pt::LOADER_FETCH);
ENUM(f::kLoaderPin, pt::LOADER_PIN);
ENUM(f::kLoaderEnd, pt::LOADER_END);
ENUM(f::kLoaderRecv, pt::LOADER_RECV);

#undef ENUM

// The shim's enums must list every value of the schema's (a value added to
// the proto but not to trace_fields.h fails here).
TEST(WireEnums, EveryProtoEnumValueHasAShimConstant) {
  struct {
    const google::protobuf::EnumDescriptor* d;
    int shim_max;
  } enums[] = {
      {pt::ProcessOrigin_descriptor(), f::kOriginExec},
      {pt::CopyApi_descriptor(), f::kMemcpyBatchAsync},
      {pt::Direction_descriptor(), f::kPeer},
      {pt::MemoryKind_descriptor(), f::kSymbol},
      {pt::PinOutcome_descriptor(), f::kPinSkippedCapture},
      {pt::SyncApi_descriptor(), f::kStreamQuery},
      {pt::AllocApi_descriptor(), f::kCudaHostAlloc},
      {pt::ShmOp_descriptor(), f::kShmUnmapDone},
      {pt::ProcessExit::How_descriptor(), f::kSignal},
      {pt::Notice::Severity_descriptor(), f::kError},
      {pt::PinOp_descriptor(), f::kReuse},
      {pt::DeviceActivityKind_descriptor(), f::kActSync},
      {pt::LoaderEventKind_descriptor(), f::kLoaderRecv},
  };
  for (const auto& en : enums) {
    // Values are dense 0..max in both, so equal counts mean equal sets given
    // the static_asserts above.
    EXPECT_EQ(en.d->value_count(), en.shim_max + 1) << en.d->full_name();
    for (int i = 0; i < en.d->value_count(); ++i)
      EXPECT_LE(en.d->value(i)->number(), en.shim_max) << en.d->value(i)->full_name();
  }
}

}  // namespace
