# fuzz.cmake - the GGUF fuzz target and its bounded ctest run.
#
# Included from the top-level CMakeLists.txt after the tests are defined.
# fuzz_gguf is fuzz/fuzz_gguf.c linked with libFuzzer, AddressSanitizer and
# UndefinedBehaviorSanitizer. libFuzzer needs clang: when the main build
# uses clang the target is an ordinary executable; when it uses gcc, clang
# builds it directly through a custom command from the few sources the GGUF
# module needs (not the whole library, so no gcc-built object meets clang's
# sanitizer runtime). When no clang with libFuzzer is found the target and
# its test are left out with a configure-time message (on Debian libFuzzer is
# in libclang-rt-<v>-dev, which clang only recommends).
#
# ctest fuzz/gguf runs the fuzzer for 60 s on a seed corpus that
# model_test_gguf --write-corpus generates (fixture fuzz/gguf_seeds); new
# inputs collect in build/fuzz/gguf_work and are reused by the next run.
option(TSL_FUZZ "Build the libFuzzer targets (needs clang)" ON)

if(TSL_FUZZ)
  set(TSL_FUZZ_GGUF_SOURCES
    ${CMAKE_SOURCE_DIR}/fuzz/fuzz_gguf.c
    ${CMAKE_SOURCE_DIR}/src/model/gguf.c
    ${CMAKE_SOURCE_DIR}/src/core/types.c
    ${CMAKE_SOURCE_DIR}/src/core/context.c
    ${CMAKE_SOURCE_DIR}/src/core/log.c
    ${CMAKE_SOURCE_DIR}/src/core/ops.c
    ${CMAKE_SOURCE_DIR}/src/core/graph.c
    ${CMAKE_SOURCE_DIR}/src/fault/error.c)
  set(TSL_FUZZ_HEADERS
    ${CMAKE_SOURCE_DIR}/include/tensile/tensile.h
    ${CMAKE_SOURCE_DIR}/include/tensile/model.h
    ${CMAKE_SOURCE_DIR}/src/core/core.h)
  set(TSL_FUZZ_SAN -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
  set(TSL_FUZZ_GGUF_EXE "")

  if(CMAKE_C_COMPILER_ID MATCHES "Clang")
    set(TSL_FUZZ_CLANG ${CMAKE_C_COMPILER})
  else()
    find_program(TSL_FUZZ_CLANG NAMES clang clang-18 clang-17 clang-16 clang-15 clang-14)
  endif()

  set(TSL_FUZZ_OK FALSE)
  if(TSL_FUZZ_CLANG)
    set(probe_dir ${CMAKE_BINARY_DIR}/fuzz/probe)
    file(MAKE_DIRECTORY ${probe_dir})
    file(WRITE ${probe_dir}/probe.c
      "#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n")
    execute_process(COMMAND ${TSL_FUZZ_CLANG} ${TSL_FUZZ_SAN} ${probe_dir}/probe.c -o ${probe_dir}/probe
                    RESULT_VARIABLE probe_rc OUTPUT_QUIET ERROR_QUIET)
    if(probe_rc EQUAL 0)
      set(TSL_FUZZ_OK TRUE)
    endif()
  endif()

  if(NOT TSL_FUZZ_OK)
    message(STATUS "fuzz_gguf: no clang with libFuzzer found; the fuzz target and fuzz/gguf are left out")
  elseif(CMAKE_C_COMPILER_ID MATCHES "Clang")
    add_executable(fuzz_gguf ${TSL_FUZZ_GGUF_SOURCES})
    target_include_directories(fuzz_gguf PRIVATE include src)
    target_compile_options(fuzz_gguf PRIVATE ${TSL_FUZZ_SAN} -g -O1 -fno-omit-frame-pointer)
    target_link_options(fuzz_gguf PRIVATE ${TSL_FUZZ_SAN})
    target_link_libraries(fuzz_gguf PRIVATE Threads::Threads m)
    set(TSL_FUZZ_GGUF_EXE $<TARGET_FILE:fuzz_gguf>)
  else()
    set(out ${CMAKE_BINARY_DIR}/bin/fuzz_gguf)
    add_custom_command(
      OUTPUT ${out}
      COMMAND ${TSL_FUZZ_CLANG} -std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer
              -Wall -Wextra -Wvla -Wno-unused-parameter ${TSL_FUZZ_SAN}
              -I${CMAKE_SOURCE_DIR}/include -I${CMAKE_SOURCE_DIR}/src
              ${TSL_FUZZ_GGUF_SOURCES} -lm -lpthread -o ${out}
      DEPENDS ${TSL_FUZZ_GGUF_SOURCES} ${TSL_FUZZ_HEADERS}
      COMMENT "Building fuzz_gguf with clang (libFuzzer, ASan, UBSan)"
      VERBATIM)
    add_custom_target(fuzz_gguf ALL DEPENDS ${out})
    set(TSL_FUZZ_GGUF_EXE ${out})
  endif()

  if(TSL_FUZZ_OK AND TARGET model_test_gguf)
    set(seed_dir ${CMAKE_BINARY_DIR}/fuzz/gguf_seeds)
    set(work_dir ${CMAKE_BINARY_DIR}/fuzz/gguf_work)
    file(MAKE_DIRECTORY ${seed_dir} ${work_dir})
    add_test(NAME fuzz/gguf_seeds COMMAND $<TARGET_FILE:model_test_gguf> --write-corpus ${seed_dir})
    set_tests_properties(fuzz/gguf_seeds PROPERTIES FIXTURES_SETUP fuzz_gguf_seeds)
    add_test(NAME fuzz/gguf
             COMMAND ${TSL_FUZZ_GGUF_EXE} -max_total_time=60 -rss_limit_mb=2048 -timeout=10
                     -print_final_stats=1 -artifact_prefix=${CMAKE_BINARY_DIR}/fuzz/ ${work_dir} ${seed_dir}
             WORKING_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
    set_tests_properties(fuzz/gguf PROPERTIES FIXTURES_REQUIRED fuzz_gguf_seeds TIMEOUT 300)
  endif()
endif()
