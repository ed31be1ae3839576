// spin.comp - a kernel that runs long but finishes, for the dry run of
// tests/vulkan/hang_wild_write.c on a CPU device (lavapipe), where a wild
// write would be a SIGSEGV of the process itself. Every workgroup spins
// a[0] times (llvmpipe stops a shader loop after 65535 iterations, so the
// length comes from the number of workgroups); volatile keeps the compiler
// from folding the loop.
// Like every kernel of the backend (src/vulkan/shaders/common.glsl), it
// first raises the compute's progress word (status word 8) to its node + 1,
// the last push-constant word, so a hang in it is named.
#version 450

layout(local_size_x = 1) in;

layout(push_constant) uniform P { layout(offset = 124) uint node; } pc;
layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 3) volatile buffer D { float d[]; };
layout(binding = 4) buffer S { uint status[]; };

void main() {
    if (gl_WorkGroupID == uvec3(0u)) atomicMax(status[8], pc.node);
    uint n = uint(a[0]);
    for (uint i = 0u; i < n; i++) d[0] = d[0] * 0.999 + 0.5;
}
