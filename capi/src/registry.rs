//! The `TANDEM` registry: built once per process on the first `ggml_backend_init`, after the
//! host's ggml has been found and its op/type numbering checked against tandem's. Registry,
//! devices and buffer types live for the rest of the process (the library is linked
//! `-z nodelete`, so an unload never leaves ggml holding pointers into unmapped code).

use crate::abi::{BufferType, Device as CDevice, Feature, Reg, RegIface, BACKEND_API_VERSION};
use crate::guard::guard;
use crate::host::{host, host_str, HostApi};
use crate::{backend, device, log};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr::{null, null_mut};
use std::sync::OnceLock;
use tandem_graph::{ElemType, GluOp, Op, UnaryOp};

pub const REG_NAME: &CStr = c"TANDEM";

struct Registry {
    reg: *mut Reg,
    devices: Vec<*mut CDevice>,
    bufts: Vec<*mut BufferType>,
}

// SAFETY: the pointers are to process-lifetime objects that are never mutated after
// construction; ggml may use them from any thread.
unsafe impl Send for Registry {}
// SAFETY: as above.
unsafe impl Sync for Registry {}

static REGISTRY: OnceLock<Option<Registry>> = OnceLock::new();

/// The registry, or NULL when the host is unusable (logged once).
pub fn init() -> *mut Reg {
    REGISTRY.get_or_init(build).as_ref().map_or(null_mut(), |r| r.reg)
}

fn registry() -> Option<&'static Registry> {
    REGISTRY.get().and_then(|r| r.as_ref())
}

/// Whether `buft` is one of tandem's buffer types.
pub fn is_our_buft(buft: *mut BufferType) -> bool {
    registry().is_some_and(|r| r.bufts.contains(&buft))
}

fn build() -> Option<Registry> {
    let h = match host() {
        Ok(h) => h,
        Err(e) => {
            log::error(&format!("not registering the TANDEM backend: {e}"));
            return None;
        }
    };
    let mismatches = numbering_mismatches(|kind, id| host_name(h, kind, id));
    if let Some(first) = mismatches.first() {
        log::error(&format!(
            "not registering the TANDEM backend: the host's ggml numbers ops/types differently from tandem's \
             ({first}{}); tandem is built for ggml 0.26.0, see docs/abi.md",
            if mismatches.len() > 1 {
                format!(" and {} more", mismatches.len() - 1)
            } else {
                String::new()
            }
        ));
        return None;
    }
    let reg = Box::into_raw(Box::new(Reg {
        api_version: BACKEND_API_VERSION,
        iface: REG_IFACE,
        context: null_mut(),
    }));
    let mut devices = Vec::new();
    let mut bufts = Vec::new();
    for d in tandem_backend::devices() {
        let (cdev, types) = device::new_device(reg, d);
        devices.push(cdev);
        bufts.extend(types);
    }
    log::debug(&format!("TANDEM registry with {} device(s)", devices.len()));
    Some(Registry { reg, devices, bufts })
}

/// The enums whose numbering tandem shares with ggml.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Numbered {
    Op,
    Type,
    UnaryOp,
    GluOp,
}

/// ggml's name for number `id` of `kind`, from the host.
fn host_name(h: &HostApi, kind: Numbered, id: c_int) -> String {
    let f = match kind {
        Numbered::Op => h.op_name,
        Numbered::Type => h.type_name,
        Numbered::UnaryOp => h.unary_op_name,
        Numbered::GluOp => h.glu_op_name,
    };
    // SAFETY: every id passed is one of tandem's known numbers for that enum, each below ggml
    // 0.26.0's *_COUNT; the functions return static strings.
    unsafe { host_str(f(id)) }
}

/// Every number whose host name differs from tandem's, as `kind N: host 'x', tandem 'y'`.
fn numbering_mismatches(name: impl Fn(Numbered, c_int) -> String) -> Vec<String> {
    let mut known: Vec<(Numbered, c_int, &str)> = Vec::new();
    known.extend(Op::ALL.iter().map(|o| (Numbered::Op, o.ggml_id() as c_int, o.name())));
    known.extend(
        ElemType::ALL
            .iter()
            .map(|t| (Numbered::Type, t.ggml_id() as c_int, t.name())),
    );
    known.extend(UnaryOp::ALL.iter().map(|u| (Numbered::UnaryOp, *u as c_int, u.name())));
    known.extend(GluOp::ALL.iter().map(|g| (Numbered::GluOp, *g as c_int, g.name())));
    known
        .into_iter()
        .filter_map(|(kind, id, ours)| {
            let theirs = name(kind, id);
            (theirs != ours).then(|| format!("{kind:?} {id}: host '{theirs}', tandem '{ours}'"))
        })
        .collect()
}

