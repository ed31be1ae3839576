// wild_write.comp - a kernel that writes through a wild device address, for
// tests/vulkan/hang_wild_write.c (never part of the library).
//
// The address comes from the first two words of binding 0 (the input
// tensor; low word first), so the program chooses it at run time; the
// program places that tensor first in its buffer, so the binding starts
// there (no element offset to apply). Each
// invocation writes one word, 4 KiB apart, so the writes cover many pages
// of an address range nothing maps. Seen on the H200 with NVIDIA's driver:
// such a kernel never finishes (its fence never signals; the driver logs
// Xid 109) rather than returning VK_ERROR_DEVICE_LOST.
#version 450
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require

layout(local_size_x = 64) in;

layout(buffer_reference, std430, buffer_reference_align = 4) buffer Wild { uint v[]; };

layout(push_constant) uniform P { layout(offset = 124) uint node; } pc;
layout(binding = 0) readonly buffer A { uint a[]; };
layout(binding = 3) buffer D { uint d[]; };
layout(binding = 4) buffer S { uint status[]; };

void main() {
    // the progress word, as every kernel of the backend raises it
    // (src/vulkan/shaders/common.glsl), so the hang is named
    if (gl_WorkGroupID == uvec3(0u) && gl_LocalInvocationIndex == 0u) atomicMax(status[8], pc.node);
    uint i = gl_GlobalInvocationID.x;
    Wild w = Wild(uvec2(a[0], a[1]));
    w.v[i * 1024u] = 0xdeadbeefu + i;
    d[i] = i; // the node's own output, so the kernel has a visible effect too
}
