// Round trip of the shim's hand-written encoder (shim/record/wire.h + the field
// numbers of shim/record/trace_fields.h) through the generated parser of
// proto/trace.proto: every packet type, every field non-zero (negative
// int32/sint32, packed repeated, nested messages, strings). Field numbers and
// enum values are checked at compile time in wire_fields_test.cc.
#include <unistd.h>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "shim/record/host_facts.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"
#include "shim/record/wire.h"
#include "trace.pb.h"

namespace {

namespace pt = pinscope::trace;
namespace f = pinscope::shim::fields;
using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using pinscope::shim::Encoder;

// --- runtime round trip -------------------------------------------------------

// Every field of m (recursively) is set: non-default scalars, non-empty
// repeated fields. Fields of a oneof count when the set case is theirs.
void ExpectEveryFieldSet(const Message& m, const std::string& path) {
  const Descriptor* d = m.GetDescriptor();
  const Reflection* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* fd = d->field(i);
    std::string where = path + "." + fd->name();
    if (fd->containing_oneof()) {
      if (!r->HasField(m, fd)) continue;  // another case of the oneof
    } else if (fd->is_repeated()) {
      EXPECT_GT(r->FieldSize(m, fd), 0) << where << " is empty: the test must cover it";
      continue;
    } else {
      EXPECT_TRUE(r->HasField(m, fd)) << where << " is zero: the test must set it";
    }
    if (fd->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && r->HasField(m, fd))
      ExpectEveryFieldSet(r->GetMessage(m, fd), where);
  }
}

