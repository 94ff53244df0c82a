//! ARGSORT of `kernels-hip/src/rowsort.hip`: f32 rows into i32 indices, ascending or
//! descending, in exactly the CPU's order (ties by index, NaN last, -0 == +0). One block sorts a
//! row in shared memory, so rows longer than [`MAX_COLS`] go to the CPU.

use super::rows::{aligned_strides, non_empty, row_launch};
use crate::gpu::kernels::KernelError;
use crate::gpu::registry::{dptr, launch_error, LaunchCtx, Node, Registration};
use crate::gpu::safe::KernelArgs;
use tandem_graph::op::SortOrder;
use tandem_graph::{params, ElemType, Op};

pub const FAMILY: &str = "rowsort";

pub const REGISTRATIONS: &[Registration] = &[Registration {
    name: "hip.argsort_f32",
    op: Op::Argsort,
    fuses: None,
    accepts,
    launch,
}];

/// Longest row sorted on the GPU: 4096 u64 keys are 32 KiB of shared memory, inside the 48 KiB
/// every device grants without opt-in.
pub const MAX_COLS: i64 = 4096;

/// `tandem_sort_shape` of rowsort.hip.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SortShape {
    pub ne: [i64; 4],
    pub nbs: [i64; 4],
    pub nbd: [i64; 4],
}
const _: () = assert!(std::mem::size_of::<SortShape>() == 96);

/// Shape and whether the order is descending, or `None` when the kernel does not run the node.
pub fn sort_shape(node: &Node<'_>) -> Option<(SortShape, bool)> {
    let dst = node.dst;
    let a = node.src(0)?;
    if a.ty != ElemType::F32 || dst.ty != ElemType::I32 || a.ne != dst.ne || !non_empty(a.ne) {
        return None;
    }
    if a.ne[0] > MAX_COLS || dst.view_src.is_some() {
        return None;
    }
    let desc = match params::sort_order(dst)? {
        SortOrder::Asc => false,
        SortOrder::Desc => true,
    };
    let shape = SortShape {
        ne: a.ne,
        nbs: aligned_strides(a, 4)?,
        nbd: aligned_strides(dst, 4)?,
    };
    Some((shape, desc))
}

fn accepts(node: &Node<'_>, _next: Option<&Node<'_>>) -> bool {
    sort_shape(node).is_some()
}

/// Keys per row after padding (a power of two) and the threads sorting them.
pub fn sort_geometry(ne0: i64) -> (u32, u32) {
    let padded = (ne0.max(1) as u32).next_power_of_two();
    (padded, (padded / 2).clamp(64, 1024))
}

/// # Safety
/// As [`crate::gpu::registry::Launch`].
unsafe fn launch(ctx: &LaunchCtx<'_>, node: &Node<'_>, _next: Option<&Node<'_>>) -> Result<(), KernelError> {
    let (shape, desc) = sort_shape(node).ok_or_else(|| launch_error("launch_argsort", "node not accepted"))?;
    let src = node.src(0).ok_or_else(|| launch_error("launch_argsort", "no source"))?;
    let (padded, threads) = sort_geometry(shape.ne[0]);
    let f = ctx.kernels.function(FAMILY, "tandem_argsort_f32")?;
    let mut args = KernelArgs::new();
    args.push(dptr(src))
        .push(dptr(node.dst))
        .push(shape)
        .push(desc as i32)
        .push(padded as i32);
    let cfg = row_launch(shape.ne, threads, padded * 8);
    // SAFETY: the parameters are (const char*, char*, tandem_sort_shape, i32, i32); the shared
    // memory holds `padded` u64 keys; strides were checked against both tensors.
    unsafe { ctx.stream.launch(&f, cfg, &mut args) }.map_err(KernelError::Gpu)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_graph::GraphBuilder;

    #[test]
    fn accepts_rows_that_fit_shared_memory() {
        let mut b = GraphBuilder::new();
        let a = b.new_tensor(ElemType::F32, &[4096, 2]);
        let asc = b.argsort(a, SortOrder::Asc);
        let t = b.transpose(a);
        let desc = b.argsort(t, SortOrder::Desc);
        let long = b.new_tensor(ElemType::F32, &[4097]);
        let too_long = b.argsort(long, SortOrder::Asc);
        let g = b.build();
        let (s, d) = sort_shape(&Node::of(&g, asc)).unwrap();
        assert!(!d);
        assert_eq!(s.nbd, [4, 16384, 32768, 32768]);
        let (s, d) = sort_shape(&Node::of(&g, desc)).unwrap();
        assert!(d);
        assert_eq!(s.ne, [2, 4096, 1, 1]);
        assert_eq!(s.nbs[0], 16384);
        assert!(!accepts(&Node::of(&g, too_long), None));

        let mut g2 = g.clone();
        g2.tensor_mut(asc).set_param_i32(0, 2);
        assert!(!accepts(&Node::of(&g2, asc), None));
        let mut g3 = g;
        g3.tensor_mut(asc).ty = ElemType::I64;
        assert!(!accepts(&Node::of(&g3, asc), None));
    }

    #[test]
    fn geometry_pads_to_a_power_of_two_within_limits() {
        assert_eq!(sort_geometry(1), (1, 64));
        assert_eq!(sort_geometry(100), (128, 64));
        assert_eq!(sort_geometry(1024), (1024, 512));
        assert_eq!(sort_geometry(4096), (4096, 1024));
        let (padded, threads) = sort_geometry(MAX_COLS);
        assert!(padded as usize * 8 <= 48 * 1024 && threads <= 1024 && threads % 64 == 0);
    }
}
