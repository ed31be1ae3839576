/*
 * vk_memory.c - device memory for tensors: a sub-allocator over large
 * VkDeviceMemory blocks, and host-visible buffers for staging.
 *
 * Drivers allow only a few thousand allocations and each costs a kernel
 * call, while a model makes hundreds of buffers (weights, KV cache, the
 * graph allocator's activations). So memory comes in blocks (256 MiB, or one
 * block of exactly the request when it is larger), each with ONE VkBuffer
 * over the whole block; a backend buffer is a range of a block, and kernels
 * bind (block buffer, offset, range). Ranges are carved first-fit from a
 * sorted free list per block and coalesced on free; a block is returned to
 * the driver when its last range is freed. Sizes are rounded to VK_ALIGN, so
 * every range starts aligned for storage-buffer offsets.
 *
 * tensor->data for a Vulkan tensor is an opaque address: each buffer gets a
 * range of a private address space (never dereferenced) with a gap after it,
 * so addresses of different buffers never collide and the byte offset of a
 * tensor is data - base, as for host buffers. Recovery gives a buffer new
 * memory on the new device behind the same address, so tensors keep their
 * placement; a buffer remembers the device generation its memory is from.
 *
 * Where the device's memory is also host-visible on a unified-memory device
 * (lavapipe, integrated GPUs), blocks are mapped and tensor set/get are
 * memcpy; on a discrete GPU they go through staging buffers and transfer
 * commands (vk_backend.c). TSL_VULKAN_STAGING=1 forces the staging path so it
 * is tested on any machine.
 *
 * Allocation failures, real or from the device's limits, are ALLOC_FAILED
 * (through the VkResult table at phase ALLOC) with the size in the message.
 * A request larger than the heap is refused here rather than left to a
 * driver that might overcommit and fail later, at first use.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vulkan/vk.h"

#define VK_BLOCK_SIZE ((VkDeviceSize)256 << 20)
#define VK_VA_BASE ((uintptr_t)1 << 44)
#define VK_VA_GAP ((uintptr_t)1 << 20)

static bool vk_env_set(const char *name) {
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

static VkDeviceSize vk_round(VkDeviceSize v, VkDeviceSize a) { return (v + a - 1) / a * a; }

static int vk_find_type(const vk_device *d, uint32_t bits, VkMemoryPropertyFlags want) {
    for (uint32_t i = 0; i < d->memprops.memoryTypeCount; i++)
        if ((bits & (1u << i)) && (d->memprops.memoryTypes[i].propertyFlags & want) == want) return (int)i;
    return -1;
}

static VkBufferCreateInfo vk_buffer_info(VkDeviceSize size) {
    return (VkBufferCreateInfo){.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                                .size = size,
                                .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                         VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                                .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
}

tsl_status vk_mem_init(vk_device *d, tsl_error *err) {
    char bname[32];
    snprintf(bname, sizeof bname, "vulkan%d", d->index);
    /* which memory types can back our buffers */
    VkBufferCreateInfo bi = vk_buffer_info(4096);
    VkBuffer probe;
    VkResult r = vkCreateBuffer(d->dev, &bi, NULL, &probe);
    if (r != VK_SUCCESS) return vk_error(err, r, TSL_PHASE_ALLOC, bname, d->name, -1, NULL, NULL, "creating a buffer");
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(d->dev, probe, &req);
    vkDestroyBuffer(d->dev, probe, NULL);

    VkPhysicalDeviceType t = d->props.deviceType;
    bool uma = t == VK_PHYSICAL_DEVICE_TYPE_CPU || t == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU;
    int ty = -1;
    d->dev_mapped = false;
    if (uma && !vk_env_set("TSL_VULKAN_STAGING")) {
        ty = vk_find_type(d, req.memoryTypeBits,
                          VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                              VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
        d->dev_mapped = ty >= 0;
    }
    if (ty < 0) ty = vk_find_type(d, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    if (ty < 0) ty = vk_find_type(d, req.memoryTypeBits, 0);
    int hy = vk_find_type(d, req.memoryTypeBits,
                          VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT |
                              VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    if (hy < 0)
        hy = vk_find_type(d, req.memoryTypeBits, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
    if (ty < 0 || hy < 0)
        return error_set(err, TSL_FAILED, bname, d->name, -1, NULL, NULL,
                         "the device offers no memory type for storage buffers%s",
                         hy < 0 ? " that the host can map (needed for staging)" : "");
    d->dev_type = (uint32_t)ty;
    d->host_type = (uint32_t)hy;
    d->heap_size = d->memprops.memoryHeaps[d->memprops.memoryTypes[ty].heapIndex].size;
    d->heap_used = 0;
    d->va_next = VK_VA_BASE;
    d->blocks = NULL;
    return TSL_SUCCESS;
}

void vk_block_destroy_on(VkDevice dev, vk_block *b) {
    if (b->map) vkUnmapMemory(dev, b->mem);
    if (b->buf) vkDestroyBuffer(dev, b->buf, NULL);
    if (b->mem) vkFreeMemory(dev, b->mem, NULL);
    free(b->free);
    free(b);
}

static void vk_block_destroy(vk_device *d, vk_block *b) { vk_block_destroy_on(d->dev, b); }

void vk_mem_fini(vk_device *d) {
    vk_block *b = d->blocks;
    while (b) {
        vk_block *n = b->next;
        if (b->used) TSL_LOGW("vulkan%d: %llu bytes of device memory still in use at teardown", d->index,
                              (unsigned long long)b->used);
        vk_block_destroy(d, b);
        b = n;
    }
    d->blocks = NULL;
    atomic_fetch_add(&d->epoch, 1);
}

/* A new block of size bytes. mlock held. */
static vk_block *vk_block_new(vk_device *d, VkDeviceSize size, VkResult *res) {
    vk_block *b = calloc(1, sizeof *b);
    if (!b) {
        *res = VK_ERROR_OUT_OF_HOST_MEMORY;
        return NULL;
    }
    VkBufferCreateInfo bi = vk_buffer_info(size);
    VkResult r = vkCreateBuffer(d->dev, &bi, NULL, &b->buf);
    VkMemoryRequirements req = {0};
    if (r == VK_SUCCESS) {
        vkGetBufferMemoryRequirements(d->dev, b->buf, &req);
        VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                   .allocationSize = req.size,
                                   .memoryTypeIndex = d->dev_type};
        r = vkAllocateMemory(d->dev, &ai, NULL, &b->mem);
    }
    if (r == VK_SUCCESS) r = vkBindBufferMemory(d->dev, b->buf, b->mem, 0);
    if (r == VK_SUCCESS && d->dev_mapped) r = vkMapMemory(d->dev, b->mem, 0, VK_WHOLE_SIZE, 0, &b->map);
    if (r == VK_SUCCESS) {
        b->free = malloc(4 * sizeof *b->free);
        if (!b->free) r = VK_ERROR_OUT_OF_HOST_MEMORY;
    }
    if (r != VK_SUCCESS) {
        vk_block_destroy(d, b);
        *res = r;
        return NULL;
    }
    b->cap_free = 4;
    b->n_free = 1;
    b->free[0] = (vk_range){0, size};
    b->size = size;
    b->used = 0;
    d->heap_used += req.size;
    return b;
}

/* First fit in b; returns the offset or -1. */
static int64_t vk_block_carve(vk_block *b, VkDeviceSize size) {
    for (int i = 0; i < b->n_free; i++) {
        if (b->free[i].size < size) continue;
        VkDeviceSize off = b->free[i].off;
        b->free[i].off += size;
        b->free[i].size -= size;
        if (b->free[i].size == 0) {
            memmove(&b->free[i], &b->free[i + 1], (size_t)(b->n_free - i - 1) * sizeof *b->free);
            b->n_free--;
        }
        b->used += size;
        return (int64_t)off;
    }
    return -1;
}

/* Return [off, off+size) to b, coalescing with its neighbours. Returns
 * false only when the free list cannot grow (the range is then lost until
 * the block goes, which is logged). */
static bool vk_block_return(vk_block *b, VkDeviceSize off, VkDeviceSize size) {
    b->used -= size;
    int i = 0;
    while (i < b->n_free && b->free[i].off < off) i++;
    bool join_prev = i > 0 && b->free[i - 1].off + b->free[i - 1].size == off;
    bool join_next = i < b->n_free && off + size == b->free[i].off;
    if (join_prev && join_next) {
        b->free[i - 1].size += size + b->free[i].size;
        memmove(&b->free[i], &b->free[i + 1], (size_t)(b->n_free - i - 1) * sizeof *b->free);
        b->n_free--;
        return true;
    }
    if (join_prev) {
        b->free[i - 1].size += size;
        return true;
    }
    if (join_next) {
        b->free[i].off = off;
        b->free[i].size += size;
        return true;
    }
    if (b->n_free == b->cap_free) {
        vk_range *nf = realloc(b->free, (size_t)b->cap_free * 2 * sizeof *nf);
        if (!nf) return false;
        b->free = nf;
        b->cap_free *= 2;
    }
    memmove(&b->free[i + 1], &b->free[i], (size_t)(b->n_free - i) * sizeof *b->free);
    b->free[i] = (vk_range){off, size};
    b->n_free++;
    return true;
}

vk_buf *vk_mem_alloc(vk_device *d, VkDeviceSize size, const char *bname, tsl_error *err) {
    VkDeviceSize want = vk_round(size ? size : 1, VK_ALIGN);
    VkDeviceSize max_alloc = d->info.max_allocation_bytes ? d->info.max_allocation_bytes : (VkDeviceSize)1 << 62;
    if (want > max_alloc || want < size) {
        error_set(err, TSL_ALLOC_FAILED, bname, d->name, -1, NULL, NULL,
                  "a buffer of %llu bytes is larger than the largest allocation the device allows (%llu bytes)",
                  (unsigned long long)size, (unsigned long long)max_alloc);
        return NULL;
    }
    vk_buf *vb = calloc(1, sizeof *vb);
    if (!vb) {
        error_set(err, TSL_ALLOC_FAILED, bname, d->name, -1, NULL, NULL, "out of host memory for a buffer record");
        return NULL;
    }
    pthread_mutex_lock(&d->mlock);
    int64_t off = -1;
    vk_block *b;
    for (b = d->blocks; b; b = b->next)
        if ((off = vk_block_carve(b, want)) >= 0) break;
    if (off < 0) {
        VkDeviceSize bsize = want > VK_BLOCK_SIZE ? want : VK_BLOCK_SIZE;
        if (bsize > max_alloc) bsize = want;
        if (d->heap_used + bsize > d->heap_size) bsize = want; /* no room for a full block: just this */
        if (d->heap_used + bsize > d->heap_size) {
            pthread_mutex_unlock(&d->mlock);
            free(vb);
            error_set(err, TSL_ALLOC_FAILED, bname, d->name, -1, NULL, NULL,
                      "a buffer of %llu bytes does not fit in device memory (%llu of %llu bytes in use)",
                      (unsigned long long)size, (unsigned long long)d->heap_used, (unsigned long long)d->heap_size);
            return NULL;
        }
        VkResult r = VK_SUCCESS;
        b = vk_block_new(d, bsize, &r);
        if (!b) {
            pthread_mutex_unlock(&d->mlock);
            free(vb);
            char what[96];
            snprintf(what, sizeof what, "allocating %llu bytes of device memory", (unsigned long long)bsize);
            vk_error(err, r, TSL_PHASE_ALLOC, bname, d->name, -1, NULL, NULL, what);
            return NULL;
        }
        b->next = d->blocks;
        d->blocks = b;
        off = vk_block_carve(b, want);
    }
    vb->blk = b;
    vb->off = (VkDeviceSize)off;
    vb->size = want;
    vb->gen = d->gen;
    vb->va = d->va_next;
    d->va_next += (uintptr_t)vk_round(want, VK_VA_GAP) + VK_VA_GAP;
    atomic_fetch_add(&d->mem_gen, 1);
    pthread_mutex_unlock(&d->mlock);
    return vb;
}

void vk_mem_free(vk_device *d, vk_buf *vb) {
    if (!vb) return;
    pthread_mutex_lock(&d->mlock);
    atomic_fetch_add(&d->mem_gen, 1);
    if (vb->gen != d->gen) {
        /* memory of a device that recovery replaced: it goes with its grave */
        pthread_mutex_unlock(&d->mlock);
        free(vb);
        return;
    }
    vk_block *b = vb->blk;
    if (!vk_block_return(b, vb->off, vb->size))
        TSL_LOGW("vulkan%d: out of host memory tracking a freed range; %llu bytes stay unusable until the block is freed",
                 d->index, (unsigned long long)vb->size);
    if (b->used == 0) {
        /* give the block back: the next buffer of this size is rarely soon */
        vk_block **pp = &d->blocks;
        while (*pp && *pp != b) pp = &(*pp)->next;
        if (*pp) *pp = b->next;
        VkMemoryRequirements req;
        vkGetBufferMemoryRequirements(d->dev, b->buf, &req);
        d->heap_used -= req.size < d->heap_used ? req.size : d->heap_used;
        vk_block_destroy(d, b);
        atomic_fetch_add(&d->epoch, 1);
    }
    pthread_mutex_unlock(&d->mlock);
    free(vb);
}

tsl_status vk_host_buffer(vk_device *d, VkDeviceSize size, VkBuffer *buf, VkDeviceMemory *mem, void **map,
                          tsl_error *err, const char *bname) {
    *buf = VK_NULL_HANDLE;
    *mem = VK_NULL_HANDLE;
    *map = NULL;
    VkBufferCreateInfo bi = vk_buffer_info(size);
    VkResult r = vkCreateBuffer(d->dev, &bi, NULL, buf);
    if (r == VK_SUCCESS) {
        VkMemoryRequirements req;
        vkGetBufferMemoryRequirements(d->dev, *buf, &req);
        VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                                   .allocationSize = req.size,
                                   .memoryTypeIndex = d->host_type};
        r = vkAllocateMemory(d->dev, &ai, NULL, mem);
    }
    if (r == VK_SUCCESS) r = vkBindBufferMemory(d->dev, *buf, *mem, 0);
    if (r == VK_SUCCESS) r = vkMapMemory(d->dev, *mem, 0, VK_WHOLE_SIZE, 0, map);
    if (r != VK_SUCCESS) {
        if (*buf) vkDestroyBuffer(d->dev, *buf, NULL);
        if (*mem) vkFreeMemory(d->dev, *mem, NULL);
        *buf = VK_NULL_HANDLE;
        *mem = VK_NULL_HANDLE;
        *map = NULL;
        char what[96];
        snprintf(what, sizeof what, "allocating %llu bytes of host-visible memory", (unsigned long long)size);
        return vk_error(err, r, TSL_PHASE_ALLOC, bname, d->name, -1, NULL, NULL, what);
    }
    return TSL_SUCCESS;
}

void vk_host_buffer_free(vk_device *d, VkBuffer *buf, VkDeviceMemory *mem, void **map) {
    if (*buf) vkDestroyBuffer(d->dev, *buf, NULL);
    if (*mem) vkFreeMemory(d->dev, *mem, NULL);
    *buf = VK_NULL_HANDLE;
    *mem = VK_NULL_HANDLE;
    *map = NULL;
}