// No field the schema does not know (a wrong field number lands here, or in
// another field of the right wire type, which the comparison catches).
void ExpectNoUnknownFields(const Message& m, const std::string& path) {
  const Reflection* r = m.GetReflection();
  EXPECT_TRUE(r->GetUnknownFields(m).empty()) << path << " has unknown fields";
  std::vector<const FieldDescriptor*> set;
  r->ListFields(m, &set);
  for (const FieldDescriptor* fd : set) {
    if (fd->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (fd->is_repeated()) {
      for (int i = 0; i < r->FieldSize(m, fd); ++i)
        ExpectNoUnknownFields(r->GetRepeatedMessage(m, fd, i), path + "." + fd->name());
    } else {
      ExpectNoUnknownFields(r->GetMessage(m, fd), path + "." + fd->name());
    }
  }
}

// One packet type: fills the expected message, and encodes the same values
// with the shim's encoder (reading them back from the expected message, so
// each value is written once).
struct Case {
  uint32_t data_field;
  std::function<void(pt::TracePacket*)> fill;
  std::function<void(const pt::TracePacket&, Encoder*)> encode;
};

constexpr uint64_t kMax64 = std::numeric_limits<uint64_t>::max();
constexpr uint32_t kMax32 = std::numeric_limits<uint32_t>::max();

void EncodeHostFactsFrom(const pt::HostFacts& h, Encoder* e) {
  namespace k = f::host;
  e->Varint(k::kLogical, h.logical_cores());
  e->Varint(k::kPhysical, h.physical_cores());
  e->Varint(k::kAffinity, h.affinity_cores());
  e->Varint(k::kCgroupQuota, h.cgroup_cpu_quota_millicores());
  e->Varint(k::kRam, h.ram_bytes());
  e->Varint(k::kCgroupMem, h.cgroup_memory_limit_bytes());
  e->Varint(k::kShmCapacity, h.shm_capacity_bytes());
  e->Varint(k::kShmFree, h.shm_free_bytes());
  for (const std::string& s : h.gpu_names()) e->StringN(k::kGpuNames, s.data(), s.size());
  e->Varint(k::kPcieSpeed, h.pcie_link_speed_gts_x10());
  e->Varint(k::kPcieWidth, h.pcie_link_width());
  e->String(k::kKernel, h.kernel_release().c_str());
  e->String(k::kLibc, h.libc_version().c_str());
  e->Varint(k::kMemlock, h.memlock_limit_bytes());
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  // ThreadUsage: set every field from `seed`, encode it as the recorder does.
  static const auto set_usage = [](pt::ThreadUsage* u, uint64_t seed) {
    u->set_user_ns(seed);
    u->set_sys_ns(seed + 1);
    u->set_minor_faults(seed + 2);
    u->set_major_faults(seed + 3);
    u->set_cpu_ns(seed + 4);
  };
  static const auto encode_usage = [](Encoder* e, uint32_t field, const pt::ThreadUsage& u) {
    pinscope::shim::Usage x;
    x.user_ns = u.user_ns();
    x.sys_ns = u.sys_ns();
    x.minor_faults = u.minor_faults();
    x.major_faults = u.major_faults();
    x.cpu_ns = u.cpu_ns();
    pinscope::shim::EncodeUsage(*e, field, x);
  };
  cases.push_back({f::packet::kHeader,
                   [](pt::TracePacket* p) {
                     pt::ProcessHeader* h = p->mutable_header();
                     h->set_format_version(1);
                     h->set_run_id("host-4242-1700000000000");
                     h->set_pid(kMax32);
                     h->set_ppid(4241);
                     h->set_origin(pt::ORIGIN_EXEC);
                     h->add_cmdline("python");
                     h->add_cmdline("train.py");
                     h->add_cmdline("--epochs=3");
                     h->set_exe("/usr/bin/python3.12");
                     h->set_hostname("gpu-node-7");
                     h->set_start_wall_ns(1700000000123456789ull);
                     h->set_start_mono_ns(kMax64);
                     pt::HostFacts* hf = h->mutable_host();
                     hf->set_logical_cores(192);
                     hf->set_physical_cores(96);
                     hf->set_affinity_cores(16);
                     hf->set_cgroup_cpu_quota_millicores(15500);
                     hf->set_ram_bytes(2ull << 40);
                     hf->set_cgroup_memory_limit_bytes(128ull << 30);
                     hf->set_shm_capacity_bytes(64ull << 30);
                     hf->set_shm_free_bytes(63ull << 30);
                     hf->add_gpu_names("NVIDIA H200");
                     hf->add_gpu_names("NVIDIA H200 NVL");
                     hf->set_pcie_link_speed_gts_x10(320);
                     hf->set_pcie_link_width(16);
                     hf->set_kernel_release("6.8.0-45-generic");
                     hf->set_libc_version("2.39");
                     hf->set_memlock_limit_bytes(kMax64);
                     pt::ShimConfig* c = h->mutable_config();
                     c->set_trace_min_bytes(1 << 20);
                     c->set_pin_mode(2);
                     c->set_pin_min_bytes(4 << 20);
                     c->set_pin_budget_bytes(8ull << 30);
                     c->set_stack_depth(32);
                     c->set_cupti(true);
                     c->set_flush_period_ms(1000);
                     h->set_shim_version("0.1.0");
                     h->set_helper(true);
                     h->set_parent_pid(4240);
                     pt::RankLabel* r = h->mutable_rank();
                     r->set_rank(7);
                     r->set_local_rank(3);
                     r->set_world_size(16);
                     r->set_group_rank(1);
                     r->set_local_world_size(-1);  // sint32: zigzag
                   },
                   [](const pt::TracePacket& p, Encoder* e) {
                     namespace k = f::header;
                     const pt::ProcessHeader& h = p.header();
                     e->Varint(k::kFormatVersion, h.format_version());
                     e->String(k::kRunId, h.run_id().c_str());
                     e->Varint(k::kPid, h.pid());
                     e->Varint(k::kPpid, h.ppid());
                     e->Varint(k::kOrigin, h.origin());
                     for (const std::string& s : h.cmdline())
                       e->Bytes(k::kCmdline, s.data(), s.size());
                     e->String(k::kExe, h.exe().c_str());
                     e->String(k::kHostname, h.hostname().c_str());
                     e->Varint(k::kStartWall, h.start_wall_ns());
                     e->Varint(k::kStartMono, h.start_mono_ns());
                     size_t m = e->BeginNested(k::kHost);
                     EncodeHostFactsFrom(h.host(), e);
                     e->EndNested(m);
                     m = e->BeginNested(k::kConfig);
                     namespace c = f::config;
                     e->Varint(c::kTraceMin, h.config().trace_min_bytes());
                     e->Varint(c::kPinMode, h.config().pin_mode());
                     e->Varint(c::kPinMin, h.config().pin_min_bytes());
                     e->Varint(c::kPinBudget, h.config().pin_budget_bytes());
                     e->Varint(c::kStackDepth, h.config().stack_depth());
                     e->Bool(c::kCupti, h.config().cupti());
                     e->Varint(c::kFlushMs, h.config().flush_period_ms());
                     e->EndNested(m);
                     e->String(k::kShimVersion, h.shim_version().c_str());
                     e->Bool(k::kHelper, h.helper());
                     e->Varint(k::kParentPid, h.parent_pid());
                     m = e->BeginNested(k::kRank);
                     namespace r = f::rank;
                     e->Varint(r::kRank, h.rank().rank());
                     e->SInt(r::kLocalRank, h.rank().local_rank());
                     e->SInt(r::kWorldSize, h.rank().world_size());
                     e->SInt(r::kGroupRank, h.rank().group_rank());
                     e->SInt(r::kLocalWorldSize, h.rank().local_world_size());
                     e->EndNested(m);
                   }});
  cases.push_back({f::packet::kCopy,
                   [](pt::TracePacket* p) {
                     pt::CopyEvent* c = p->mutable_copy();
                     c->set_api(pt::MEMCPY_BATCH_ASYNC);
                     c->set_per_thread(true);
                     c->set_direction(pt::PEER);
                     c->set_requested_kind(-3);  // int32: 10-byte varint
                     c->set_bytes(kMax64);
                     c->set_src_kind(pt::SYMBOL);
                     c->set_dst_kind(pt::MANAGED);
                     c->set_src_address(0x7f00deadbeefull);
                     c->set_dst_address(kMax64 - 1);
                     c->set_src_device(-1);  // sint32: zigzag
                     c->set_dst_device(std::numeric_limits<int32_t>::min());
                     c->set_stream(0x55aa00112233ull);
                     c->set_end_ns(123456789012345ull);
                     c->set_result(-217);
                     c->set_call_id(9);
                     c->set_stack_id(10);
                     c->set_pin(pt::PIN_SKIPPED_CAPTURE);
                     c->set_batch_index(kMax32);
                     c->set_height(19);
                     set_usage(c->mutable_usage_enter(), kMax64 - 10);
                     set_usage(c->mutable_usage_exit(), 20);
                   },
                   [](const pt::TracePacket& p, Encoder* e) {
                     namespace k = f::copy;
                     const pt::CopyEvent& c = p.copy();
                     e->Varint(k::kApi, c.api());
                     e->Bool(k::kPerThread, c.per_thread());
                     e->Varint(k::kDirection, c.direction());
                     e->Int32(k::kRequestedKind, c.requested_kind());
                     e->Varint(k::kBytes, c.bytes());
                     e->Varint(k::kSrcKind, c.src_kind());
                     e->Varint(k::kDstKind, c.dst_kind());
                     e->Varint(k::kSrcAddress, c.src_address());
                     e->Varint(k::kDstAddress, c.dst_address());
                     e->SInt(k::kSrcDevice, c.src_device());
                     e->SInt(k::kDstDevice, c.dst_device());
                     e->Varint(k::kStream, c.stream());
                     e->Varint(k::kEnd, c.end_ns());
                     e->Int32(k::kResult, c.result());
                     e->Varint(k::kCallId, c.call_id());
                     e->Varint(k::kStackId, c.stack_id());
                     e->Varint(k::kPin, c.pin());
                     e->Varint(k::kBatchIndex, c.batch_index());
                     e->Varint(k::kHeight, c.height());
                     encode_usage(e, k::kUsageEnter, c.usage_enter());
                     encode_usage(e, k::kUsageExit, c.usage_exit());
                   }});
  cases.push_back({f::packet::kSync,
                   [](pt::TracePacket* p) {
                     pt::SyncEvent* s = p->mutable_sync();
                     s->set_api(pt::STREAM_QUERY);
                     s->set_stream(2);
                     s->set_end_ns(kMax64);
                     s->set_result(-600);
                     s->set_stack_id(5);
                     s->set_call_id(6);
                     set_usage(s->mutable_usage_enter(), 7);
                     set_usage(s->mutable_usage_exit(), 8);
                   },
                   [](const pt::TracePacket& p, Encoder* e) {
                     namespace k = f::sync;
                     const pt::SyncEvent& s = p.sync();
                     e->Varint(k::kApi, s.api());
                     e->Varint(k::kStream, s.stream());
                     e->Varint(k::kEnd, s.end_ns());
                     e->Int32(k::kResult, s.result());
                     e->Varint(k::kStackId, s.stack_id());
                     e->Varint(k::kCallId, s.call_id());
                     encode_usage(e, k::kUsageEnter, s.usage_enter());
                     encode_usage(e, k::kUsageExit, s.usage_exit());
                   }});
  cases.push_back({f::packet::kAlloc,
                   [](pt::TracePacket* p) {
                     pt::HostAlloc* a = p->mutable_alloc();
                     a->set_api(pt::CUDA_HOST_ALLOC);
                     a->set_address(0x7f1234560000ull);
                     a->set_size(kMax64);
                     a->set_alignment(4096);
                     a->set_old_address(0x7f1234000000ull);
                     a->set_stack_id(77);
                     a->set_duration_ns(41000000);
                   },
                   [](const pt::TracePacket& p, Encoder* e) {
                     namespace k = f::alloc;
                     const pt::HostAlloc& a = p.alloc();
                     e->Varint(k::kApi, a.api());
                     e->Varint(k::kAddress, a.address());
                     e->Varint(k::kSize, a.size());
                     e->Varint(k::kAlignment, a.alignment());
                     e->Varint(k::kOldAddress, a.old_address());
                     e->Varint(k::kStackId, a.stack_id());
                     e->Varint(k::kDurationNs, a.duration_ns());
                   }});
  cases.push_back({f::packet::kFree,
                   [](pt::TracePacket* p) {
                     p->mutable_free()->set_address(kMax64);
                     p->mutable_free()->set_by_realloc(true);
                   },
                   [](const pt::TracePacket& p, Encoder* e) {
                     e->Varint(f::free_::kAddress, p.free().address());
                     e->Bool(f::free_::kByRealloc, p.free().by_realloc());
                   }});
  cases.push_back({f::packet::kShm,
                   [](pt::TracePacket* p) {
                     pt::ShmEvent* s = p->mutable_shm();
                     s->set_op(pt::SHM_SIGBUS);
                     s->set_name("/torch_1234_5678_0");
                     s->set_fd(-2);
                     s->set_size(1ull << 33);
                     s->set_offset(4096);
                     s->set_address(0x7fabcd000000ull);
                     s->set_flags(-1);
                     s->set_prot(3);
                     s->set_error(28);
                     s->set_device(0x2a);
                     s->set_inode(kMax64);
                     s->set_driver_internal(true);
                     s->set_pool(true);
                     s->set_stack_id(13);
                     s->set_end_ns(14);
                     set_usage(s->mutable_usage(), 15);
                   },
                   [](const pt::TracePacket& p, Encoder* e) {
                     namespace k = f::shm;
                     const pt::ShmEvent& s = p.shm();
                     e->Varint(k::kOp, s.op());
                     e->String(k::kName, s.name().c_str());
                     e->Int32(k::kFd, s.fd());
                     e->Varint(k::kSize, s.size());
                     e->Varint(k::kOffset, s.offset());
                     e->Varint(k::kAddress, s.address());
                     e->Int32(k::kFlags, s.flags());
                     e->Int32(k::kProt, s.prot());
                     e->Int32(k::kError, s.error());
                     e->Varint(k::kDevice, s.device());
                     e->Varint(k::kInode, s.inode());
                     e->Bool(k::kDriverInternal, s.driver_internal());
                     e->Bool(k::kPool, s.pool());
                     e->Varint(k::kStackId, s.stack_id());
                     e->Varint(k::kEnd, s.end_ns());
                     encode_usage(e, k::kUsage, s.usage());
                   }});
  cases.push_back({f::packet::kInternedString,
                   [](pt::TracePacket* p) {
                     p->mutable_interned_string()->set_id(kMax64);
                     p->mutable_interned_string()->set_str("torch/utils/data/dataloader.py");
                   },
                   [](const pt::TracePacket& p, Encoder* e) {
                     e->Varint(f::interned_string::kId, p.interned_string().id());
                     e->String(f::interned_string::kStr, p.interned_string().str().c_str());
                   }});
  cases.push_back({f::packet::kStack,
                   [](pt::TracePacket* p) {
                     pt::Stack* s = p->mutable_stack();
                     s->set_id(3);
                     for (uint64_t pc : {uint64_t{0x401000}, uint64_t{0x7fffffffe000}, kMax64, uint64_t{1}})
                       s->add_native_pcs(pc);
                     for (uint64_t fr : {uint64_t{1}, uint64_t{128}, uint64_t{16384}}) s->add_python_frames(fr);
                     s->set_truncated(true);
                     s->set_python_truncated(true);
                   },
                   [](const pt::TracePacket& p, Encoder* e) {
                     const pt::Stack& s = p.stack();
                     e->Varint(f::stack::kId, s.id());
                     std::vector<uint64_t> pcs(s.native_pcs().begin(), s.native_pcs().end());
                     std::vector<uint64_t> py(s.python_frames().begin(), s.python_frames().end());
                     e->PackedVarints(f::stack::kNativePcs, pcs.data(), pcs.size());
                     e->PackedVarints(f::stack::kPythonFrames, py.data(), py.size());
                     e->Bool(f::stack::kTruncated, s.truncated());
                     e->Bool(f::stack::kPythonTruncated, s.python_truncated());
                   }});
  cases.push_back({f::packet::kPythonFrame,
                   [](pt::TracePacket* p) {
                     pt::PythonFrame* fr = p->mutable_python_frame();
                     fr->set_id(1);
                     fr->set_filename_id(2);
                     fr->set_function_id(3);
                     fr->set_line(kMax32);
                   },
                   [](const pt::TracePacket& p, Encoder* e) {
                     namespace k = f::python_frame;
                     e->Varint(k::kId, p.python_frame().id());
                     e->Varint(k::kFilenameId, p.python_frame().filename_id());
                     e->Varint(k::kFunctionId, p.python_frame().function_id());
                     e->Varint(k::kLine, p.python_frame().line());
                   }});
  cases.push_back({f::packet::kModule,
                   [](pt::TracePacket* p) {
                     pt::Module* m = p->mutable_module();
                     m->set_path("/usr/lib/x86_64-linux-gnu/libc.so.6");
                     m->set_build_id("0123456789abcdef0123456789abcdef01234567");
                     m->set_load_address(0x7f0000000000ull);
                     m->set_start(0x7f0000028000ull);
                     m->set_end(0x7f00001bd000ull);
                   },
                   [](const pt::TracePacket& p, Encoder* e) {
                     namespace k = f::module;
                     e->String(k::kPath, p.module().path().c_str());
                     e->String(k::kBuildId, p.module().build_id().c_str());
                     e->Varint(k::kLoadAddress, p.module().load_address());
                     e->Varint(k::kStart, p.module().start());
                     e->Varint(k::kEnd, p.module().end());
                   }});
  cases.push_back({f::packet::kDevice,
                   [](pt::TracePacket* p) {
                     pt::DeviceActivity* d = p->mutable_device();
                     d->set_kind(pt::ACT_SYNC);
                     d->set_start_ns(2);
                     d->set_end_ns(kMax64);
                     d->set_bytes(4);
                     d->set_direction(pt::D2H);
                     d->set_src_kind(pt::DEVICE);
                     d->set_dst_kind(pt::PINNED);
                     d->set_device_id(7);
                     d->set_stream_id(kMax32);
                     d->set_correlation_id(10);
                     d->set_name_id(11);
                   },
                   [](const pt::TracePacket& p, Encoder* e) {
                     namespace k = f::device;
                     const pt::DeviceActivity& d = p.device();
                     e->Varint(k::kKind, d.kind());
                     e->Varint(k::kStart, d.start_ns());
                     e->Varint(k::kEnd, d.end_ns());
                     e->Varint(k::kBytes, d.bytes());
                     e->Varint(k::kDirection, d.direction());
                     e->Varint(k::kSrcKind, d.src_kind());
                     e->Varint(k::kDstKind, d.dst_kind());
                     e->Varint(k::kDeviceId, d.device_id());
                     e->Varint(k::kStreamId, d.stream_id());
                     e->Varint(k::kCorrelationId, d.correlation_id());
                     e->Varint(k::kNameId, d.name_id());
                   }});
  cases.push_back({f::packet::kCorrelation,
                   [](pt::TracePacket* p) {
                     p->mutable_correlation()->set_correlation_id(kMax32);
                     p->mutable_correlation()->set_call_id(kMax64);
                   },
                   [](const pt::TracePacket& p, Encoder* e) {
                     e->Varint(f::correlation::kCorrelationId, p.correlation().correlation_id());
                     e->Varint(f::correlation::kCallId, p.correlation().call_id());
                   }});
  cases.push_back({f::packet::kPin,
                   [](pt::TracePacket* p) {
                     pt::PinEvent* pin = p->mutable_pin();
                     pin->set_op(pt::REUSE);
                     pin->set_address(0x7f5500000000ull);
                     pin->set_size(64ull << 20);
                     pin->set_duration_ns(1234567);
                     pin->set_result(-1);
                     pin->set_pinned_bytes(kMax64);
                     pin->set_reason("realloc");
                   },
                   [](const pt::TracePacket& p, Encoder* e) {
                     namespace k = f::pin;
                     const pt::PinEvent& pin = p.pin();
                     e->Varint(k::kOp, pin.op());
                     e->Varint(k::kAddress, pin.address());
                     e->Varint(k::kSize, pin.size());
                     e->Varint(k::kDuration, pin.duration_ns());
                     e->Int32(k::kResult, pin.result());
                     e->Varint(k::kPinnedBytes, pin.pinned_bytes());
                     e->String(k::kReason, pin.reason().c_str());
                   }});
  cases.push_back({f::packet::kThread,
                   [](pt::TracePacket* p) {
                     p->mutable_thread()->set_tid(kMax32);
                     p->mutable_thread()->set_name("pt_data_worker");
                   },
                   [](const pt::TracePacket& p, Encoder* e) {
                     e->Varint(f::thread::kTid, p.thread().tid());
                     e->String(f::thread::kName, p.thread().name().c_str());
                   }});
  cases.push_back({f::packet::kNotice,
                   [](pt::TracePacket* p) {
                     p->mutable_notice()->set_severity(pt::Notice::ERROR);
                     p->mutable_notice()->set_code("disk_full");
                     p->mutable_notice()->set_text("cannot write the trace file: (disk full)");
                   },
                   [](const pt::TracePacket& p, Encoder* e) {
                     e->Varint(f::notice::kSeverity, p.notice().severity());
                     e->String(f::notice::kCode, p.notice().code().c_str());
                     e->String(f::notice::kText, p.notice().text().c_str());
                   }});
  cases.push_back({f::packet::kExit,
                   [](pt::TracePacket* p) {
                     p->mutable_exit()->set_how(pt::ProcessExit::SIGNAL);
                     p->mutable_exit()->set_status(-9);
                     p->mutable_exit()->set_dropped_events(kMax64);
                   },
                   [](const pt::TracePacket& p, Encoder* e) {
                     e->Varint(f::exit::kHow, p.exit().how());
                     e->Int32(f::exit::kStatus, p.exit().status());
                     e->Varint(f::exit::kDropped, p.exit().dropped_events());
                   }});
  cases.push_back({f::packet::kCuda,
                   [](pt::TracePacket* p) {
                     pt::CudaRuntimeInfo* c = p->mutable_cuda();
                     c->set_runtime_path("/usr/local/cuda/lib64/libcudart.so.13");
                     c->set_runtime_version(13000);
                     c->set_driver_version(-1);
                     c->set_device_count(8);
                     c->add_device_names("NVIDIA H200");
                     c->add_device_names("NVIDIA H100 80GB HBM3");
                   },
                   [](const pt::TracePacket& p, Encoder* e) {
                     namespace k = f::cuda;
                     const pt::CudaRuntimeInfo& c = p.cuda();
                     e->String(k::kPath, c.runtime_path().c_str());
                     e->Int32(k::kRuntimeVersion, c.runtime_version());
                     e->Int32(k::kDriverVersion, c.driver_version());
                     e->Int32(k::kDeviceCount, c.device_count());
                     for (const std::string& s : c.device_names())
                       e->StringN(k::kDeviceNames, s.data(), s.size());
                   }});
  cases.push_back({f::packet::kCounters,
                   [](pt::TracePacket* p) {
                     pt::Counters* c = p->mutable_counters();
                     c->set_copies(1);
                     c->set_allocs_recorded(2);
                     c->set_allocs_seen(kMax64);
                     c->set_bytes_written(4);
                     c->set_dropped_events(5);
                     c->set_pinned_bytes(6);
                     c->set_stacks_captured(7);
                     c->set_stack_capture_ns(kMax64);
                     c->set_hook_calls(9);
                     c->set_hook_ns(kMax64);
                     c->set_own_threads_cpu_ns(11);
                     c->set_pointer_queries(12);
                     c->set_pointer_query_ns(kMax64 - 13);
                     c->set_cupti_switches(14);
                     c->set_cupti_switch_ns(kMax64 - 15);
                     c->set_stack_cache_hits(16);
                     c->set_stack_cache_checks(17);
                     c->set_stack_python_ns(kMax64 - 18);
                     for (int k : {1, 4, 5}) {
                       pt::HookKindCost* h = c->add_hook_kinds();
                       h->set_kind(static_cast<pt::HookKind>(k));
                       h->set_calls(19 + k);
                       h->set_ns(kMax64 - k);
                     }
                   },
                   [](const pt::TracePacket& p, Encoder* e) {
                     namespace k = f::counters;
                     const pt::Counters& c = p.counters();
                     e->Varint(k::kCopies, c.copies());
                     e->Varint(k::kAllocsRecorded, c.allocs_recorded());
                     e->Varint(k::kAllocsSeen, c.allocs_seen());
                     e->Varint(k::kBytesWritten, c.bytes_written());
                     e->Varint(k::kDropped, c.dropped_events());
                     e->Varint(k::kPinnedBytes, c.pinned_bytes());
                     e->Varint(k::kStacksCaptured, c.stacks_captured());
                     e->Varint(k::kStackCaptureNs, c.stack_capture_ns());
                     e->Varint(k::kHookCalls, c.hook_calls());
                     e->Varint(k::kHookNs, c.hook_ns());
                     e->Varint(k::kOwnThreadsCpuNs, c.own_threads_cpu_ns());
                     e->Varint(k::kPointerQueries, c.pointer_queries());
                     e->Varint(k::kPointerQueryNs, c.pointer_query_ns());
                     e->Varint(k::kCuptiSwitches, c.cupti_switches());
                     e->Varint(k::kCuptiSwitchNs, c.cupti_switch_ns());
                     e->Varint(k::kStackCacheHits, c.stack_cache_hits());
                     e->Varint(k::kStackCacheChecks, c.stack_cache_checks());
                     e->Varint(k::kStackPythonNs, c.stack_python_ns());
                     for (const pt::HookKindCost& h : c.hook_kinds()) {
                       namespace hk = f::hook_kind_cost;
                       const size_t m = e->BeginNested(k::kHookKinds);
                       e->Varint(hk::kKind, static_cast<uint64_t>(h.kind()));
                       e->Varint(hk::kCalls, h.calls());
                       e->Varint(hk::kNs, h.ns());
                       e->EndNested(m);
                     }
                   }});
  cases.push_back({f::packet::kRecording,
                   [](pt::TracePacket* p) {
                     pt::DeviceRecording* r = p->mutable_recording();
                     r->set_kernels(true);
                     r->set_reason("sampling");
                     r->set_kernel_rate(31234.5);
                     r->set_planned_ns(kMax64);
                     r->set_no_correlations(true);
                     r->set_detached(true);
                   },
                   [](const pt::TracePacket& p, Encoder* e) {
                     namespace k = f::recording;
                     const pt::DeviceRecording& r = p.recording();
                     e->Bool(k::kKernels, r.kernels());
                     e->String(k::kReason, r.reason().c_str());
                     e->Double(k::kKernelRate, r.kernel_rate());
                     e->Varint(k::kPlannedNs, r.planned_ns());
                     e->Bool(k::kNoCorrelations, r.no_correlations());
                     e->Bool(k::kDetached, r.detached());
                   }});
  cases.push_back({f::packet::kUtilization,
                   [](pt::TracePacket* p) {
                     pt::GpuUtilization* u = p->mutable_utilization();
                     u->set_cuda_device(-1);
                     u->set_nvml_index(kMax32);
                     u->set_pci_bus_id("0000:17:00.0");
                     for (uint64_t t : {uint64_t{1}, kMax64}) u->add_sample_ns(t);
                     for (uint32_t v : {0u, 100u}) u->add_percent(v);
                   },
                   [](const pt::TracePacket& p, Encoder* e) {
                     namespace k = f::utilization;
                     const pt::GpuUtilization& u = p.utilization();
                     e->SInt(k::kCudaDevice, u.cuda_device());
                     e->Varint(k::kNvmlIndex, u.nvml_index());
                     e->String(k::kPciBusId, u.pci_bus_id().c_str());
                     uint64_t ns[2] = {u.sample_ns(0), u.sample_ns(1)};
                     uint64_t pct[2] = {u.percent(0), u.percent(1)};
                     e->PackedVarints(k::kSampleNs, ns, 2);
                     e->PackedVarints(k::kPercent, pct, 2);
                   }});
  cases.push_back({f::packet::kThreadSample,
                   [](pt::TracePacket* p) {
                     for (uint32_t tid : {1u, kMax32}) {
                       pt::ThreadSample::Entry* t = p->mutable_thread_sample()->add_threads();
                       t->set_tid(tid);
                       t->set_cpu_ns(kMax64 - tid);
                       t->set_runqueue_ns(3);
                       t->set_minor_faults(4);
                       t->set_major_faults(5);
                     }
                   },
                   [](const pt::TracePacket& p, Encoder* e) {
                     namespace k = f::thread_sample;
                     for (const pt::ThreadSample::Entry& t : p.thread_sample().threads()) {
                       size_t m = e->BeginNested(k::kThreads);
                       e->Varint(k::entry::kTid, t.tid());
                       e->Varint(k::entry::kCpuNs, t.cpu_ns());
                       e->Varint(k::entry::kRunqueueNs, t.runqueue_ns());
                       e->Varint(k::entry::kMinorFaults, t.minor_faults());
                       e->Varint(k::entry::kMajorFaults, t.major_faults());
                       e->EndNested(m);
                     }
                   }});
  cases.push_back({f::packet::kLoader,
                   [](pt::TracePacket* p) {
                     pt::LoaderEvent* l = p->mutable_loader();
                     l->set_kind(pt::LOADER_END);
                     l->set_loader_id(kMax64);
                     l->set_end_ns(3);
                     l->set_index(4);
                     set_usage(l->mutable_usage_begin(), 5);
                     set_usage(l->mutable_usage_end(), 6);
                     l->set_num_workers(-7);  // int32: 10-byte varint
                     l->set_pin_memory(true);
                     l->set_prefetch_factor(9);
                     l->set_persistent_workers(true);
                     l->set_batch_size(11);
                     l->set_dataset_length(kMax64 - 12);
                     l->set_iterable(true);
                     l->set_site("train.py:14");
                     l->set_worker_id(-15);  // sint32: zigzag
                     l->set_batch_samples(kMax32);
                     l->set_user_site("run.py:17");
                     l->set_framework("transformers");
                   },
                   [](const pt::TracePacket& p, Encoder* e) {
                     namespace k = f::loader;
                     const pt::LoaderEvent& l = p.loader();
                     e->Varint(k::kKind, l.kind());
                     e->Varint(k::kLoaderId, l.loader_id());
                     e->Varint(k::kEnd, l.end_ns());
                     e->Varint(k::kIndex, l.index());
                     encode_usage(e, k::kUsageBegin, l.usage_begin());
                     encode_usage(e, k::kUsageEnd, l.usage_end());
                     e->Int32(k::kNumWorkers, l.num_workers());
                     e->Bool(k::kPinMemory, l.pin_memory());
                     e->Int32(k::kPrefetchFactor, l.prefetch_factor());
                     e->Bool(k::kPersistentWorkers, l.persistent_workers());
                     e->Int32(k::kBatchSize, l.batch_size());
                     e->Varint(k::kDatasetLength, l.dataset_length());
                     e->Bool(k::kIterable, l.iterable());
                     e->String(k::kSite, l.site().c_str());
                     e->SInt(k::kWorkerId, l.worker_id());
                     e->Varint(k::kBatchSamples, l.batch_samples());
                     e->String(k::kUserSite, l.user_site().c_str());
                     e->String(k::kFramework, l.framework().c_str());
                   }});
  return cases;
}

// Frames one packet as Trace.packet, the way the recorder's Packet does.
void EncodePacket(const Case& c, const pt::TracePacket& want, Encoder* e) {
  size_t outer = e->BeginNested(f::kTracePacket);
  e->Varint(f::packet::kTimestamp, want.timestamp_ns());
  e->Varint(f::packet::kTid, want.tid());
  size_t data = e->BeginNested(c.data_field);
  c.encode(want, e);
  e->EndNested(data);
  e->EndNested(outer);
}

TEST(WireRoundTrip, EveryFieldOfEveryPacketType) {
  std::vector<Case> cases = AllCases();
  pt::Trace want;
  for (size_t i = 0; i < cases.size(); ++i) {
    pt::TracePacket* p = want.add_packet();
    p->set_timestamp_ns(1000000000ull * (i + 1) + i);
    p->set_tid(static_cast<uint32_t>(4242 + i));
    cases[i].fill(p);
  }

  // The test itself covers the whole schema: every data case once, and
  // every field of every message non-zero.
  const google::protobuf::OneofDescriptor* data =
      pt::TracePacket::descriptor()->FindOneofByName("data");
  ASSERT_NE(data, nullptr);
  std::set<int> covered;
  for (const pt::TracePacket& p : want.packet()) covered.insert(p.data_case());
  EXPECT_EQ(covered.size(), static_cast<size_t>(data->field_count()))
      << "a TracePacket data case has no round-trip case here";
  for (int i = 0; i < want.packet_size(); ++i)
    ExpectEveryFieldSet(want.packet(i), "packet[" + std::to_string(i) + "]");

  std::vector<uint8_t> buf(1 << 16);
  Encoder e(buf.data(), buf.size());
  for (size_t i = 0; i < cases.size(); ++i) EncodePacket(cases[i], want.packet(i), &e);
  ASSERT_TRUE(e.ok());

  pt::Trace got;
  ASSERT_TRUE(got.ParseFromArray(e.data(), static_cast<int>(e.size())));
  ExpectNoUnknownFields(got, "trace");
  ASSERT_EQ(got.packet_size(), want.packet_size());
  for (int i = 0; i < want.packet_size(); ++i) {
    std::string diff;
    google::protobuf::util::MessageDifferencer d;
    d.ReportDifferencesToString(&diff);
    EXPECT_TRUE(d.Compare(want.packet(i), got.packet(i)))
        << "packet " << i << " (" << want.packet(i).GetDescriptor()->FindFieldByNumber(
                                          static_cast<int>(cases[i].data_field))->name()
        << "):\n" << diff;
  }
}

// Proto3 omits zero scalars; the encoder does the same, and a message whose
// fields are all zero still round-trips (as an empty nested message).
TEST(WireRoundTrip, ZeroValuesAreOmittedAndParseAsDefaults) {
  std::vector<uint8_t> buf(256);
  Encoder e(buf.data(), buf.size());
  size_t outer = e.BeginNested(f::kTracePacket);
  e.Varint(f::packet::kTimestamp, 0);
  size_t m = e.BeginNested(f::packet::kCopy);
  e.Varint(f::copy::kApi, 0);
  e.SInt(f::copy::kSrcDevice, 0);
  e.Int32(f::copy::kResult, 0);
  e.Bool(f::copy::kPerThread, false);
  e.String(f::copy::kApi, "");
  e.String(f::copy::kApi, nullptr);
  e.StringN(f::copy::kApi, "x", 0);
  e.PackedVarints(f::copy::kApi, nullptr, 0);
  e.EndNested(m);
  e.EndNested(outer);
  ASSERT_TRUE(e.ok());
  // 0x0A, 4-byte length, then the copy field tag and its 4-byte length.
  ASSERT_EQ(e.size(), 1u + 4u + 1u + 4u);
  pt::Trace t;
  ASSERT_TRUE(t.ParseFromArray(e.data(), static_cast<int>(e.size())));
  ASSERT_EQ(t.packet_size(), 1);
  EXPECT_TRUE(t.packet(0).has_copy());
  EXPECT_EQ(t.packet(0).copy().ByteSizeLong(), 0u);
}

// Nested lengths are 4-byte padded varints (non-minimal, valid protobuf);
// a file is 0x0A, varint length, TracePacket, repeated.
TEST(WireFraming, FourBytePaddedLengths) {
  std::vector<uint8_t> buf(1024);
  Encoder e(buf.data(), buf.size());
  size_t sizes[3];
  size_t starts[3];
  for (int i = 0; i < 3; ++i) {
    starts[i] = e.size();
    size_t outer = e.BeginNested(f::kTracePacket);
    e.Varint(f::packet::kTid, 7 + i);
    size_t m = e.BeginNested(f::packet::kThread);
    e.String(f::thread::kName, std::string(static_cast<size_t>(10 + 150 * i), 'a' + i).c_str());
    e.EndNested(m);
    e.EndNested(outer);
    sizes[i] = e.size() - starts[i];
  }
  ASSERT_TRUE(e.ok());
  const uint8_t* d = e.data();
  for (int i = 0; i < 3; ++i) {
    const uint8_t* p = d + starts[i];
    EXPECT_EQ(p[0], 0x0A) << "packet " << i;
    EXPECT_EQ(p[1] & 0x80, 0x80);
    EXPECT_EQ(p[2] & 0x80, 0x80);
    EXPECT_EQ(p[3] & 0x80, 0x80);
    EXPECT_EQ(p[4] & 0x80, 0x00);
    uint64_t len = (p[1] & 0x7f) | (uint64_t{p[2] & 0x7fu} << 7) | (uint64_t{p[3] & 0x7fu} << 14) |
                   (uint64_t{p[4]} << 21);
    EXPECT_EQ(len, sizes[i] - 5) << "packet " << i;
    // The inner length is padded the same way: tag 0x02 | (23 << 3).
    const uint8_t* in = p + 5;
    EXPECT_EQ(in[0], 0x10);  // tid, varint
    EXPECT_EQ(in[1], 7 + i);
    EXPECT_EQ(in[2], ((f::packet::kThread << 3 | 2) & 0x7f) | 0x80);
    EXPECT_EQ(in[3], (f::packet::kThread << 3 | 2) >> 7);
    uint64_t inner = (in[4] & 0x7f) | (uint64_t{in[5] & 0x7fu} << 7) |
                     (uint64_t{in[6] & 0x7fu} << 14) | (uint64_t{in[7]} << 21);
    EXPECT_EQ(inner, sizes[i] - 5 - 2 - 2 - 4);  // outer frame, tid, tag, length
  }
  // The stream parses as a Trace, and packet by packet.
  pt::Trace t;
  ASSERT_TRUE(t.ParseFromArray(d, static_cast<int>(e.size())));
  ASSERT_EQ(t.packet_size(), 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(t.packet(i).tid(), 7u + i);
    EXPECT_EQ(t.packet(i).thread().name().size(), 10u + 150u * i);
    pt::TracePacket one;
    ASSERT_TRUE(one.ParseFromArray(d + starts[i] + 5, static_cast<int>(sizes[i] - 5)));
    EXPECT_EQ(one.tid(), 7u + i);
  }
}

// A nested message longer than 2^21 bytes (beyond three varint bytes) still
// fits the 4-byte length; 2^28 and more is refused (ok() false), never
// written with a wrong length.
TEST(WireFraming, NestedMessageOverTwoToThe21) {
  const size_t text_len = (size_t{1} << 21) + 12345;
  std::string text(text_len, 'x');
  std::vector<uint8_t> buf(text_len + 64);
  Encoder e(buf.data(), buf.size());
  size_t outer = e.BeginNested(f::kTracePacket);
  size_t m = e.BeginNested(f::packet::kNotice);
  e.Varint(f::notice::kSeverity, f::kWarning);
  e.StringN(f::notice::kText, text.data(), text.size());
  e.EndNested(m);
  e.EndNested(outer);
  ASSERT_TRUE(e.ok());
  EXPECT_NE(e.data()[4], 0) << "the 4th length byte carries bits 21..27";
  pt::Trace t;
  ASSERT_TRUE(t.ParseFromArray(e.data(), static_cast<int>(e.size())));
  ASSERT_EQ(t.packet_size(), 1);
  EXPECT_EQ(t.packet(0).notice().severity(), pt::Notice::WARNING);
  EXPECT_EQ(t.packet(0).notice().text(), text);
}

TEST(WireFraming, NestedMessageOf2To28BytesIsRefused) {
  const size_t big = size_t{1} << 28;
  // Untouched anonymous pages read as zeros without costing memory.
  void* src = mmap(nullptr, big, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(src, MAP_FAILED);
  size_t cap = big + 64;
  void* dst = mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
  ASSERT_NE(dst, MAP_FAILED);
  Encoder e(static_cast<uint8_t*>(dst), cap);
  size_t outer = e.BeginNested(f::kTracePacket);
  e.Bytes(f::packet::kTid, src, big);  // wire type is irrelevant to the framing
  e.EndNested(outer);
  EXPECT_FALSE(e.ok());
  munmap(dst, cap);
  munmap(src, big);
}

// Running out of buffer fails the encoder cleanly: nothing past the end.
TEST(WireFraming, BufferOverflowIsRefused) {
  std::vector<uint8_t> buf(64, 0xEE);
  Encoder e(buf.data(), 32);
  size_t outer = e.BeginNested(f::kTracePacket);
  e.String(f::packet::kTid, std::string(40, 'y').c_str());
  e.Varint(f::packet::kTimestamp, 5);
  e.EndNested(outer);
  EXPECT_FALSE(e.ok());
  EXPECT_LE(e.size(), 32u);
  for (size_t i = 32; i < buf.size(); ++i) ASSERT_EQ(buf[i], 0xEE) << "byte " << i;
}

// The shim's own HostFacts encoder (read from this machine) parses with no
// unknown field and with the values the system reports.
TEST(WireRoundTrip, HostFactsOfThisMachine) {
  std::vector<uint8_t> buf(8192);
  Encoder e(buf.data(), buf.size());
  pinscope::shim::EncodeHostFacts(&e);
  ASSERT_TRUE(e.ok());
  pt::HostFacts h;
  ASSERT_TRUE(h.ParseFromArray(e.data(), static_cast<int>(e.size())));
  ExpectNoUnknownFields(h, "host");
  EXPECT_EQ(h.logical_cores(), static_cast<uint32_t>(sysconf(_SC_NPROCESSORS_ONLN)));
  EXPECT_GT(h.physical_cores(), 0u);
  EXPECT_GT(h.affinity_cores(), 0u);
  EXPECT_GT(h.ram_bytes(), 0u);
  EXPECT_FALSE(h.kernel_release().empty());
  EXPECT_FALSE(h.libc_version().empty());
}

}  // namespace

namespace {

// A thread name packet with `name`, encoded into a buffer of `cap` bytes.
std::string EncodedName(const std::string& name, size_t cap) {
  std::vector<uint8_t> buf(cap);
  Encoder e(buf.data(), buf.size());
  size_t m = e.BeginNested(f::packet::kThread);
  e.StringN(f::thread::kName, name.data(), name.size());
  e.EndNested(m);
  EXPECT_TRUE(e.ok());
  pt::TracePacket p;
  EXPECT_TRUE(p.ParseFromArray(e.data(), static_cast<int>(e.size())));
  return p.thread().name();
}

// Bytes that are not UTF-8 (argv, paths, names) are written as \xHH, so the
// packet parses as proto3 and the report shows what the bytes were; valid
// multi-byte text is kept as is.
TEST(WireStrings, InvalidUtf8IsWrittenAsHexEscapes) {
  EXPECT_EQ(EncodedName("a\xff\xfe" "b", 4096), "a\\xff\\xfeb");
  EXPECT_EQ(EncodedName("cut\xe2\x82", 4096), "cut\\xe2\\x82");
  EXPECT_EQ(EncodedName("\xc0\xaf\xed\xa0\x80", 4096), "\\xc0\\xaf\\xed\\xa0\\x80");
  EXPECT_EQ(EncodedName("\xe2\x82\xac\xf0\x9f\x98\x80", 4096), "\xe2\x82\xac\xf0\x9f\x98\x80");
  // Where the escapes would crowd the buffer, '?' keeps the length.
  const std::string bad(1000, '\xff');
  EXPECT_EQ(EncodedName(bad, 2048), std::string(1000, '?'));
  EXPECT_EQ(EncodedName(bad, 8192).size(), 4000u);
}

}  // namespace
