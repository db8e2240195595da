// e2e_copies_nocuda: a program with no CUDA runtime at all (not linked, never
// loaded). Under LD_PRELOAD=libpinscope.so it must run unchanged and leave
// no trace file (documented: a process writes its file on its first event).
#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  // Small allocations and stdio only: nothing pinscope records.
  char* p = static_cast<char*>(malloc(4096));
  memset(p, 1, 4096);
  printf("sum=%d\n", p[0] + p[4095]);
  free(p);
  return argc > 1 ? atoi(argv[1]) : 0;
}
