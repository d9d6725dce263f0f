# Registers a GoogleTest executable with ctest one entry per test suite, not per test:
# the suite's tests run in one process, one after the other, and share the servers the
# process starts (tests/support: shared_mariadb(), shared_server()), so a suite of twenty
# tests starts its MariaDB once instead of twenty times. Run after each build of the
# executable (tests/CMakeLists.txt); writes OUTPUT, which ctest includes.
#
#   cmake -DBINARY=path -DOUTPUT=file.cmake -DWORKDIR=dir -DTIMEOUT=seconds
#         [-DLABELS=label] [-DALONE="Suite.Test,Suite.Other"] -P discover_suites.cmake
#
# ALONE names tests that get an entry of their own (and are left out of their suite's;
# each parameter's instance an entry):
# scripts/test runs the tests held to a wall clock one at a time. COST is the number of
# tests in the entry, so that on a first run, with no timings recorded yet, ctest starts
# the longest suites first and the short ones fill in beside them.
cmake_minimum_required(VERSION 3.20)

execute_process(COMMAND "${BINARY}" --gtest_list_tests
                OUTPUT_VARIABLE listing RESULT_VARIABLE rc ERROR_VARIABLE errors TIMEOUT 60)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${BINARY} --gtest_list_tests failed (${rc}): ${errors}")
endif()

string(REPLACE "," ";" alone "${ALONE}")
# gtest prints "Suite." and then "  Test", each maybe followed by "  # GetParam() = ...".
# The comments go first: a parameter's text may hold anything, ';' too.
string(REGEX REPLACE "  #[^\n]*" "" listing "${listing}")
string(REPLACE ";" "" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")

set(suites "")
set(suite "")
foreach(line IN LISTS lines)
  if(line MATCHES "^([^ ]+)\\.$")
    set(suite "${CMAKE_MATCH_1}")
    if(NOT suite MATCHES "^DISABLED_|/DISABLED_")
      list(APPEND suites "${suite}")
      set(tests_${suite} "")
    endif()
  elseif(line MATCHES "^  ([^ ]+)$" AND NOT suite STREQUAL "")
    set(test "${CMAKE_MATCH_1}")
    if(NOT test MATCHES "^DISABLED_")
      list(APPEND tests_${suite} "${test}")
    endif()
  endif()
endforeach()

set(properties "WORKING_DIRECTORY [==[${WORKDIR}]==] TIMEOUT ${TIMEOUT}")
if(LABELS)
  string(APPEND properties " LABELS ${LABELS}")
endif()
set(script "# Written by tests/discover_suites.cmake from ${BINARY} --gtest_list_tests.\n")
# ctest would take two entries of one name (from two executables) as one for
# set_tests_properties, and -R could not tell them apart: a name seen twice is an
# error when ctest reads the second file.
macro(add_entry name filter cost)
  string(APPEND script
         "if(DEFINED [==[slotted_entry_${name}]==])\n"
         "  message(FATAL_ERROR \"ctest entry ${name} of ${BINARY} is also one of "
         "\${slotted_entry_${name}}: give one of the test suites another name\")\n"
         "endif()\n"
         "set([==[slotted_entry_${name}]==] [==[${BINARY}]==])\n"
         "add_test([==[${name}]==] [==[${BINARY}]==] [==[--gtest_filter=${filter}]==])\n"
         "set_tests_properties([==[${name}]==] PROPERTIES ${properties} COST ${cost})\n")
endmacro()
set(matched "")
foreach(suite IN LISTS suites)
  set(left_out "")
  set(count 0)
  foreach(test IN LISTS tests_${suite})
    # A parameterised test is named Test/Param: ALONE names it without the parameter.
    string(REGEX REPLACE "/.*" "" unparameterised "${test}")
    if("${suite}.${unparameterised}" IN_LIST alone)
      list(APPEND left_out "${suite}.${test}")
      list(APPEND matched "${suite}.${unparameterised}")
      add_entry("${suite}.${test}" "${suite}.${test}" 1)
    else()
      math(EXPR count "${count} + 1")
    endif()
  endforeach()
  if(count EQUAL 0)
    continue()
  endif()
  set(filter "${suite}.*")
  if(left_out)
    list(JOIN left_out ":" negative)
    string(APPEND filter "-${negative}")
  endif()
  add_entry("${suite}" "${filter}" "${count}")
endforeach()
# A name in ALONE that matched no test (renamed, or its suite instantiated under a
# prefix) would leave that test to run two at a time: an error instead.
foreach(name IN LISTS alone)
  if(NOT name IN_LIST matched)
    message(FATAL_ERROR "ALONE names ${name}, which ${BINARY} does not have")
  endif()
endforeach()
file(WRITE "${OUTPUT}.new" "${script}")
file(RENAME "${OUTPUT}.new" "${OUTPUT}")
