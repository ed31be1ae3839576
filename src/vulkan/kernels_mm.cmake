# kernels_mm.cmake - the mul_mat kernel variants, included by vulkan.cmake
# after the element-wise ones. Names must match src/vulkan/vk_kernels_mm.h.
# tsl_vk_add_kernel(name shader "DEFINES" compiler target-env): compiler ""
# is glslc.
foreach(k
  "mul_mat_f32_f32|mul_mat.comp|A_F32"
  "mul_mat_f16_f32|mul_mat.comp|A_F16"
  "mul_mat_q8_0_f32|mul_mat.comp|A_Q8_0"
  "mul_mat_q4_0_f32|mul_mat.comp|A_Q4_0"
  "mul_mat_vec_f32_f32|mul_mat_vec.comp|A_F32"
  "mul_mat_vec_f16_f32|mul_mat_vec.comp|A_F16"
  "mul_mat_vec_q8_0_f32|mul_mat_vec.comp|A_Q8_0"
  "mul_mat_vec_q4_0_f32|mul_mat_vec.comp|A_Q4_0")
  string(REPLACE "|" ";" parts "${k}")
  list(GET parts 0 kname)
  list(GET parts 1 kfile)
  list(GET parts 2 kdefs)
  string(REPLACE "," ";" kdefs "${kdefs}")
  tsl_vk_add_kernel(${kname} ${kfile} "${kdefs}" "" vulkan1.2)
endforeach()
