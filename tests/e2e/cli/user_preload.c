/* A stand-in for a library the user preloads already (for example a memory
 * profiler): `pinscope run` must keep it in LD_PRELOAD, after libpinscope.so. */
int cli_user_preload_marker(void) { return 42; }
