# One CTest test per GoogleTest suite instead of one per test (gtest_discover_tests).
#
# Each CTest test is a process, and a process of kvscope_core_tests pays for loading LibTorch
# before it runs anything: 0.6 s here, 1.6 s built with ASan + UBSan. With one process per
# test that start-up was about 70% of the sanitizer suite's time (941 tests: 1,500 of its
# 2,080 CPU seconds); one process per suite pays it once a suite (108 here). A suite's tests
# run in their declared order in one process, as `kvscope_core_tests --gtest_filter=Suite.*`
# runs them.
#
# kvscope_add_gtest_suites(TARGET [ENVIRONMENT list])
#   After each link of TARGET, lists its tests (--gtest_list_tests) and writes one
#   add_test per suite, named as the suite ("CliAudit", "Families/FamilyGolden"), which CTest
#   reads when it runs: `ctest -R '^CliAudit$'` runs a suite, the binary's own
#   --gtest_filter one test.
set(_kvscope_gtest_suites_script ${CMAKE_CURRENT_LIST_DIR}/GTestSuitesWrite.cmake)

function(kvscope_add_gtest_suites target)
  cmake_parse_arguments(ARG "" "" "ENVIRONMENT" ${ARGN})
  set(ctest_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_suites.cmake)
  string(REPLACE ";" "|" environment "${ARG_ENVIRONMENT}")
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -DEXECUTABLE=$<TARGET_FILE:${target}> -DCTEST_FILE=${ctest_file}
            "-DENVIRONMENT=${environment}" -P ${_kvscope_gtest_suites_script}
    COMMENT "Listing the GoogleTest suites of ${target}"
    VERBATIM)
  # CTest reads the file when it runs; before the first build it does not exist yet.
  set(include_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_suites_include.cmake)
  file(WRITE ${include_file}
    "if(EXISTS \"${ctest_file}\")\n  include(\"${ctest_file}\")\nelse()\n"
    "  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${include_file})
endfunction()
