# build_info.cmake: writes OUT, the header base/build_commit.h, with the source tree's git commit
# (12 hex digits, "-dirty" when tracked files differ from it; "unknown" outside a git checkout).
# Run at every build (CMakeLists.txt, target ljperf_build_info); the file is rewritten only when
# its text changes, so that an unchanged commit recompiles nothing.
#   cmake -DSRC=<source dir> -DOUT=<header> -P build_info.cmake
set(commit unknown)
find_program(LJ_GIT git)
if(LJ_GIT)
  execute_process(COMMAND ${LJ_GIT} -C ${SRC} rev-parse --short=12 HEAD OUTPUT_VARIABLE head RESULT_VARIABLE rc
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(rc EQUAL 0 AND head)
    set(commit ${head})
    execute_process(COMMAND ${LJ_GIT} -C ${SRC} status --porcelain --untracked-files=no OUTPUT_VARIABLE changes
      RESULT_VARIABLE rc2 OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(rc2 EQUAL 0 AND changes)
      set(commit "${commit}-dirty")
    endif()
  endif()
endif()
set(text "/* build_commit.h: written by cmake/build_info.cmake at build time. */\n#define LJ_BUILD_COMMIT \"${commit}\"\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
else()
  set(old "")
endif()
if(NOT old STREQUAL text)
  file(WRITE ${OUT} "${text}")
endif()
