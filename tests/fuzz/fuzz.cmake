# fuzz.cmake — the libFuzzer target for the safetensors header parser,
# included from the top-level CMakeLists.txt.
#
# libFuzzer comes with clang, while the project may be built with gcc, so the
# target is compiled by a direct clang command: the fuzz harness, the parser
# (engine/io/safetensors_parse.c) and the error helpers it uses (engine/error.c),
# with ASan + UBSan, against Jansson. VENOM_FUZZ defaults to ON when such a
# clang is found (a probe program links with -fsanitize=fuzzer), so the suite
# runs the fuzzer for 5 s (tests/fuzz/run.sh, a TAP skip otherwise).

find_program(VENOM_CLANG NAMES clang clang-16 clang-15 clang-14)
set(VENOM_FUZZ_DEFAULT OFF)
if(VENOM_CLANG)
  set(probe ${CMAKE_BINARY_DIR}/fuzz_probe.c)
  file(WRITE ${probe} "#include <stddef.h>\n#include <stdint.h>\n"
    "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return d && n ? 0 : 0; }\n")
  execute_process(COMMAND ${VENOM_CLANG} -fsanitize=fuzzer ${probe} -o ${CMAKE_BINARY_DIR}/fuzz_probe
                  RESULT_VARIABLE probe_rc OUTPUT_QUIET ERROR_QUIET)
  if(probe_rc EQUAL 0)
    set(VENOM_FUZZ_DEFAULT ON)
  endif()
endif()
option(VENOM_FUZZ "Build tests/fuzz/fuzz_safetensors with clang's libFuzzer" ${VENOM_FUZZ_DEFAULT})

if(VENOM_FUZZ)
  if(NOT VENOM_CLANG)
    message(FATAL_ERROR "VENOM_FUZZ needs clang (with libFuzzer): apt-get install clang")
  endif()
  set(fuzz_exe ${CMAKE_BINARY_DIR}/tests/fuzz_safetensors)
  set(fuzz_sources tests/fuzz/fuzz_safetensors.c engine/io/safetensors_parse.c engine/error.c)
  add_custom_command(OUTPUT ${fuzz_exe}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/tests
    COMMAND ${VENOM_CLANG} -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined
            -I${PROJECT_SOURCE_DIR}/engine -I${PROJECT_SOURCE_DIR}/engine/include -I${PROJECT_SOURCE_DIR}/engine/io -I${PROJECT_SOURCE_DIR}/kernels ${JANSSON_CFLAGS} ${fuzz_sources}
            ${JANSSON_LDFLAGS} -o ${fuzz_exe}
    DEPENDS ${fuzz_sources} engine/io/safetensors.h engine/internal.h engine/include/venom.h kernels/kernels.h
    WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
    COMMENT "Building the libFuzzer target fuzz_safetensors with ${VENOM_CLANG}"
    VERBATIM)
  add_custom_target(fuzz_safetensors ALL DEPENDS ${fuzz_exe})
endif()

venom_tap_script(fuzz_safetensors
  "exec sh \"${PROJECT_SOURCE_DIR}/tests/fuzz/run.sh\" \"${CMAKE_BINARY_DIR}/tests/fuzz_safetensors\"")
