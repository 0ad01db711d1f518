# ui.demo_screenshot: the README's demo audit, headless, as a CI artifact. Writes the demo
# checkpoint with `kvscope-cli make-demo` into the build tree (once), runs `kvscope --audit`
# with the demo's two faults (layer 2 stores layer 1's K/V; request 1, arriving at tick 3,
# is given request 0's cache row), expects exit 1 (divergent) and a valid PNG.
#   cmake -DCLI=kvscope-cli -DEXE=kvscope -DMODEL=dir -DPNG=out.png -P DemoScreenshot.cmake
# Works with QT_QPA_PLATFORM=offscreen and under Xvfb (QT_QPA_PLATFORM=xcb).
if(NOT EXISTS "${MODEL}/config.json" OR NOT EXISTS "${MODEL}/model.safetensors")
  execute_process(COMMAND "${CLI}" make-demo "${MODEL}" --force
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "kvscope-cli make-demo failed (${rc}):\n${out}\n${err}")
  endif()
endif()

get_filename_component(_dir "${PNG}" DIRECTORY)
file(MAKE_DIRECTORY "${_dir}")
file(REMOVE "${PNG}")  # kvscope never overwrites an export
set(_args --audit --model "${MODEL}"
          --prompt "The cache must hold exactly one record per layer and position."
          --prompt "A second request arrives."
          --arrival 0 --arrival 3 --max-new 12
          --fault wrong_layer:layer=2,source=1
          --fault cross_request:request=1,victim=0
          --select-divergence --export-png "${PNG}")
execute_process(COMMAND "${EXE}" ${_args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "kvscope ${_args}\n-> exit ${rc}\nstdout: ${out}\nstderr: ${err}")
if(NOT rc EQUAL 1)
  message(FATAL_ERROR "expected exit 1 (divergent), got ${rc}")
endif()
if(NOT out MATCHES "Divergent: request 0, step 0, layer 2")
  message(FATAL_ERROR "the headline does not name the demo's first divergence")
endif()
if(NOT EXISTS "${PNG}")
  message(FATAL_ERROR "missing ${PNG}")
endif()
file(READ "${PNG}" _magic LIMIT 8 HEX)
if(NOT _magic STREQUAL "89504e470d0a1a0a")
  message(FATAL_ERROR "${PNG} is not a PNG (starts with ${_magic})")
endif()
file(SIZE "${PNG}" _size)
if(_size LESS 20000)
  message(FATAL_ERROR "${PNG} is only ${_size} bytes: an empty window?")
endif()
message(STATUS "wrote ${PNG} (${_size} bytes)")
