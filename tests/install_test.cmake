# Installs into a fresh prefix and checks that every shipped file arrives.
set(prefix "${BUILD_DIR}/install-test")
file(REMOVE_RECURSE "${prefix}")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}"
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()
foreach(f bin/slotted-counterd lib/systemd/system/slotted-counterd.service etc/slotted-counterd/slotted-counterd.yaml)
  if(NOT EXISTS "${prefix}/${f}")
    message(FATAL_ERROR "missing after install: ${f}")
  endif()
endforeach()
execute_process(COMMAND "${prefix}/bin/slotted-counterd" --config "${prefix}/etc/slotted-counterd/slotted-counterd.yaml" --check-config
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the installed example config does not pass --check-config")
endif()
message(STATUS "1 passed, 0 failed")
