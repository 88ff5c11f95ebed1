# Compiles SRC with -fsyntax-only (and -DSCG_WRONG_MESSAGE=CASE when CASE is
# set) and checks the outcome: it must compile without CASE; with CASE it
# must fail, and on the typed-actor check (not on some other error).
set(args -std=c++17 -fsyntax-only -I${ROOT} ${SRC})
if(DEFINED CASE)
  list(APPEND args -DSCG_WRONG_MESSAGE=${CASE})
endif()
execute_process(COMMAND ${CXX} ${args} RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(NOT DEFINED CASE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the correct sends did not compile:\n${err}")
  endif()
elseif(rc EQUAL 0)
  message(FATAL_ERROR "case ${CASE}: a message outside the interface compiled")
elseif(NOT err MATCHES "receiver does not accept given message")
  message(FATAL_ERROR "case ${CASE}: failed, but not on the interface check:\n${err}")
endif()
