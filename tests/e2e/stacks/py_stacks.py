# Python test script for tests/e2e/stacks (stacks_e2e_test runs it under
# LD_PRELOAD=libpinscope.so): two copies of known size from known lines.
# ctypes.PyDLL keeps the GIL during the foreign call; ctypes.CDLL releases
# it (as PyTorch does around its operators).
#   python3 py_stacks.py LIBPY_HELPER [extra|sameline|twins|outers]
import ctypes
import sys

LIB = sys.argv[1]


def copy_with_gil():
    return ctypes.PyDLL(LIB).stacks_py_copy(1)  # @py-with-gil


def copy_without_gil():
    return ctypes.CDLL(LIB).stacks_py_copy(2)  # @py-without-gil


def main():
    if copy_with_gil() != 0:  # @py-main-gil
        sys.exit(1)
    if copy_without_gil() != 0:  # @py-main-nogil
        sys.exit(1)


# "extra": a copy from a generator (4 KiB) and one under 40 levels of Python
# recursion (3 KiB), for the depth limit.
def gen_copy():
    yield ctypes.PyDLL(LIB).stacks_py_copy(4)  # @py-gen


def recurse(n):
    if n == 0:
        return ctypes.PyDLL(LIB).stacks_py_copy(3)  # @py-recurse-leaf
    return recurse(n - 1)  # @py-recurse


def extra():
    if next(gen_copy()) != 0:  # @py-extra-gen
        sys.exit(1)
    if recurse(40) != 0:
        sys.exit(1)


# "sameline": 200 times, two deep copies from one line (5 and 6 KiB), one
# through CALL and one through CALL_FUNCTION_EX: the same Python frames
# (file, function, line) and native frames alike near the copy, but the
# interpreter's own C frames differ below them.
SIX = (6,)


def sameline():
    deep = ctypes.PyDLL(LIB).stacks_py_copy_deep
    for _ in range(200):
        deep(5); deep(*SIX)  # noqa: E702  @py-sameline


# "twins": 400 copies from one line, 1 KiB through TwinA and 2 KiB through
# TwinB in turn: one Python call, two native callers of one size between it
# and the copy.
def twins():
    twin = ctypes.PyDLL(LIB).stacks_py_copy_twin
    for i in range(400):
        twin(1 + i % 2)  # @py-twins


# "outers": 400 copies from one line of inner(), called in turn from
# outer_a (1 KiB) and outer_b (2 KiB): the same innermost Python frame and
# native frames, another function one Python frame out.
def inner(kib):
    return ctypes.PyDLL(LIB).stacks_py_copy(kib)  # @py-inner


def outer_a():
    return inner(1)  # @py-outer-a


def outer_b():
    return inner(2)  # @py-outer-b


def outers():
    for i in range(400):
        if (outer_a() if i % 2 == 0 else outer_b()) != 0:
            sys.exit(1)


if len(sys.argv) > 2 and sys.argv[2] == "outers":
    outers()
elif len(sys.argv) > 2 and sys.argv[2] == "sameline":
    sameline()
elif len(sys.argv) > 2 and sys.argv[2] == "twins":
    twins()
elif len(sys.argv) > 2 and sys.argv[2] == "extra":
    extra()  # @py-extra-module
else:
    main()  # @py-module
