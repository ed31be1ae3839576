/*
 * common.glsl - what every compute shader of the Vulkan backend shares.
 *
 * Binding convention (one descriptor set layout serves every pipeline, so
 * encoding never switches layouts): 0, 1, 2 are the node's sources, 3 is
 * the destination, 4 is the compute's status words (in-kernel data errors,
 * e.g. an out-of-range get_rows index). A binding starts at the storage
 * offset alignment at or below the tensor; the tensor's first element sits
 * `o*` elements further in, passed as a push constant. Strides are element
 * strides (byte strides divided by the element size, on the host), so any
 * view, permute or transpose is read in place.
 *
 * Grids wider than 65535 workgroups fold into y: wg_linear() undoes it.
 */

#extension GL_EXT_control_flow_attributes : enable

uint wg_linear() { return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; }
