/* SPDX-License-Identifier: Apache-2.0 */
/*
 * abi_dump — prints the ioctl ABI of include/shardfs/shardfs_ioctl.h as the C compiler
 * lays it out: every struct's size and each field's [offset, size], the
 * ioctl command numbers and the constants, as one JSON object on stdout.
 * tests/unit/test_python_abi.sh compares it with what the Python module
 * (tools/client/python/shardfs) computes. Not a TAP test itself.
 */
#include <stddef.h>
#include <stdio.h>

#include <shardfs/shardfs_ioctl.h>

static int first_struct = 1, first_field;

static void struct_begin(const char *name, size_t size)
{
	printf("%s\n    \"%s\": {\"size\": %zu, \"fields\": {", first_struct ? "" : ",", name,
	       size);
	first_struct = 0;
	first_field = 1;
}

static void field(const char *name, size_t off, size_t size)
{
	printf("%s\"%s\": [%zu, %zu]", first_field ? "" : ", ", name, off, size);
	first_field = 0;
}

static void struct_end(void) { printf("}}"); }

#define S(type)	   struct_begin(#type, sizeof(struct type))
#define F(type, f) field(#f, offsetof(struct type, f), sizeof(((struct type *)0)->f))
/* A flexible array member: where it begins, no bytes of the struct's own. */
#define F_FLEX(type, f) field(#f, offsetof(struct type, f), 0)

static void number(int *first, const char *name, unsigned long long v)
{
	printf("%s\n    \"%s\": %llu", *first ? "" : ",", name, v);
	*first = 0;
}

#define N(first, name) number(first, #name, (unsigned long long)(name))

