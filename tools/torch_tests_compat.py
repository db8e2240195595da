"""The PyTorch-tests check's version-skew shim (tools/torch_tests.py copies
this file to WORK/compat/sitecustomize.py and puts that folder first on
PYTHONPATH, in every mode alike, so it cannot make a difference between
modes).

The test files are PyTorch 2.6's (Debian's source); the GPU machine's torch
is newer, and its torch.testing._internal has dropped or moved names the 2.6
files import (test_torch.py: `from torch.testing._internal.common_cuda
import tf32_is_not_fp32`). This shim makes each such name what PyTorch 2.6
defined it as, taken from 2.6's own source (tools/gpu_fetch_torch_tests.sh
puts torch/testing/_internal/*.py of the same tarball into
DEST/torch26/testing/_internal):

  * every module under PINSCOPE_TT_COMPAT_PKG (torch.testing._internal) gets
    a module __getattr__ (PEP 562; `from M import NAME` consults it): a name
    the installed module lacks is looked up among the top-level definitions
    of 2.6's M.py (def, class, NAME = ...), executed in the installed
    module's namespace (after those of 2.6's module-level imports that
    bind names the installed module lacks), and so defined as in 2.6 from
    then on;
  * a module the installed torch lacks altogether is loaded from 2.6's file.

A name 2.6 did not define either stays missing (the ImportError stands).
Each name or module supplied is appended to PINSCOPE_TT_COMPAT_LOG
("name MODULE NAME" / "module MODULE" / "failed MODULE NAME: why"), which
the harness reports. Another sitecustomize on sys.path (the distribution's)
still runs afterwards.
"""
import ast
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_SRC = os.environ.get("PINSCOPE_TT_COMPAT_SRC", "")
_LOG = os.environ.get("PINSCOPE_TT_COMPAT_LOG", "")
_PKG = os.environ.get("PINSCOPE_TT_COMPAT_PKG", "torch.testing._internal")
_defs = {}  # module name -> {name: top-level node} of its 2.6 source, or None


def _log(line):
    if not _LOG:
        return
    try:
        fd = os.open(_LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, (line + "\n").encode())
        os.close(fd)
    except OSError:
        pass


def _source_path(modname):
    rel = modname[len(_PKG) + 1:].split(".")
    return os.path.join(_SRC, *rel) + ".py"


def _definitions(modname):
    if modname not in _defs:
        path, table = _source_path(modname), None
        if os.path.isfile(path):
            table = {"": []}  # "": the module's top-level imports
            tree = ast.parse(open(path, encoding="utf-8").read(), path)
            for node in tree.body:  # the last definition of a name wins, as when run
                names = []
                if isinstance(node, (ast.Import, ast.ImportFrom)) and getattr(node, "level", 0) == 0:
                    table[""].append(node)
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names = [node.name]
                elif isinstance(node, ast.Assign):
                    names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
                    names = [node.target.id]
                for n in names:
                    table[n] = (node, path)
        _defs[modname] = table
    return _defs[modname]


def _install(mod):
    d = mod.__dict__
    if d.get("__pinscope_tt_compat__"):
        return
    prev = d.get("__getattr__")

    def __getattr__(name):
        if prev is not None:
            try:
                return prev(name)
            except AttributeError:
                pass
        if name.startswith("__"):
            raise AttributeError("module %r has no attribute %r" % (mod.__name__, name))
        found = (_definitions(mod.__name__) or {}).get(name)
        if found is None:
            raise AttributeError("module %r has no attribute %r (nor had PyTorch 2.6's)" % (mod.__name__, name))
        node, path = found
        _imports(d, _definitions(mod.__name__)[""], path)
        try:
            exec(compile(ast.Module(body=[node], type_ignores=[]), path, "exec"), d)
            value = d[name]
        except Exception as e:  # noqa: BLE001 - reported, then the import fails as it would have
            _log("failed %s %s: %s: %s" % (mod.__name__, name, type(e).__name__, str(e)[:200]))
            raise AttributeError("module %r has no attribute %r (PyTorch 2.6's definition fails here: %s)"
                                 % (mod.__name__, name, e)) from e
        _log("name %s %s" % (mod.__name__, name))
        return value

    d["__getattr__"] = __getattr__
    d["__pinscope_tt_compat__"] = True


def _imports(d, nodes, path):
    """2.6's module-level imports whose names the installed module lacks
    (a 2.6 definition may use them), each on its own; one that fails is
    left out."""
    for node in nodes:
        bound = [(a.asname or a.name).split(".")[0] for a in node.names]
        if "*" in bound or all(b in d for b in bound):
            continue
        try:
            exec(compile(ast.Module(body=[node], type_ignores=[]), path, "exec"), d)
        except Exception:  # noqa: BLE001
            pass


class _Loader(importlib.abc.Loader):
    def __init__(self, inner):
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        _install(module)

    def __getattr__(self, name):  # get_source, get_filename, ... of the real loader
        return getattr(self._inner, name)


class _Front(importlib.abc.MetaPathFinder):
    """First on sys.meta_path: the installed module, its loader wrapped."""

    def find_spec(self, name, path, target=None):
        if not name.startswith(_PKG + "."):
            return None
        for f in sys.meta_path:
            if isinstance(f, (_Front, _Back)) or not hasattr(f, "find_spec"):
                continue
            spec = f.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


class _Back(importlib.abc.MetaPathFinder):
    """Last on sys.meta_path: a module the installed package lacks, from 2.6."""

    def find_spec(self, name, path, target=None):
        if not name.startswith(_PKG + "."):
            return None
        src = _source_path(name)
        if not os.path.isfile(src):
            return None
        _log("module %s" % name)
        spec = importlib.util.spec_from_file_location(name, src)
        spec.loader = _Loader(spec.loader)
        return spec


if _SRC and os.path.isdir(_SRC):
    sys.meta_path.insert(0, _Front())
    sys.meta_path.append(_Back())
    for _n, _m in list(sys.modules.items()):
        if _n.startswith(_PKG + ".") and _m is not None:
            _install(_m)


def _chain():
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None or os.path.abspath(spec.origin or "") == os.path.abspath(__file__):
        return
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception:  # noqa: BLE001 - as site.py: a failing sitecustomize is not fatal
        pass


_chain()
