"""pinscope's DataLoader hook: times each stage of the input pipeline.

Installed by sitecustomize.py (on the job's PYTHONPATH under `pinscope run`).
When libpinscope.so is preloaded, it wraps, as torch.utils.data is imported:

- DataLoader.__init__ to note where the loader was built (file:line; the
  job's own line that led there when a library built it; the framework:
  the Hugging Face Trainer, Lightning, accelerate),
- DataLoader.__iter__ (each epoch) to record the loader's settings,
- _BaseDataLoaderIter.__next__: the training loop's wait for (or making of,
  with num_workers=0) each batch,
- the map-style and iterable fetchers' fetch: one batch being made
  (dataset __getitem__ + collate), in a worker or in the main process,
- torch.utils.data._utils.pin_memory.pin_memory: the pin thread's copy of a
  batch into pinned memory (pin_memory=True),
- the unpickling of what the workers' result queue delivers, on the thread
  that takes batches from it (the training loop's, or the pin thread's):
  receiving a made batch, which with the file_descriptor strategy asks the
  worker's process for its memory (multiprocessing.queues' pickler, replaced
  by a subclass that times loads on those threads only).

Each span is timed by the shim, which also reads the thread's CPU time and
page faults at both ends (LoaderEvent in proto/trace.proto). The wrappers
call the original and return what it returns or raise what it raises; the
program computes exactly what it did. What it cannot see: a custom
batch_sampler's own work outside fetch, an IterableDataset that spawns its
own workers, loaders that are not torch.utils.data.DataLoader.

It also serves `pinscope tune` and measured comparisons, without touching
the job's code:

- PINSCOPE_SET_NUM_WORKERS, PINSCOPE_SET_PIN_MEMORY (0/1),
  PINSCOPE_SET_PREFETCH_FACTOR, PINSCOPE_SET_PERSISTENT_WORKERS (0/1):
  DataLoader arguments replaced at construction (for every DataLoader);
- PINSCOPE_STOP_AFTER=N: the job exits (SystemExit(0), from __next__) once
  the training loop has taken N batches;
- PINSCOPE_THROUGHPUT=FILE: at the stop or at exit, one JSON line with the
  loop's batches/s and samples/s after PINSCOPE_STOP_WARMUP batches
  (default 5), from the times __next__ returned.

PINSCOPE_PYTHON_HOOK=0 turns it off.
"""

import ctypes
import functools
import os
import sys
import threading
import weakref

# fields::LoaderKind (shim/record/trace_fields.h)
_ITER, _NEXT, _FETCH, _PIN, _END, _RECV = 1, 2, 3, 4, 5, 6
_ABI = 3

_lib = None
_state = threading.local()
_sites = weakref.WeakKeyDictionary()  # DataLoader -> (site, user_site, framework)
_epochs = weakref.WeakKeyDictionary()  # DataLoader -> epochs started
_iter_ids = weakref.WeakKeyDictionary()  # iterator -> loader id
_fetches = [0]  # batches fetched in this process
_on = ctypes.c_int(1)  # the shim's pinscope_recording_on, once loaded
_said = set()


def _say_once(key, text):
    if key in _said:
        return
    _said.add(key)
    try:
        sys.stderr.write("pinscope: %s\n" % text)
    except Exception:
        pass


