/* Sizes, offsets and constants of ggml's plugin ABI as this compiler lays them out, read by
 * tests/tests/layout.rs and compared with tandem's #[repr(C)] mirrors (capi/src/abi). */
#include <stddef.h>

#include "ggml.h"
#include "ggml-backend.h"
#include "ggml-backend-impl.h"

struct tandem_layout_entry {
    const char * name;
    long long    value;
};

#define SIZE(T)    { "sizeof " #T, (long long) sizeof(struct T) },
#define OFF(T, f)  { #T "." #f, (long long) offsetof(struct T, f) },
#define CONST(c)   { #c, (long long) (c) },

const struct tandem_layout_entry tandem_layout_entries[] = {
    CONST(GGML_BACKEND_API_VERSION)
    CONST(GGML_MAX_DIMS)
    CONST(GGML_MAX_SRC)
    CONST(GGML_MAX_OP_PARAMS)
    CONST(GGML_MAX_NAME)
    CONST(GGML_TENSOR_FLAG_INPUT)
    CONST(GGML_TENSOR_FLAG_OUTPUT)
    CONST(GGML_TENSOR_FLAG_PARAM)
    CONST(GGML_TENSOR_FLAG_LOSS)
    CONST(GGML_TENSOR_FLAG_COMPUTE)
    CONST(GGML_STATUS_ALLOC_FAILED)
    CONST(GGML_STATUS_FAILED)
    CONST(GGML_STATUS_SUCCESS)
    CONST(GGML_STATUS_ABORTED)
    CONST(GGML_BACKEND_DEVICE_TYPE_CPU)
    CONST(GGML_BACKEND_DEVICE_TYPE_GPU)
    CONST(GGML_BACKEND_DEVICE_TYPE_IGPU)
    CONST(GGML_BACKEND_DEVICE_TYPE_ACCEL)
    CONST(GGML_BACKEND_DEVICE_TYPE_META)
    CONST(GGML_BACKEND_BUFFER_USAGE_ANY)
    CONST(GGML_BACKEND_BUFFER_USAGE_WEIGHTS)
    CONST(GGML_BACKEND_BUFFER_USAGE_COMPUTE)
    CONST(GGML_LOG_LEVEL_NONE)
    CONST(GGML_LOG_LEVEL_DEBUG)
    CONST(GGML_LOG_LEVEL_INFO)
    CONST(GGML_LOG_LEVEL_WARN)
    CONST(GGML_LOG_LEVEL_ERROR)
    CONST(GGML_LOG_LEVEL_CONT)
    { "sizeof enum ggml_type", (long long) sizeof(enum ggml_type) },
    { "sizeof enum ggml_op", (long long) sizeof(enum ggml_op) },
    { "sizeof enum ggml_status", (long long) sizeof(enum ggml_status) },
    { "sizeof ggml_guid", (long long) sizeof(ggml_guid) },

    SIZE(ggml_tensor)
    OFF(ggml_tensor, type)
    OFF(ggml_tensor, buffer)
    OFF(ggml_tensor, ne)
    OFF(ggml_tensor, nb)
    OFF(ggml_tensor, op)
    OFF(ggml_tensor, op_params)
    OFF(ggml_tensor, flags)
    OFF(ggml_tensor, src)
    OFF(ggml_tensor, view_src)
    OFF(ggml_tensor, view_offs)
    OFF(ggml_tensor, data)
    OFF(ggml_tensor, name)
    OFF(ggml_tensor, extra)
    OFF(ggml_tensor, padding)

    SIZE(ggml_backend_buffer_type_i)
    OFF(ggml_backend_buffer_type_i, get_name)
    OFF(ggml_backend_buffer_type_i, alloc_buffer)
    OFF(ggml_backend_buffer_type_i, alloc_buffer_n)
    OFF(ggml_backend_buffer_type_i, get_alignment)
    OFF(ggml_backend_buffer_type_i, get_max_size)
    OFF(ggml_backend_buffer_type_i, get_alloc_size)
    OFF(ggml_backend_buffer_type_i, get_alloc_size_n)
    OFF(ggml_backend_buffer_type_i, is_host)

    SIZE(ggml_backend_buffer_type)
    OFF(ggml_backend_buffer_type, iface)
    OFF(ggml_backend_buffer_type, device)
    OFF(ggml_backend_buffer_type, context)

    SIZE(ggml_backend_buffer_i)
    OFF(ggml_backend_buffer_i, free_buffer)
    OFF(ggml_backend_buffer_i, get_base)
    OFF(ggml_backend_buffer_i, init_tensor)
    OFF(ggml_backend_buffer_i, memset_tensor)
    OFF(ggml_backend_buffer_i, set_tensor)
    OFF(ggml_backend_buffer_i, get_tensor)
    OFF(ggml_backend_buffer_i, set_tensor_2d)
    OFF(ggml_backend_buffer_i, get_tensor_2d)
    OFF(ggml_backend_buffer_i, cpy_tensor)
    OFF(ggml_backend_buffer_i, clear)
    OFF(ggml_backend_buffer_i, reset)

    SIZE(ggml_backend_buffer)
    OFF(ggml_backend_buffer, iface)
    OFF(ggml_backend_buffer, buft)
    OFF(ggml_backend_buffer, context)
    OFF(ggml_backend_buffer, size)
    OFF(ggml_backend_buffer, usage)

    SIZE(ggml_backend_graph_optimize_params)
    OFF(ggml_backend_graph_optimize_params, add_alloc_dep)
    OFF(ggml_backend_graph_optimize_params, user_data)

    SIZE(ggml_backend_i)
    OFF(ggml_backend_i, get_name)
    OFF(ggml_backend_i, free)
    OFF(ggml_backend_i, set_tensor_async)
    OFF(ggml_backend_i, get_tensor_async)
    OFF(ggml_backend_i, set_tensor_2d_async)
    OFF(ggml_backend_i, get_tensor_2d_async)
    OFF(ggml_backend_i, cpy_tensor_async)
    OFF(ggml_backend_i, synchronize)
    OFF(ggml_backend_i, graph_plan_create)
    OFF(ggml_backend_i, graph_plan_free)
    OFF(ggml_backend_i, graph_plan_update)
    OFF(ggml_backend_i, graph_plan_compute)
    OFF(ggml_backend_i, graph_compute)
    OFF(ggml_backend_i, event_record)
    OFF(ggml_backend_i, event_wait)
    OFF(ggml_backend_i, graph_optimize)

    SIZE(ggml_backend)
    OFF(ggml_backend, guid)
    OFF(ggml_backend, iface)
    OFF(ggml_backend, device)
    OFF(ggml_backend, context)

    SIZE(ggml_backend_event)
    OFF(ggml_backend_event, device)
    OFF(ggml_backend_event, context)

    SIZE(ggml_backend_dev_caps)
    OFF(ggml_backend_dev_caps, async)
    OFF(ggml_backend_dev_caps, host_buffer)
    OFF(ggml_backend_dev_caps, buffer_from_host_ptr)
    OFF(ggml_backend_dev_caps, events)
    OFF(ggml_backend_dev_caps, mmap_support)

    SIZE(ggml_backend_dev_props)
    OFF(ggml_backend_dev_props, name)
    OFF(ggml_backend_dev_props, description)
    OFF(ggml_backend_dev_props, memory_free)
    OFF(ggml_backend_dev_props, memory_total)
    OFF(ggml_backend_dev_props, type)
    OFF(ggml_backend_dev_props, device_id)
    OFF(ggml_backend_dev_props, caps)

    SIZE(ggml_backend_device_i)
    OFF(ggml_backend_device_i, get_name)
    OFF(ggml_backend_device_i, get_description)
    OFF(ggml_backend_device_i, get_memory)
    OFF(ggml_backend_device_i, get_type)
    OFF(ggml_backend_device_i, get_props)
    OFF(ggml_backend_device_i, init_backend)
    OFF(ggml_backend_device_i, get_buffer_type)
    OFF(ggml_backend_device_i, get_host_buffer_type)
    OFF(ggml_backend_device_i, buffer_from_host_ptr)
    OFF(ggml_backend_device_i, supports_op)
    OFF(ggml_backend_device_i, supports_buft)
    OFF(ggml_backend_device_i, offload_op)
    OFF(ggml_backend_device_i, event_new)
    OFF(ggml_backend_device_i, event_free)
    OFF(ggml_backend_device_i, event_synchronize)

    SIZE(ggml_backend_device)
    OFF(ggml_backend_device, iface)
    OFF(ggml_backend_device, reg)
    OFF(ggml_backend_device, context)

    SIZE(ggml_backend_reg_i)
    OFF(ggml_backend_reg_i, get_name)
    OFF(ggml_backend_reg_i, get_device_count)
    OFF(ggml_backend_reg_i, get_device)
    OFF(ggml_backend_reg_i, get_proc_address)

    SIZE(ggml_backend_reg)
    OFF(ggml_backend_reg, api_version)
    OFF(ggml_backend_reg, iface)
    OFF(ggml_backend_reg, context)

    SIZE(ggml_backend_feature)
    OFF(ggml_backend_feature, name)
    OFF(ggml_backend_feature, value)
};

const size_t tandem_layout_count = sizeof(tandem_layout_entries) / sizeof(tandem_layout_entries[0]);
