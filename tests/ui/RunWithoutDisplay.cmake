# Runs EXE with ARGS ("|"-separated, may be empty) with DISPLAY, WAYLAND_DISPLAY and
# QT_QPA_PLATFORM unset, as on a machine without a display, and checks its exit code
# (EXPECT) and that stdout + stderr match MATCH.
if(ARGS STREQUAL "")
  set(_args)
else()
  string(REPLACE "|" ";" _args "${ARGS}")
endif()
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env --unset=DISPLAY --unset=WAYLAND_DISPLAY --unset=QT_QPA_PLATFORM
          ${EXE} ${_args}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
if(NOT rc STREQUAL "${EXPECT}")
  message(FATAL_ERROR "kvscope ${ARGS} without a display: exit '${rc}', expected ${EXPECT}\n"
                      "--- stdout ---\n${out}\n--- stderr ---\n${err}")
endif()
if(NOT "${out}${err}" MATCHES "${MATCH}")
  message(FATAL_ERROR "kvscope ${ARGS} without a display: no '${MATCH}' in\n"
                      "--- stdout ---\n${out}\n--- stderr ---\n${err}")
endif()