def _load_shim():
    try:
        # PyDLL: the calls keep the GIL. CDLL would release and take it back
        # around each one, and a thread waiting for it (the DataLoader's pin
        # thread, busy unpickling the next batch) could take it there and
        # hold the loop's thread back until it lets go. The shim's calls are
        # short, never block on the GIL and never call into Python.
        lib = ctypes.PyDLL(None)
        abi = lib.pinscope_loader_abi
    except (OSError, AttributeError):
        return None  # not running under libpinscope.so: nothing to record into
    abi.restype = ctypes.c_int
    if abi() != _ABI:
        _say_once("abi", "the Python hook does not match libpinscope.so; DataLoader timing is off")
        return None
    u64, i32, u32 = ctypes.c_uint64, ctypes.c_int32, ctypes.c_uint32
    text = ctypes.c_char_p
    lib.pinscope_loader_iter.argtypes = [u64, u64, i32, i32, i32, i32, i32, u64, i32, text, text, text]
    lib.pinscope_loader_iter.restype = None
    # begin: the span's CPU time only, one system call at each end;
    # begin_fetch: its whole usage (its page faults count: a batch being
    # made). end_at: end without a worker id or samples. Each argument is a
    # conversion (ctypes), so the frequent calls take few.
    for name in ("pinscope_loader_begin", "pinscope_loader_begin_fetch"):
        getattr(lib, name).argtypes = []
        getattr(lib, name).restype = None
    lib.pinscope_loader_end_at.argtypes = [u32, u64, u64]
    lib.pinscope_loader_end_at.restype = None
    lib.pinscope_loader_end.argtypes = [u32, u64, u64, i32, u32]
    lib.pinscope_loader_end.restype = None
    lib.pinscope_loader_mark.argtypes = [u32, u64, u64]
    lib.pinscope_loader_mark.restype = None
    global _on
    try:
        # 0 while the shim's recording is paused (tools/bench/turns.py's
        # paired sides): the wrappers then call the original straight.
        _on = ctypes.c_int.in_dll(lib, "pinscope_recording_on")
    except ValueError:
        pass  # a shim before it: always on
    return lib


# Frames that only wrap DataLoader.__init__ on the way from the code that
# builds it: Lightning replaces __init__ of DataLoader and its subclasses
# while train_dataloader() runs (_replace_dunder_methods), so the frame
# above pinscope's wrapper is Lightning's, not the user's.
_INIT_WRAPPERS = ("lightning/fabric/utilities/data.py", "lightning_fabric/utilities/data.py",
                  "pytorch_lightning/utilities/data.py")
# Frameworks that build the DataLoader for the user, and the knobs the report
# then names (analyzer/report/loader_knobs.cc): the first that any frame of
# the construction's stack belongs to, in this order (the Hugging Face
# Trainer builds its DataLoader through accelerate).
_FRAMEWORKS = (("/transformers/trainer", "transformers"), ("/lightning/pytorch/", "lightning"),
               ("/pytorch_lightning/", "lightning"), ("/lightning/fabric/", "lightning"),
               ("/lightning_fabric/", "lightning"), ("/accelerate/", "accelerate"))
_stdlib = []  # the interpreter's own library folders, read once


def _in_library(name):
    """Whether a frame's file is installed code (a package, the standard
    library, a frozen module), not the job's own."""
    if name.startswith("<") or "/site-packages/" in name or "/dist-packages/" in name:
        return True
    if not _stdlib:
        import sysconfig

        paths = sysconfig.get_paths()
        _stdlib.extend(sorted({os.path.join(paths[k], "") for k in ("stdlib", "platstdlib")
                               if paths.get(k)}))
    return any(name.startswith(folder) for folder in _stdlib)


def _construction():
    """Where the DataLoader being constructed comes from, as (site,
    user_site, framework): site is the first frame outside torch.utils.data,
    this module and __init__ wrappers ("file:line"); user_site the first
    frame of the job's own code, "" when that is the site or there is none;
    framework "transformers", "lightning", "accelerate" or ""."""
    site, user, best = "", "", len(_FRAMEWORKS)
    try:
        frame = sys._getframe(2)
        while frame is not None:
            name = frame.f_code.co_filename.replace(os.sep, "/")
            if "torch/utils/data" not in name and not name.endswith("pinscope_hook.py"):
                here = "%s:%d" % (frame.f_code.co_filename, frame.f_lineno)
                if not site and not name.endswith(_INIT_WRAPPERS):
                    site = here
                if not user and not _in_library(name):
                    user = here
            for i in range(best):
                if _FRAMEWORKS[i][0] in name:
                    best = i
                    break
            frame = frame.f_back
    except Exception:
        pass
    return site, "" if user == site else user, _FRAMEWORKS[best][1] if best < len(_FRAMEWORKS) else ""


def _int(value, default=0):
    try:
        return int(value) if value is not None else default
    except Exception:
        return default