const REG_IFACE: RegIface = RegIface {
    get_name: Some(reg_get_name),
    get_device_count: Some(reg_get_device_count),
    get_device: Some(reg_get_device),
    get_proc_address: Some(reg_get_proc_address),
};

unsafe extern "C" fn reg_get_name(_reg: *mut Reg) -> *const c_char {
    REG_NAME.as_ptr()
}

unsafe extern "C" fn reg_get_device_count(_reg: *mut Reg) -> usize {
    guard("get_device_count", 0, || registry().map_or(0, |r| r.devices.len()))
}

unsafe extern "C" fn reg_get_device(_reg: *mut Reg, index: usize) -> *mut CDevice {
    guard("get_device", null_mut(), || {
        registry()
            .and_then(|r| r.devices.get(index).copied())
            .unwrap_or(null_mut())
    })
}

unsafe extern "C" fn reg_get_proc_address(_reg: *mut Reg, name: *const c_char) -> *mut c_void {
    guard("get_proc_address", null_mut(), || {
        if name.is_null() {
            return null_mut();
        }
        // SAFETY: ggml passes a NUL-terminated function name.
        let name = unsafe { CStr::from_ptr(name) };
        match name.to_bytes() {
            b"ggml_backend_set_n_threads" => backend::set_n_threads as *mut c_void,
            b"tandem_graph_totals" => backend::graph_totals as *mut c_void,
            b"tandem_set_node_timing" => backend::set_node_timing as *mut c_void,
            b"ggml_backend_get_features" => get_features as *mut c_void,
            b"ggml_backend_dev_get_extra_bufts" => device::get_extra_bufts as *mut c_void,
            _ => null_mut(),
        }
    })
}

/// The NULL-terminated feature list and the strings it points into.
struct Features {
    list: Vec<Feature>,
    _strings: Vec<CString>,
}

// SAFETY: built once and only read afterwards; the pointers target the owned strings.
unsafe impl Send for Features {}
// SAFETY: as above.
unsafe impl Sync for Features {}

/// `ggml_backend_get_features`: the CPU features tandem's kernels use, as ggml's CPU backend
/// reports its own (`AVX2` = `1`, ...).
unsafe extern "C" fn get_features(_reg: *mut Reg) -> *mut Feature {
    static FEATURES: OnceLock<Features> = OnceLock::new();
    guard("get_features", null_mut(), || {
        let f = FEATURES.get_or_init(|| {
            let mut strings = Vec::new();
            for n in tandem_ops::simd::features().names() {
                strings.push(CString::new(n.to_ascii_uppercase()).unwrap_or_default());
            }
            let one = CString::new("1").unwrap_or_default();
            let mut list: Vec<Feature> = strings
                .iter()
                .map(|s| Feature {
                    name: s.as_ptr(),
                    value: one.as_ptr(),
                })
                .collect();
            list.push(Feature {
                name: null(),
                value: null(),
            });
            strings.push(one);
            Features {
                list,
                _strings: strings,
            }
        });
        f.list.as_ptr().cast_mut()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tandem_name(kind: Numbered, id: c_int) -> String {
        let id32 = id as u32;
        match kind {
            Numbered::Op => Op::from_ggml(id32).map(|o| o.name()),
            Numbered::Type => ElemType::from_ggml(id32).map(|t| t.name()),
            Numbered::UnaryOp => UnaryOp::from_ggml(id).map(|u| u.name()),
            Numbered::GluOp => GluOp::from_ggml(id).map(|g| g.name()),
        }
        .unwrap_or("?")
        .to_string()
    }

    #[test]
    fn identical_numbering_has_no_mismatch() {
        assert!(numbering_mismatches(tandem_name).is_empty());
    }

    #[test]
    fn a_shifted_op_is_reported() {
        let m = numbering_mismatches(|kind, id| {
            if kind == Numbered::Op && id == Op::MulMat.ggml_id() as c_int {
                "MUL_MAT_ID".into()
            } else {
                tandem_name(kind, id)
            }
        });
        assert_eq!(m, vec!["Op 29: host 'MUL_MAT_ID', tandem 'MUL_MAT'".to_string()]);
    }
}
