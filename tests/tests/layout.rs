//! Every `#[repr(C)]` mirror of ggml's plugin ABI in `tandem-capi` has the size and field
//! offsets the C compiler gives the real headers (`c/layout.c`, compiled by `build.rs` against
//! the ggml shipped in `llama-cpp-sys-2`), and the mirrored constants have the headers' values.

use ggml_tandem::abi;
use std::collections::HashMap;
use std::ffi::{c_char, CStr};
use std::mem::{offset_of, size_of};

#[cfg(tandem_layout_c)]
mod c_side {
    use std::ffi::c_char;

    #[repr(C)]
    pub struct Entry {
        pub name: *const c_char,
        pub value: i64,
    }

    // `tests/build.rs` builds the archive; cargo passes its folder to every target.
    #[link(name = "tandem_layout", kind = "static")]
    extern "C" {
        pub static tandem_layout_entries: [Entry; 0];
        pub static tandem_layout_count: usize;
    }
}

/// Name → value of every entry the C side recorded.
fn c_layout() -> HashMap<String, i64> {
    #[cfg(tandem_layout_c)]
    {
        // SAFETY: the C array has `tandem_layout_count` entries whose names are string literals.
        unsafe {
            let n = c_side::tandem_layout_count;
            let base = std::ptr::addr_of!(c_side::tandem_layout_entries).cast::<c_side::Entry>();
            (0..n)
                .map(|i| {
                    let e = &*base.add(i);
                    (cstr(e.name), e.value)
                })
                .collect()
        }
    }
    #[cfg(not(tandem_layout_c))]
    panic!(
        "tests/build.rs did not find ggml's headers (llama-cpp-sys-2 crate source); set TANDEM_GGML_SRC to \
         .../llama-cpp-sys-2-<version>/llama.cpp/ggml and rebuild"
    )
}

