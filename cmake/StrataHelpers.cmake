# Helper functions so each module's CMakeLists.txt stays a few lines long.
#
#   strata_library(NAME SOURCES... DEPS...)   static library strata_<NAME>
#   strata_test(NAME SOURCES... DEPS...)      cmocka test executable registered with ctest
#   strata_fuzzer(NAME SOURCES... DEPS...)    libFuzzer target, only when STRATA_FUZZ is on

function(strata_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(strata_${name} STATIC ${ARG_SOURCES})
  target_link_libraries(strata_${name} PUBLIC ${ARG_DEPS})
  strata_expose_headers(strata_${name})
endfunction()

# Include paths follow the architecture: code sees the headers of its own module and of the
# modules it links (DEPS, transitively), nothing else, so an undeclared dependency fails to
# compile. A module under lib/ is included as "<dir>/<header>.h"; its include root is a directory
# of its own in the build tree, build/include/<dir>/, holding one link, <dir>, to its sources
# (lib/ itself is never on the path: it would expose every module). A service, agent or other
# directory exposes itself to what links it (cmd/strata, its tests and benchmarks).
function(strata_expose_headers target)
  file(RELATIVE_PATH rel ${CMAKE_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  if(rel MATCHES "^lib/[^/]+$")
    get_filename_component(dir ${CMAKE_CURRENT_SOURCE_DIR} NAME)
    set(root ${CMAKE_BINARY_DIR}/include/${dir})
    if(NOT EXISTS ${root}/${dir})
      file(MAKE_DIRECTORY ${root})
      file(CREATE_LINK ${CMAKE_CURRENT_SOURCE_DIR} ${root}/${dir} SYMBOLIC)
    endif()
    target_include_directories(${target} PUBLIC ${root})
  else()
    target_include_directories(${target} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR})
  endif()
endfunction()

function(strata_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT STRATA_BUILD_TESTS)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} PkgConfig::CMOCKA)
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "unit;${ARG_LABELS}" TIMEOUT 300
                       ENVIRONMENT "STRATA_SOURCE_DIR=${CMAKE_SOURCE_DIR}")
endfunction()

function(strata_fuzzer name)
  cmake_parse_arguments(ARG "" "CORPUS" "SOURCES;DEPS" ${ARGN})
  if(NOT ARG_CORPUS)
    set(ARG_CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz-corpus)
  endif()
  if(NOT STRATA_FUZZ)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  # Recorded so scripts/test.sh can run every fuzzer with its seed corpus (fuzz-corpus/ beside it
  # unless CORPUS names another directory).
  set_property(GLOBAL APPEND PROPERTY STRATA_FUZZERS "$<TARGET_FILE:${name}> ${ARG_CORPUS}")
endfunction()

# Writes build/fuzzers.txt: one "binary corpus-dir" line per fuzzer. Called at the end of the
# top-level CMakeLists.txt.
function(strata_write_fuzzer_manifest)
  get_property(fuzzers GLOBAL PROPERTY STRATA_FUZZERS)
  string(REPLACE ";" "\n" lines "${fuzzers}")
  file(GENERATE OUTPUT ${CMAKE_BINARY_DIR}/fuzzers.txt CONTENT "${lines}\n")
endfunction()
