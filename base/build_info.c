/* build_info.c: the version and the git commit of the build (base.h). */
#include "base/base.h"

#if defined(__has_include)
#if __has_include("base/build_commit.h")
#include "base/build_commit.h" /* generated at build time by cmake/build_info.cmake */
#endif
#endif
#ifndef LJ_BUILD_COMMIT
#define LJ_BUILD_COMMIT "unknown"
#endif

const char *lj_version(void) { return "0.1.0"; }

const char *lj_build_commit(void) { return LJ_BUILD_COMMIT; }
