# Run one libFuzzer target for a bounded time on a copy of its seed corpus.
#   cmake -DFUZZER=exe -DSEEDS=dir -DWORK=dir -DSECONDS=n [-DEXTRA=flag] -P run_fuzzer.cmake
# The copy keeps what the fuzzer adds out of the source tree; a crashing input
# is left in WORK/ (crash-*, leak-*, timeout-*, oom-*) and fails the test.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/corpus ${WORK}/artifacts)
file(GLOB seeds ${SEEDS}/*)
file(COPY ${seeds} DESTINATION ${WORK}/corpus)
set(args -max_total_time=${SECONDS} -rss_limit_mb=2048 -timeout=30 -print_final_stats=1
    -artifact_prefix=${WORK}/artifacts/)
if(EXTRA)
  list(APPEND args ${EXTRA})
endif()
execute_process(COMMAND ${FUZZER} ${args} ${WORK}/corpus RESULT_VARIABLE rc)
file(GLOB found ${WORK}/artifacts/*)
if(NOT rc EQUAL 0 OR found)
  message(FATAL_ERROR "${FUZZER} failed (exit status ${rc}); inputs: ${found}")
endif()
