# Regenerate the seeds with make_corpus and compare them with the committed
# ones.  cmake -DMAKE_CORPUS=exe -DSEEDS=dir -DWORK=dir -P corpus_fresh.cmake
file(REMOVE_RECURSE ${WORK})
execute_process(COMMAND ${MAKE_CORPUS} ${WORK} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "make_corpus failed (exit status ${rc})")
endif()
file(GLOB_RECURSE made RELATIVE ${WORK} ${WORK}/*)
foreach(f ${made})
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK}/${f} ${SEEDS}/${f} RESULT_VARIABLE diff)
  if(NOT diff EQUAL 0)
    message(SEND_ERROR "corpus/${f} is not what make_corpus writes now: regenerate it with\n"
                       "  ${MAKE_CORPUS} ${SEEDS}")
  endif()
endforeach()