def _dataset_length(loader):
    try:
        return len(loader.dataset)
    except Exception:
        return 0


def _overrides():
    """DataLoader arguments to replace, from PINSCOPE_SET_* (bad values are
    said once and ignored)."""
    out = {}
    for key, name, kind in (("PINSCOPE_SET_NUM_WORKERS", "num_workers", int),
                            ("PINSCOPE_SET_PIN_MEMORY", "pin_memory", bool),
                            ("PINSCOPE_SET_PREFETCH_FACTOR", "prefetch_factor", int),
                            ("PINSCOPE_SET_PERSISTENT_WORKERS", "persistent_workers", bool)):
        text = os.environ.get(key)
        if text is None or text == "":
            continue
        try:
            value = int(text)
            if value < 0:
                raise ValueError(text)
            out[name] = bool(value) if kind is bool else value
        except ValueError:
            _say_once(key, "%s=%r is not a whole number >= 0; ignored" % (key, text))
    return out


def _apply_overrides(original, self, args, kwargs):
    wanted = _overrides()
    if not wanted:
        return args, kwargs
    import inspect

    bound = inspect.signature(original).bind(self, *args, **kwargs)
    arguments = bound.arguments
    extra = arguments.pop("kwargs", None)  # a **kwargs catch-all, if any
    arguments.update(wanted)
    if arguments.get("num_workers", 0) == 0:
        # DataLoader refuses these without workers.
        arguments.pop("prefetch_factor", None)
        arguments["persistent_workers"] = False
    elif arguments.get("prefetch_factor") is None:
        arguments["prefetch_factor"] = 2
    call_kwargs = {k: v for k, v in arguments.items() if k != "self"}
    if extra:
        call_kwargs.update(extra)
    return (), call_kwargs


def _wrap_init(original):
    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        try:
            args, kwargs = _apply_overrides(original, self, args, kwargs)
        except Exception as error:
            _say_once("set", "PINSCOPE_SET_* not applied (%s)" % error)
        original(self, *args, **kwargs)
        try:
            _sites[self] = _construction()
        except Exception:
            pass

    return __init__


class _Loop:
    """The training loop's batches: when __next__ returned, for
    PINSCOPE_THROUGHPUT and PINSCOPE_STOP_AFTER. Counted per loader on the
    main thread: the training loop is the loader with the most batches, not
    an evaluation loader whose batches come between its steps. A loader is
    its construction site and dataset length, so one made anew every epoch
    counts as one (as analyzer/analyses/loader_identity.h tells them)."""

    def __init__(self):
        self.stop_after = _int(os.environ.get("PINSCOPE_STOP_AFTER"), 0)
        self.warmup = _int(os.environ.get("PINSCOPE_STOP_WARMUP"), 5)
        self.path = os.environ.get("PINSCOPE_THROUGHPUT", "")
        # Whether took() has anything to do: __next__ skips it (and the
        # lookups for its arguments) otherwise.
        self.active = bool(self.path or self.stop_after)
        self.loaders = {}  # loader key -> [times __next__ returned, batch size]
        self.written = False

    def took(self, loader_key, loader_batch_size):
        if not self.active:
            return
        import time

        entry = self.loaders.setdefault(loader_key, [[], 0])
        entry[0].append(time.monotonic())
        if loader_batch_size:
            entry[1] = loader_batch_size
        if self.stop_after and len(entry[0]) >= self.stop_after:
            self.write("stop_after")
            raise SystemExit(0)

    def write(self, why):
        if self.written or not self.path:
            return
        self.written = True
        all_times, self.batch_size = max(self.loaders.values(), key=lambda e: len(e[0]),
                                         default=([], 0))
        self.times = all_times
        times = self.times[self.warmup:]
        record = {"batches": len(self.times), "timed_batches": max(len(times) - 1, 0), "why": why}
        if len(times) >= 2 and times[-1] > times[0]:
            rate = (len(times) - 1) / (times[-1] - times[0])
            record["batches_per_s"] = round(rate, 4)
            if self.batch_size:
                record["samples_per_s"] = round(rate * self.batch_size, 2)
        for key in ("PINSCOPE_SET_NUM_WORKERS", "PINSCOPE_SET_PIN_MEMORY",
                    "PINSCOPE_SET_PREFETCH_FACTOR", "PINSCOPE_SET_PERSISTENT_WORKERS",
                    "PINSCOPE_PIN"):
            if os.environ.get(key):
                record[key] = os.environ[key]
        try:
            import json

            with open(self.path, "a") as out:
                out.write(json.dumps(record) + "\n")
        except OSError as error:
            _say_once("throughput", "cannot write %s (%s)" % (self.path, error))


