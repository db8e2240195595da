# Test of pinscope's CUDA runtime TEST DOUBLE: checks the dynamic symbol table
# of a fake libcudart. Every defined symbol must be cuda* or fakecuda_* with
# the default version node libcudart.so.<MAJOR>, and REQUIRED must be there.
# Usage: cmake -DNM=nm -DLIB=libcudart.so.13 -DMAJOR=13 -DREQUIRED="a;b" -P check_exports.cmake
execute_process(COMMAND ${NM} -D --defined-only ${LIB}
  OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} failed on ${LIB}")
endif()
string(REPLACE "\n" ";" lines "${out}")
set(node "libcudart.so.${MAJOR}")
string(REPLACE "." "\\." node_re "${node}")
set(count 0)
foreach(line IN LISTS lines)
  if(line STREQUAL "")
    continue()
  endif()
  if(line MATCHES " A ${node_re}$")
    continue()  # the version node's own symbol
  endif()
  if(NOT line MATCHES " [TWV] (fakecuda_|cuda)[A-Za-z0-9_]*@@${node_re}$")
    message(FATAL_ERROR "unexpected export in ${LIB}: '${line}'")
  endif()
  math(EXPR count "${count} + 1")
endforeach()
foreach(sym IN LISTS REQUIRED)
  if(NOT out MATCHES " ${sym}@@${node_re}\n")
    message(FATAL_ERROR "${LIB} lacks ${sym}@@${node}")
  endif()
endforeach()
message(STATUS "${LIB}: ${count} exports, all @@${node}")
