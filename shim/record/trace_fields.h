// Field numbers of proto/trace.proto for the shim's hand-written encoder.
// Must match the schema; tests/shim/record round-trips every field through the
// generated parser, so a mismatch fails CI.
#pragma once

#include <cstdint>

namespace pinscope::shim::fields {

constexpr uint32_t kTracePacket = 1;  // Trace.packet

namespace packet {
constexpr uint32_t kTimestamp = 1, kTid = 2;
constexpr uint32_t kHeader = 10, kCopy = 11, kSync = 12, kAlloc = 13, kFree = 14, kShm = 15,
                   kInternedString = 16, kStack = 17, kPythonFrame = 18, kModule = 19,
                   kDevice = 20, kCorrelation = 21, kPin = 22, kThread = 23, kNotice = 24,
                   kExit = 25, kCuda = 26, kCounters = 27, kRecording = 28,
                   kThreadSample = 29, kLoader = 30, kUtilization = 40;
}  // namespace packet

namespace header {
constexpr uint32_t kFormatVersion = 1, kRunId = 2, kPid = 3, kPpid = 4, kOrigin = 5, kCmdline = 6,
                   kExe = 7, kHostname = 8, kStartWall = 9, kStartMono = 10, kHost = 11,
                   kConfig = 12, kShimVersion = 13, kHelper = 14, kParentPid = 15, kRank = 16;
}
namespace rank {
constexpr uint32_t kRank = 1, kLocalRank = 2, kWorldSize = 3, kGroupRank = 4,
                   kLocalWorldSize = 5;
}
namespace host {
constexpr uint32_t kLogical = 1, kPhysical = 2, kAffinity = 3, kCgroupQuota = 4, kRam = 5,
                   kCgroupMem = 6, kShmCapacity = 7, kShmFree = 8, kGpuNames = 9,
                   kPcieSpeed = 10, kPcieWidth = 11, kKernel = 12, kLibc = 13, kMemlock = 14;
}
namespace config {
constexpr uint32_t kTraceMin = 1, kPinMode = 2, kPinMin = 3, kPinBudget = 4, kStackDepth = 5,
                   kCupti = 6, kFlushMs = 7;
}
namespace cuda {
constexpr uint32_t kPath = 1, kRuntimeVersion = 2, kDriverVersion = 3, kDeviceCount = 4,
                   kDeviceNames = 5;
}
namespace thread {
constexpr uint32_t kTid = 1, kName = 2;
}
namespace recording {
constexpr uint32_t kKernels = 1, kReason = 2, kKernelRate = 3, kPlannedNs = 4, kNoCorrelations = 5,
                   kDetached = 6;
}
namespace utilization {
constexpr uint32_t kCudaDevice = 1, kNvmlIndex = 2, kPciBusId = 3, kSampleNs = 4, kPercent = 5;
}
namespace notice {
constexpr uint32_t kSeverity = 1, kCode = 2, kText = 3;
}
namespace exit {
constexpr uint32_t kHow = 1, kStatus = 2, kDropped = 3;
}
namespace counters {
constexpr uint32_t kCopies = 1, kAllocsRecorded = 2, kAllocsSeen = 3, kBytesWritten = 4,
                   kDropped = 5, kPinnedBytes = 6, kStacksCaptured = 7, kStackCaptureNs = 8,
                   kHookCalls = 9, kHookNs = 10, kOwnThreadsCpuNs = 11, kPointerQueries = 12,
                   kPointerQueryNs = 13, kCuptiSwitches = 14, kCuptiSwitchNs = 15,
                   kStackCacheHits = 16, kStackCacheChecks = 17, kStackPythonNs = 18,
                   kHookKinds = 19;
}
namespace hook_kind_cost {
constexpr uint32_t kKind = 1, kCalls = 2, kNs = 3;
}
namespace usage {
constexpr uint32_t kUserNs = 1, kSysNs = 2, kMinorFaults = 3, kMajorFaults = 4, kCpuNs = 5;
}
namespace copy {
constexpr uint32_t kApi = 1, kPerThread = 2, kDirection = 3, kRequestedKind = 4, kBytes = 5,
                   kSrcKind = 6, kDstKind = 7, kSrcAddress = 8, kDstAddress = 9,
                   kSrcDevice = 10, kDstDevice = 11, kStream = 12, kEnd = 13, kResult = 14,
                   kCallId = 15, kStackId = 16, kPin = 17, kBatchIndex = 18, kHeight = 19,
                   kUsageEnter = 20, kUsageExit = 21;
}
namespace sync {
constexpr uint32_t kApi = 1, kStream = 2, kEnd = 3, kResult = 4, kStackId = 5, kCallId = 6,
                   kUsageEnter = 7, kUsageExit = 8;
}
namespace thread_sample {
constexpr uint32_t kThreads = 1;
namespace entry {
constexpr uint32_t kTid = 1, kCpuNs = 2, kRunqueueNs = 3, kMinorFaults = 4, kMajorFaults = 5;
}
}  // namespace thread_sample
namespace loader {
constexpr uint32_t kKind = 1, kLoaderId = 2, kEnd = 3, kIndex = 4, kUsageBegin = 5, kUsageEnd = 6,
                   kNumWorkers = 7, kPinMemory = 8, kPrefetchFactor = 9, kPersistentWorkers = 10,
                   kBatchSize = 11, kDatasetLength = 12, kIterable = 13, kSite = 14, kWorkerId = 15,
                   kBatchSamples = 16, kUserSite = 17, kFramework = 18;
}
namespace alloc {
constexpr uint32_t kApi = 1, kAddress = 2, kSize = 3, kAlignment = 4, kOldAddress = 5,
                   kStackId = 6, kDurationNs = 7;
}
namespace free_ {
constexpr uint32_t kAddress = 1, kByRealloc = 2;
}
namespace shm {
constexpr uint32_t kOp = 1, kName = 2, kFd = 3, kSize = 4, kOffset = 5, kAddress = 6, kFlags = 7,
                   kProt = 8, kError = 9, kDevice = 10, kInode = 11, kDriverInternal = 12,
                   kStackId = 13, kEnd = 14, kUsage = 15, kPool = 16;
}
namespace interned_string {
constexpr uint32_t kId = 1, kStr = 2;
}
namespace python_frame {
constexpr uint32_t kId = 1, kFilenameId = 2, kFunctionId = 3, kLine = 4;
}
namespace stack {
constexpr uint32_t kId = 1, kNativePcs = 2, kPythonFrames = 3, kTruncated = 4,
                   kPythonTruncated = 5;
}
namespace module {
constexpr uint32_t kPath = 1, kBuildId = 2, kLoadAddress = 3, kStart = 4, kEnd = 5;
}
namespace device {
constexpr uint32_t kKind = 1, kStart = 2, kEnd = 3, kBytes = 4, kDirection = 5, kSrcKind = 6,
                   kDstKind = 7, kDeviceId = 8, kStreamId = 9, kCorrelationId = 10, kNameId = 11;
}
namespace correlation {
constexpr uint32_t kCorrelationId = 1, kCallId = 2;
}
namespace pin {
constexpr uint32_t kOp = 1, kAddress = 2, kSize = 3, kDuration = 4, kResult = 5,
                   kPinnedBytes = 6, kReason = 7;
}

// Enum values (proto/trace.proto).
enum Origin : uint32_t { kOriginUnknown = 0, kOriginRoot = 1, kOriginFork = 2, kOriginExec = 3 };
enum CopyApi : uint32_t {
  kApiUnknown = 0, kMemcpy = 1, kMemcpyAsync = 2, kMemcpy2D = 3, kMemcpy2DAsync = 4,
  kMemcpy3D = 5, kMemcpy3DAsync = 6, kMemcpyPeer = 7, kMemcpyPeerAsync = 8,
  kMemcpyToSymbol = 9, kMemcpyToSymbolAsync = 10, kMemcpyFromSymbol = 11,
  kMemcpyFromSymbolAsync = 12, kMemcpyBatchAsync = 13
};
enum Direction : uint32_t { kDirUnknown = 0, kH2H = 1, kH2D = 2, kD2H = 3, kD2D = 4, kPeer = 5 };
enum MemKind : uint32_t {
  kMemUnknown = 0, kPageable = 1, kPinned = 2, kDevice = 3, kManaged = 4, kSymbol = 5
};
enum PinOutcome : uint32_t {
  kPinNone = 0, kPinByProgram = 1, kPinRegistered = 2, kPinCached = 3, kPinSkippedBudget = 4,
  kPinSkippedSmall = 5, kPinSkippedUnknownBuffer = 6, kPinFailed = 7, kPinSkippedCapture = 8
};
enum SyncApi : uint32_t {
  kSyncUnknown = 0, kStreamSynchronize = 1, kDeviceSynchronize = 2, kEventSynchronize = 3,
  kStreamQuery = 4
};
enum AllocApi : uint32_t {
  kAllocUnknown = 0, kMalloc = 1, kCalloc = 2, kRealloc = 3, kReallocarray = 4,
  kPosixMemalign = 5, kAlignedAlloc = 6, kMemalign = 7, kValloc = 8, kPvalloc = 9,
  kCudaHostAlloc = 10
};
enum ShmOp : uint32_t {
  kShmUnknown = 0, kShmOpen = 1, kShmCreate = 2, kShmUnlink = 3, kMemfdCreate = 4,
  kShmTruncate = 5, kShmFallocate = 6, kShmMap = 7, kShmUnmap = 8, kShmClose = 9,
  kShmSigbus = 10, kShmUnmapDone = 11
};
enum ExitHow : uint32_t { kHowUnknown = 0, kExit = 1, kUnderscoreExit = 2, kExec = 3, kSignal = 4 };
enum Severity : uint32_t { kInfo = 0, kWarning = 1, kError = 2 };
enum PinOp : uint32_t {
  kPinOpUnknown = 0, kRegister = 1, kUnregister = 2, kRegisterFailed = 3, kBudgetFull = 4,
  kRecycle = 5, kReuse = 6
};
enum LoaderKind : uint32_t {
  kLoaderUnknown = 0, kLoaderIter = 1, kLoaderNext = 2, kLoaderFetch = 3, kLoaderPin = 4,
  kLoaderEnd = 5, kLoaderRecv = 6
};
enum ActivityKind : uint32_t { kActUnknown = 0, kActMemcpy = 1, kActMemset = 2, kActKernel = 3,
                               kActSync = 4 };

}  // namespace pinscope::shim::fields