_loop = _Loop()
_batch_sizes = weakref.WeakKeyDictionary()  # iterator -> batch size
_loop_keys = weakref.WeakKeyDictionary()  # iterator -> its loader's key for _Loop


def _wrap_iter(original):
    # DataLoader.__iter__ makes an iterator per epoch, or resets the one it
    # keeps (persistent_workers): either way one epoch begins here.
    @functools.wraps(original)
    def __iter__(self, *args, **kwargs):
        iterator = original(self, *args, **kwargs)
        try:
            epoch = _epochs.get(self, 0)
            _epochs[self] = epoch + 1
            _iter_ids[iterator] = id(self)
            _batch_sizes[iterator] = _int(self.batch_size)
            _loop_keys[iterator] = (_sites.get(self, ("", "", ""))[0], _dataset_length(self))
            iterable = _is_iterable(self)
            workers = _int(getattr(iterator, "_num_workers", self.num_workers))
            # What the iterator runs with: pin_memory is off without a GPU.
            pin = bool(getattr(iterator, "_pin_memory", self.pin_memory))
            _lib.pinscope_loader_iter(
                id(self), epoch, workers, int(pin),
                _int(self.prefetch_factor) if workers > 0 else 0,
                int(bool(getattr(self, "persistent_workers", False))),
                _int(self.batch_size), 0 if iterable else _dataset_length(self),
                int(iterable), *(x.encode("utf-8", "replace") for x in _sites.get(self, ("", "", ""))))
        except Exception as error:
            _say_once("iter", "the Python hook could not read a DataLoader's settings (%s)" % error)
        return iterator

    return __iter__


def _is_iterable(loader):
    try:
        from torch.utils.data import IterableDataset

        return isinstance(loader.dataset, IterableDataset)
    except Exception:
        return False


def _wrap_next(original):
    @functools.wraps(original)
    def __next__(self):
        if not _on.value:
            return original(self)
        lid = _iter_ids.get(self, 0)
        index = _int(getattr(self, "_num_yielded", 0))
        outer = getattr(_state, "receiving", None)
        _state.receiving = (lid, index)
        _lib.pinscope_loader_begin()
        try:
            data = original(self)
        except StopIteration:
            _lib.pinscope_loader_end_at(_NEXT, lid, index)
            _lib.pinscope_loader_mark(_END, lid, index)
            raise
        except BaseException:
            _lib.pinscope_loader_end_at(_NEXT, lid, index)
            raise
        finally:
            _state.receiving = outer
        _lib.pinscope_loader_end_at(_NEXT, lid, index)
        if _loop.active and threading.current_thread() is threading.main_thread():
            _loop.took(_loop_keys.get(self, lid), _batch_sizes.get(self, 0))
        return data

    return __next__


def _worker_id():
    try:
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        return info.id if info is not None else -1
    except Exception:
        return -1


def _wrap_fetch(original):
    @functools.wraps(original)
    def fetch(self, possibly_batched_index):
        if not _on.value:
            return original(self, possibly_batched_index)
        index = _fetches[0]
        _fetches[0] = index + 1
        try:
            samples = len(possibly_batched_index) if getattr(self, "auto_collation", False) else 1
        except Exception:
            samples = 0
        _lib.pinscope_loader_begin_fetch()
        try:
            return original(self, possibly_batched_index)
        finally:
            _lib.pinscope_loader_end(_FETCH, 0, index, _worker_id(), samples)

    return fetch


