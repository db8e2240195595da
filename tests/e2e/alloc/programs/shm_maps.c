/* One segment mapped and unmapped 200 times on a thread of its own (a
   DataLoader's pin thread receiving batch tensors): which of those maps take
   a stack (shim/core/shm_core.cc, MapTakesStack). Made, truncated, unlinked
   and closed on the main thread. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define kMaps 200
#define kBytes (64 * 1024)

static int g_fd = -1;

static void* Mapper(void* arg) {
  (void)arg;
  for (int i = 0; i < kMaps; ++i) {
    void* p = mmap(NULL, kBytes, PROT_READ, MAP_SHARED, g_fd, 0);
    if (p == MAP_FAILED || munmap(p, kBytes) != 0) {
      perror("shm_maps: map");
      exit(1);
    }
  }
  return NULL;
}

int main(void) {
  char name[64];
  snprintf(name, sizeof name, "/pinscope_e2e_maps_%d", (int)getpid());
  g_fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (g_fd < 0 || ftruncate(g_fd, kBytes) != 0) {
    perror("shm_maps: segment");
    return 1;
  }
  pthread_t t;
  if (pthread_create(&t, NULL, Mapper, NULL) != 0 || pthread_join(t, NULL) != 0) return 1;
  shm_unlink(name);
  close(g_fd);
  return 0;
}
