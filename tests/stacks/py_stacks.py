# Python test script for tests/stacks (stacks_e2e_test runs it under
# LD_PRELOAD=libpinscope.so): two copies of known size from known lines.
# ctypes.PyDLL keeps the GIL during the foreign call; ctypes.CDLL releases
# it (as PyTorch does around its operators).
#   python3 py_stacks.py LIBPY_HELPER
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


main()  # @py-module