def _wrap_pin(original):
    @functools.wraps(original)
    def pin_memory(data, *args, **kwargs):
        # pin_memory recurses into lists and dicts: only the outermost call
        # is one batch.
        depth = getattr(_state, "pin_depth", 0)
        if depth or not _on.value:
            return original(data, *args, **kwargs)
        _state.pin_depth = 1
        _lib.pinscope_loader_begin()
        try:
            return original(data, *args, **kwargs)
        finally:
            _lib.pinscope_loader_end_at(_PIN, 0, 0)
            _state.pin_depth = 0

    return pin_memory


def _wrap_pin_loop(original):
    # The pin thread's body: what it unpickles from the workers' result
    # queue is a batch it receives.
    @functools.wraps(original)
    def _pin_memory_loop(*args, **kwargs):
        _state.receiving = (0, 0)
        return original(*args, **kwargs)

    return _pin_memory_loop


def _timed_queue_pickler():
    """multiprocessing.queues' pickler with loads timed as LOADER_RECV on a
    thread that takes batches (inside DataLoader.__next__, or the pin
    thread); everywhere else, and for dumps, it is the original."""
    import multiprocessing.queues as queues

    base = queues._ForkingPickler
    if getattr(base, "_pinscope_timed", False):
        return
    base_loads = base.loads

    class ForkingPickler(base):
        _pinscope_timed = True

        @staticmethod
        def loads(data, *args, **kwargs):
            receiving = getattr(_state, "receiving", None)
            if receiving is None or not _on.value:
                return base_loads(data, *args, **kwargs)
            _lib.pinscope_loader_begin()
            try:
                return base_loads(data, *args, **kwargs)
            finally:
                _lib.pinscope_loader_end_at(_RECV, receiving[0], receiving[1])

    ForkingPickler.__module__ = base.__module__
    ForkingPickler.__qualname__ = base.__qualname__
    queues._ForkingPickler = ForkingPickler


def _patch(module_name, module):
    if module_name == "torch.utils.data.dataloader":
        loader_cls = module.DataLoader
        loader_cls.__init__ = _wrap_init(loader_cls.__init__)
        loader_cls.__iter__ = _wrap_iter(loader_cls.__iter__)
        module._BaseDataLoaderIter.__next__ = _wrap_next(module._BaseDataLoaderIter.__next__)
        _timed_queue_pickler()
    elif module_name == "torch.utils.data._utils.fetch":
        for name in ("_MapDatasetFetcher", "_IterableDatasetFetcher"):
            cls = getattr(module, name, None)
            if cls is not None and "fetch" in cls.__dict__:
                cls.fetch = _wrap_fetch(cls.fetch)
    elif module_name == "torch.utils.data._utils.pin_memory":
        if hasattr(module, "pin_memory"):
            module.pin_memory = _wrap_pin(module.pin_memory)
        if hasattr(module, "_pin_memory_loop"):
            module._pin_memory_loop = _wrap_pin_loop(module._pin_memory_loop)


_TARGETS = ("torch.utils.data.dataloader", "torch.utils.data._utils.fetch",
            "torch.utils.data._utils.pin_memory")


class _Finder:
    """Patches the target modules right after they are executed."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _TARGETS:
            return None
        import importlib.machinery

        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original_exec = loader.exec_module

        def exec_module(module, _original=original_exec, _name=fullname):
            _original(module)
            try:
                _patch(_name, module)
            except Exception as error:
                _say_once("patch", "the Python hook could not wrap %s (%s)" % (_name, error))

        # A loader object per module (SourceFileLoader): patching it is local.
        loader.exec_module = exec_module
        return spec


def install():
    """Starts the hook if libpinscope.so is in the process; else does nothing."""
    global _lib
    if os.environ.get("PINSCOPE_PYTHON_HOOK", "1") == "0" or _lib is not None:
        return
    _lib = _load_shim()
    if _lib is None:
        return
    for name in _TARGETS:
        if name in sys.modules:
            _patch(name, sys.modules[name])
    sys.meta_path.insert(0, _Finder())
    if _loop.path:
        import atexit

        atexit.register(_loop.write, "exit")