int main(void)
{
	int first;

	printf("{\n  \"structs\": {");
	S(shardfs_query);
	F(shardfs_query, size);
	F(shardfs_query, abi_version);
	F(shardfs_query, caps);
	F(shardfs_query, n_gpus);
	F(shardfs_query, max_ranges);
	F(shardfs_query, max_regions);
	F(shardfs_query, max_stage_bytes);
	F(shardfs_query, gpu_uuid);
	F(shardfs_query, reserved);
	struct_end();
	S(shardfs_region);
	F(shardfs_region, size);
	F(shardfs_region, kind);
	F(shardfs_region, region_id);
	F(shardfs_region, offset);
	F(shardfs_region, length);
	F(shardfs_region, alloc_size);
	F(shardfs_region, shm_name);
	F(shardfs_region, cuda_ipc_handle);
	F(shardfs_region, gpu_uuid);
	F(shardfs_region, reserved);
	struct_end();
	S(shardfs_range);
	F(shardfs_range, region_offset);
	F(shardfs_range, file_offset);
	F(shardfs_range, length);
	F(shardfs_range, placed);
	struct_end();
	S(shardfs_stage);
	F(shardfs_stage, size);
	F(shardfs_stage, n_ranges);
	F(shardfs_stage, region_id);
	F(shardfs_stage, bytes_placed);
	F(shardfs_stage, path);
	F(shardfs_stage, reserved0);
	F(shardfs_stage, reserved);
	F(shardfs_stage, ranges);
	struct_end();
	S(shardfs_unregister);
	F(shardfs_unregister, size);
	F(shardfs_unregister, reserved0);
	F(shardfs_unregister, region_id);
	F(shardfs_unregister, reserved);
	struct_end();
	S(shardfs_warm);
	F(shardfs_warm, size);
	F(shardfs_warm, flags);
	F(shardfs_warm, file_bytes);
	F(shardfs_warm, cached_bytes);
	F(shardfs_warm, reserved);
	struct_end();
	S(shardfs_cache_entry);
	F(shardfs_cache_entry, entry_bytes);
	F(shardfs_cache_entry, name_len);
	F(shardfs_cache_entry, id);
	F(shardfs_cache_entry, bytes);
	F(shardfs_cache_entry, objects);
	F(shardfs_cache_entry, packed_objects);
	F(shardfs_cache_entry, hit_bytes);
	F(shardfs_cache_entry, miss_bytes);
	F(shardfs_cache_entry, last_use_s);
	F_FLEX(shardfs_cache_entry, name);
	struct_end();
	S(shardfs_cache_list);
	F(shardfs_cache_list, size);
	F(shardfs_cache_list, start);
	F(shardfs_cache_list, n_entries);
	F(shardfs_cache_list, total);
	F(shardfs_cache_list, capacity_bytes);
	F(shardfs_cache_list, used_bytes);
	F(shardfs_cache_list, reserved);
	F(shardfs_cache_list, buf);
	struct_end();
	S(shardfs_cache_evict);
	F(shardfs_cache_evict, size);
	F(shardfs_cache_evict, flags);
	F(shardfs_cache_evict, datasets);
	F(shardfs_cache_evict, reserved0);
	F(shardfs_cache_evict, objects);
	F(shardfs_cache_evict, bytes);
	F(shardfs_cache_evict, disk_bytes);
	F(shardfs_cache_evict, reserved);
	F(shardfs_cache_evict, prefix);
	struct_end();
	S(shardfs_cache_evict_keys);
	F(shardfs_cache_evict_keys, size);
	F(shardfs_cache_evict_keys, n_keys);
	F(shardfs_cache_evict_keys, objects);
	F(shardfs_cache_evict_keys, bytes);
	F(shardfs_cache_evict_keys, disk_bytes);
	F(shardfs_cache_evict_keys, reserved);
	F(shardfs_cache_evict_keys, keys);
	struct_end();
	S(shardfs_hint_item);
	F(shardfs_hint_item, item_bytes);
	F(shardfs_hint_item, path_len);
	F(shardfs_hint_item, kind);
	F(shardfs_hint_item, reserved0);
	F(shardfs_hint_item, offset);
	F(shardfs_hint_item, length);
	F_FLEX(shardfs_hint_item, path);
	struct_end();
	S(shardfs_hint_begin);
	F(shardfs_hint_begin, size);
	F(shardfs_hint_begin, reserved0);
	F(shardfs_hint_begin, max_items);
	F(shardfs_hint_begin, window);
	F(shardfs_hint_begin, reserved);
	struct_end();
	S(shardfs_hint_append);
	F(shardfs_hint_append, size);
	F(shardfs_hint_append, n_items);
	F(shardfs_hint_append, used);
	F(shardfs_hint_append, reserved0);
	F(shardfs_hint_append, reserved);
	F(shardfs_hint_append, buf);
	struct_end();
	S(shardfs_hint_commit);
	F(shardfs_hint_commit, size);
	F(shardfs_hint_commit, reserved0);
	F(shardfs_hint_commit, n_items);
	F(shardfs_hint_commit, reserved);
	struct_end();
	S(shardfs_hint_cancel);
	F(shardfs_hint_cancel, size);
	F(shardfs_hint_cancel, reserved0);
	F(shardfs_hint_cancel, reserved);
	struct_end();
	S(shardfs_hint_status);
	F(shardfs_hint_status, size);
	F(shardfs_hint_status, active);
	F(shardfs_hint_status, n_items);
	F(shardfs_hint_status, position);
	F(shardfs_hint_status, fetched_items);
	F(shardfs_hint_status, fetched_bytes);
	F(shardfs_hint_status, read_items);
	F(shardfs_hint_status, wasted_bytes);
	F(shardfs_hint_status, cached_items);
	F(shardfs_hint_status, unknown_items);
	F(shardfs_hint_status, denied_items);
	F(shardfs_hint_status, reserved);
	struct_end();
	printf("\n  },\n  \"ioctls\": {");
	first = 1;
	N(&first, SHARDFS_IOC_QUERY);
	N(&first, SHARDFS_IOC_REGISTER);
	N(&first, SHARDFS_IOC_STAGE);
	N(&first, SHARDFS_IOC_UNREGISTER);
	N(&first, SHARDFS_IOC_WARM);
	N(&first, SHARDFS_IOC_CACHE_LIST);
	N(&first, SHARDFS_IOC_CACHE_EVICT);
	N(&first, SHARDFS_IOC_CACHE_EVICT_KEYS);
	N(&first, SHARDFS_IOC_HINT_BEGIN);
	N(&first, SHARDFS_IOC_HINT_APPEND);
	N(&first, SHARDFS_IOC_HINT_COMMIT);
	N(&first, SHARDFS_IOC_HINT_CANCEL);
	N(&first, SHARDFS_IOC_HINT_STATUS);
	printf("\n  },\n  \"constants\": {");
	first = 1;
	N(&first, SHARDFS_IOC_MAGIC);
	N(&first, SHARDFS_ABI_VERSION);
	N(&first, SHARDFS_CAP_SHM);
	N(&first, SHARDFS_CAP_CUDA_IPC);
	N(&first, SHARDFS_CAP_WARM);
	N(&first, SHARDFS_MAX_GPUS);
	N(&first, SHARDFS_REGION_SHM);
	N(&first, SHARDFS_REGION_CUDA);
	N(&first, SHARDFS_STAGE_MAX_RANGES);
	N(&first, SHARDFS_PATH_CACHE);
	N(&first, SHARDFS_PATH_NFS);
	N(&first, SHARDFS_PATH_SHM_COPY);
	N(&first, SHARDFS_PATH_CUDA_PINNED);
	N(&first, SHARDFS_WARM_ACTIVE);
	N(&first, SHARDFS_CACHE_LIST_BUF);
	N(&first, SHARDFS_EVICT_ALL);
	N(&first, SHARDFS_EVICT_MOUNT_PATH);
	N(&first, SHARDFS_CACHE_EVICT_KEYS_MAX);
	N(&first, SHARDFS_HINT_MAX_ITEMS);
	N(&first, SHARDFS_HINT_BUF);
	N(&first, SHARDFS_HINT_FILE);
	N(&first, SHARDFS_HINT_RANGE);
	printf("\n  },\n  \"xattr_cached\": \"%s\",\n  \"xattr_key\": \"%s\"\n}\n",
	       SHARDFS_XATTR_CACHED, SHARDFS_XATTR_KEY);
	return 0;
}
