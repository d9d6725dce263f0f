# Installs into a staging root (DESTDIR) and checks that every shipped file arrives
# where the configured prefix puts it. DESTDIR, not --prefix: the config's destination
# is absolute (/etc for prefix /usr, <prefix>/etc otherwise) and must stay inside.
set(stage "${BUILD_DIR}/install-test")
file(REMOVE_RECURSE "${stage}")
set(ENV{DESTDIR} "${stage}")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${BUILD_DIR}" RESULT_VARIABLE rc OUTPUT_QUIET)
unset(ENV{DESTDIR})
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed: ${rc}")
endif()
set(root "${stage}${PREFIX}")
set(config "${stage}${SYSCONFDIR}/slotted-counterd/slotted-counterd.yaml")
foreach(f "${root}/bin/slotted-counterd" "${root}/lib/systemd/system/slotted-counterd.service"
          "${root}/lib/systemd/system/slotted-counterd.socket"
          "${config}" "${root}/share/man/man8/slotted-counterd.8.gz"
          "${root}/share/man/man5/slotted-counterd.yaml.5.gz"
          "${root}/share/doc/slotted-counterd/README.md"
          "${root}/share/doc/slotted-counterd/CHANGELOG.md"
          "${root}/share/doc/slotted-counterd/docs/install.md"
          "${root}/share/doc/slotted-counterd/docs/configuration.md"
          "${root}/share/doc/slotted-counterd/docs/openapi.yaml"
          "${root}/share/doc/slotted-counterd/examples/slotted-counterd.yaml"
          "${root}/share/doc/slotted-counterd/examples/slotted-counterd.json"
          "${root}/share/doc/slotted-counterd/examples/read-access-logs.conf")
  if(NOT EXISTS "${f}")
    message(FATAL_ERROR "missing after install: ${f}")
  endif()
endforeach()
# Nothing may land outside the staging root, nor in <prefix>/etc when the prefix is /usr.
if(PREFIX STREQUAL "/usr" AND EXISTS "${stage}/usr/etc")
  message(FATAL_ERROR "the config went to /usr/etc")
endif()
execute_process(COMMAND "${root}/bin/slotted-counterd" --config "${config}" --check-config
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the installed example config does not pass --check-config")
endif()
message(STATUS "1 passed, 0 failed")
