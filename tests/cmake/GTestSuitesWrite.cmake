# Run by kvscope_add_gtest_suites (GTestSuites.cmake) after a test executable links:
# EXECUTABLE's suites -> CTEST_FILE, one add_test each. ENVIRONMENT: '|'-separated VAR=value.
execute_process(COMMAND ${EXECUTABLE} --gtest_list_tests
                OUTPUT_VARIABLE listing ERROR_VARIABLE errors RESULT_VARIABLE status
                TIMEOUT 60)
if(NOT status EQUAL 0)
  file(REMOVE ${CTEST_FILE})
  message(FATAL_ERROR "${EXECUTABLE} --gtest_list_tests failed (${status}):\n${errors}${listing}")
endif()
string(REPLACE "|" ";" environment "${ENVIRONMENT}")
string(REPLACE "\n" ";" lines "${listing}")
set(out "# Written by GTestSuitesWrite.cmake from ${EXECUTABLE} --gtest_list_tests.\n")
set(count 0)
foreach(line IN LISTS lines)
  # A suite line starts in column 0 and ends its name with '.' ("Suite." or
  # "Prefix/Suite.  # TypeParam = ..."); test lines are indented.
  if(line MATCHES "^([A-Za-z0-9_/]+)\\.")
    set(suite "${CMAKE_MATCH_1}")
    string(APPEND out "add_test([=[${suite}]=] [=[${EXECUTABLE}]=] [=[--gtest_filter=${suite}.*]=])\n")
    # gtest prints "[  PASSED  ] 0 tests." when every test of the filter skipped (GTEST_SKIP):
    # CTest then says the suite was skipped, not that it passed.
    string(APPEND out "set_tests_properties([=[${suite}]=] PROPERTIES SKIP_REGULAR_EXPRESSION [=[\\[  PASSED  \\] 0 tests\\.]=]")
    if(environment)
      string(APPEND out " ENVIRONMENT [=[${environment}]=]")
    endif()
    string(APPEND out ")\n")
    math(EXPR count "${count} + 1")
  endif()
endforeach()
if(count EQUAL 0)
  message(FATAL_ERROR "${EXECUTABLE} --gtest_list_tests listed no suite:\n${listing}")
endif()
file(WRITE ${CTEST_FILE} "${out}")
