# Checks that an AVX2 build (NANOCHAT_ISA=avx2) runs no AVX-512 instruction, ours or oneDNN's:
#  1. no zmm/k-mask instruction in the disassembly of each PROGRAMS (our code is compiled in);
#  2. TEST_BINARY run with TEST_ARGS and ONEDNN_JIT_DUMP=1 in a fresh folder: oneDNN writes each
#     JIT kernel it generates there (dnnl_dump_cpu_jit_<isa>_<kernel>.N.bin); none may be an
#     avx512 kernel and none may hold a zmm instruction (its AVX2 sgemm kernel, jit_avx2_kernel_
#     sgemm_kern, emits zmm code when oneDNN may use AVX-512, so the name alone is not enough).
#   cmake -DOBJDUMP=<objdump> -DPROGRAMS="<bin>;<bin>" -DTEST_BINARY=<bin> -DTEST_ARGS="<a>;<b>"
#         -DWORK_DIR=<folder> -P check_isa.cmake
# Fails naming the program or kernel file and the first offending instruction.
cmake_minimum_required(VERSION 3.20)
if(NOT OBJDUMP OR NOT PROGRAMS OR NOT TEST_BINARY OR NOT WORK_DIR)
  message(FATAL_ERROR "usage: cmake -DOBJDUMP=.. -DPROGRAMS=.. -DTEST_BINARY=.. -DTEST_ARGS=.. -DWORK_DIR=.. "
                      "-P check_isa.cmake")
endif()

set(errors "")
# First AVX-512 register use (zmm, or an opmask register k0-k7 as an operand) in the disassembly
# of FILE (objdump ARGS), through grep: a regex over megabytes of text in CMake takes minutes.
function(first_avx512 file out)
  execute_process(COMMAND ${OBJDUMP} ${ARGN} --no-show-raw-insn ${file}
                  COMMAND grep -m1 -E "%zmm[0-9]+|%k[0-7]"
                  OUTPUT_VARIABLE hit RESULTS_VARIABLE rcs)
  list(GET rcs 0 rc)  # objdump gets SIGPIPE when grep stops at the first hit
  string(STRIP "${hit}" hit)
  if(NOT hit AND NOT rc EQUAL 0)
    set(hit "(objdump failed: ${rc})")
  endif()
  set(${out} "${hit}" PARENT_SCOPE)
endfunction()

foreach(prog IN LISTS PROGRAMS)
  first_avx512(${prog} hit -d)
  if(hit)
    string(APPEND errors "${prog}: AVX-512 instruction in our code: ${hit}\n")
  endif()
endforeach()

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} -E env ONEDNN_JIT_DUMP=1 DNNL_JIT_DUMP=1 ${TEST_BINARY} ${TEST_ARGS}
                WORKING_DIRECTORY ${WORK_DIR} OUTPUT_VARIABLE out ERROR_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  string(APPEND errors "${TEST_BINARY} ${TEST_ARGS} failed (${rc}):\n${out}\n")
endif()
file(GLOB dumps ${WORK_DIR}/dnnl_dump_cpu_jit_*.bin)
if(NOT dumps)
  string(APPEND errors "${TEST_BINARY} ${TEST_ARGS}: oneDNN wrote no JIT kernel into ${WORK_DIR} (ONEDNN_JIT_DUMP)\n")
endif()
foreach(dump IN LISTS dumps)
  get_filename_component(name ${dump} NAME)
  if(name MATCHES "avx512")
    string(APPEND errors "oneDNN generated an AVX-512 kernel: ${name}\n")
  endif()
  first_avx512(${dump} hit -D -b binary -mi386:x86-64)
  if(hit)
    string(APPEND errors "oneDNN kernel ${name} holds AVX-512 code: ${hit}\n")
  endif()
endforeach()
list(LENGTH dumps n)
if(errors)
  message(FATAL_ERROR "${errors}")
endif()
message(STATUS "no AVX-512 instruction in ${PROGRAMS} nor in the ${n} oneDNN JIT kernels")
