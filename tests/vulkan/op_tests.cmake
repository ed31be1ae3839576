# op_tests.cmake - the core op tests (tests/cpu/test_ops_*.c, test_mulmat.c)
# run a second time on the Vulkan backend, included from the top-level
# CMakeLists.txt after the test executables exist.
#
# Each run is the CPU test's own executable with TSL_TEST_BACKEND=vulkan:
# the same cases, references and tolerances (tests/cpu/ref.h), every node
# checked to have run on Vulkan, and the Khronos validation layer on
# (TSL_VULKAN_VALIDATE=1; the run fails if it reports an error). A machine
# without a Vulkan device skips them (exit code 77), unless
# TSL_REQUIRE_VULKAN is set, as CI sets it: then they fail.
#
#   cpu_test_ops_elementwise  ->  vulkan/ops_elementwise
#   cpu_test_mulmat           ->  vulkan/mulmat

file(GLOB TSL_VK_OP_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/cpu/test_ops_*.c)
list(APPEND TSL_VK_OP_TESTS ${CMAKE_SOURCE_DIR}/tests/cpu/test_mulmat.c)
foreach(src ${TSL_VK_OP_TESTS})
  get_filename_component(name ${src} NAME_WE)
  string(REGEX REPLACE "^test_" "" short ${name})
  if(NOT TARGET cpu_${name})
    continue()
  endif()
  add_test(NAME vulkan/${short} COMMAND cpu_${name})
  set_tests_properties(vulkan/${short} PROPERTIES
    TIMEOUT 600
    SKIP_RETURN_CODE 77
    ENVIRONMENT "TSL_TEST_BACKEND=vulkan;TSL_VULKAN_VALIDATE=1")
endforeach()