/// # Safety
/// `p` is a NUL-terminated static string.
#[allow(dead_code)]
unsafe fn cstr(p: *const c_char) -> String {
    // SAFETY: per the contract.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Compares one struct: its size and each `c_field => rust_field` offset.
macro_rules! check_struct {
    ($c:expr, $errs:expr, $cname:literal, $ty:ty, [$($cf:ident => $rf:ident),* $(,)?]) => {{
        let c: &HashMap<String, i64> = $c;
        let mut want = |key: String, rust: usize| match c.get(&key) {
            Some(&v) if v == rust as i64 => {}
            Some(&v) => $errs.push(format!("{key}: C {v}, Rust {rust}")),
            None => $errs.push(format!("{key}: missing on the C side")),
        };
        want(format!("sizeof {}", $cname), size_of::<$ty>());
        $( want(format!("{}.{}", $cname, stringify!($cf)), offset_of!($ty, $rf)); )*
    }};
}

#[test]
fn mirrors_match_the_c_headers() {
    let c = c_layout();
    let mut errs: Vec<String> = Vec::new();
    check_struct!(&c, errs, "ggml_tensor", abi::GgmlTensor, [
        type => type_, buffer => buffer, ne => ne, nb => nb, op => op, op_params => op_params,
        flags => flags, src => src, view_src => view_src, view_offs => view_offs, data => data,
        name => name, extra => extra, padding => padding,
    ]);
    check_struct!(&c, errs, "ggml_backend_buffer_type_i", abi::BufferTypeIface, [
        get_name => get_name, alloc_buffer => alloc_buffer, alloc_buffer_n => alloc_buffer_n,
        get_alignment => get_alignment, get_max_size => get_max_size, get_alloc_size => get_alloc_size,
        get_alloc_size_n => get_alloc_size_n, is_host => is_host,
    ]);
    check_struct!(&c, errs, "ggml_backend_buffer_type", abi::BufferType, [
        iface => iface, device => device, context => context,
    ]);
    check_struct!(&c, errs, "ggml_backend_buffer_i", abi::BufferIface, [
        free_buffer => free_buffer, get_base => get_base, init_tensor => init_tensor,
        memset_tensor => memset_tensor, set_tensor => set_tensor, get_tensor => get_tensor,
        set_tensor_2d => set_tensor_2d, get_tensor_2d => get_tensor_2d, cpy_tensor => cpy_tensor,
        clear => clear, reset => reset,
    ]);
    check_struct!(&c, errs, "ggml_backend_buffer", abi::Buffer, [
        iface => iface, buft => buft, context => context, size => size, usage => usage,
    ]);
    check_struct!(&c, errs, "ggml_backend_graph_optimize_params", abi::GraphOptimizeParams, [
        add_alloc_dep => add_alloc_dep, user_data => user_data,
    ]);
    check_struct!(&c, errs, "ggml_backend_i", abi::BackendIface, [
        get_name => get_name, free => free, set_tensor_async => set_tensor_async,
        get_tensor_async => get_tensor_async, set_tensor_2d_async => set_tensor_2d_async,
        get_tensor_2d_async => get_tensor_2d_async, cpy_tensor_async => cpy_tensor_async,
        synchronize => synchronize, graph_plan_create => graph_plan_create,
        graph_plan_free => graph_plan_free, graph_plan_update => graph_plan_update,
        graph_plan_compute => graph_plan_compute, graph_compute => graph_compute,
        event_record => event_record, event_wait => event_wait, graph_optimize => graph_optimize,
    ]);
    check_struct!(&c, errs, "ggml_backend", abi::Backend, [
        guid => guid, iface => iface, device => device, context => context,
    ]);
    check_struct!(&c, errs, "ggml_backend_event", abi::Event, [device => device, context => context]);
    check_struct!(&c, errs, "ggml_backend_dev_caps", abi::DevCaps, [
        async => async_, host_buffer => host_buffer, buffer_from_host_ptr => buffer_from_host_ptr,
        events => events, mmap_support => mmap_support,
    ]);
    check_struct!(&c, errs, "ggml_backend_dev_props", abi::DevProps, [
        name => name, description => description, memory_free => memory_free,
        memory_total => memory_total, type => type_, device_id => device_id, caps => caps,
    ]);
    check_struct!(&c, errs, "ggml_backend_device_i", abi::DeviceIface, [
        get_name => get_name, get_description => get_description, get_memory => get_memory,
        get_type => get_type, get_props => get_props, init_backend => init_backend,
        get_buffer_type => get_buffer_type, get_host_buffer_type => get_host_buffer_type,
        buffer_from_host_ptr => buffer_from_host_ptr, supports_op => supports_op,
        supports_buft => supports_buft, offload_op => offload_op, event_new => event_new,
        event_free => event_free, event_synchronize => event_synchronize,
    ]);
    check_struct!(&c, errs, "ggml_backend_device", abi::Device, [
        iface => iface, reg => reg, context => context,
    ]);
    check_struct!(&c, errs, "ggml_backend_reg_i", abi::RegIface, [
        get_name => get_name, get_device_count => get_device_count, get_device => get_device,
        get_proc_address => get_proc_address,
    ]);
    check_struct!(&c, errs, "ggml_backend_reg", abi::Reg, [
        api_version => api_version, iface => iface, context => context,
    ]);
    check_struct!(&c, errs, "ggml_backend_feature", abi::Feature, [name => name, value => value]);
    assert!(
        errs.is_empty(),
        "ABI mirrors differ from ggml's headers:\n  {}",
        errs.join("\n  ")
    );
}

#[test]
fn constants_match_the_c_headers() {
    let c = c_layout();
    let expect: &[(&str, i64)] = &[
        ("GGML_BACKEND_API_VERSION", abi::BACKEND_API_VERSION as i64),
        ("GGML_MAX_DIMS", abi::MAX_DIMS as i64),
        ("GGML_MAX_SRC", abi::MAX_SRC as i64),
        ("GGML_MAX_OP_PARAMS", abi::MAX_OP_PARAMS_BYTES as i64),
        ("GGML_MAX_NAME", abi::MAX_NAME as i64),
        ("GGML_TENSOR_FLAG_INPUT", abi::TENSOR_FLAG_INPUT as i64),
        ("GGML_TENSOR_FLAG_OUTPUT", abi::TENSOR_FLAG_OUTPUT as i64),
        ("GGML_TENSOR_FLAG_PARAM", abi::TENSOR_FLAG_PARAM as i64),
        ("GGML_TENSOR_FLAG_LOSS", abi::TENSOR_FLAG_LOSS as i64),
        ("GGML_TENSOR_FLAG_COMPUTE", abi::TENSOR_FLAG_COMPUTE as i64),
        ("GGML_STATUS_ALLOC_FAILED", abi::STATUS_ALLOC_FAILED as i64),
        ("GGML_STATUS_FAILED", abi::STATUS_FAILED as i64),
        ("GGML_STATUS_SUCCESS", abi::STATUS_SUCCESS as i64),
        ("GGML_STATUS_ABORTED", abi::STATUS_ABORTED as i64),
        ("GGML_BACKEND_DEVICE_TYPE_CPU", abi::DEVICE_TYPE_CPU as i64),
        ("GGML_BACKEND_DEVICE_TYPE_GPU", abi::DEVICE_TYPE_GPU as i64),
        ("GGML_BACKEND_DEVICE_TYPE_IGPU", abi::DEVICE_TYPE_IGPU as i64),
        ("GGML_BACKEND_DEVICE_TYPE_ACCEL", abi::DEVICE_TYPE_ACCEL as i64),
        ("GGML_BACKEND_DEVICE_TYPE_META", abi::DEVICE_TYPE_META as i64),
        ("GGML_BACKEND_BUFFER_USAGE_ANY", abi::BUFFER_USAGE_ANY as i64),
        ("GGML_BACKEND_BUFFER_USAGE_WEIGHTS", abi::BUFFER_USAGE_WEIGHTS as i64),
        ("GGML_BACKEND_BUFFER_USAGE_COMPUTE", abi::BUFFER_USAGE_COMPUTE as i64),
        ("GGML_LOG_LEVEL_NONE", abi::LOG_LEVEL_NONE as i64),
        ("GGML_LOG_LEVEL_DEBUG", abi::LOG_LEVEL_DEBUG as i64),
        ("GGML_LOG_LEVEL_INFO", abi::LOG_LEVEL_INFO as i64),
        ("GGML_LOG_LEVEL_WARN", abi::LOG_LEVEL_WARN as i64),
        ("GGML_LOG_LEVEL_ERROR", abi::LOG_LEVEL_ERROR as i64),
        ("GGML_LOG_LEVEL_CONT", abi::LOG_LEVEL_CONT as i64),
        // Enums are mirrored as C int.
        ("sizeof enum ggml_type", size_of::<std::ffi::c_int>() as i64),
        ("sizeof enum ggml_op", size_of::<std::ffi::c_int>() as i64),
        ("sizeof enum ggml_status", size_of::<abi::Status>() as i64),
        ("sizeof ggml_guid", size_of::<abi::Guid>() as i64),
    ];
    let mut errs = Vec::new();
    for &(name, rust) in expect {
        match c.get(name) {
            Some(&v) if v == rust => {}
            Some(&v) => errs.push(format!("{name}: C {v}, Rust {rust}")),
            None => errs.push(format!("{name}: missing on the C side")),
        }
    }
    assert!(
        errs.is_empty(),
        "ABI constants differ from ggml's headers:\n  {}",
        errs.join("\n  ")
    );
}
