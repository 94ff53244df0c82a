//! Leaf data and allocated copies of a case's graph: seeded random fills (quantized through
//! `quantize_row`), poisoned outputs and sentinels after every tensor.

use crate::cases::Fill;
use crate::compare::{sentinel_broken, write_sentinel};
use half::{bf16, f16};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_pcg::Pcg64;
use std::collections::HashMap;
use tandem_backend::buffer::allocate_graph;
use tandem_backend::HostBuffer;
use tandem_graph::{ElemType, Graph, Tensor, TensorId};
use tandem_ops::quant::quantize_row;

/// Bytes of sentinel after every tensor.
pub const PAD: usize = 64;

/// The generator of one case: the run seed mixed with the case name, so a case draws the same
/// data whatever filter selected it.
pub fn case_rng(seed: u64, name: &str) -> Pcg64 {
    // FNV-1a over the name.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    Pcg64::seed_from_u64(seed ^ h)
}

/// The bytes of a contiguous leaf `t` filled per `fill`. Only the first `distinct_rows` rows are
/// drawn; later rows repeat them (benchmarks use this to fill large weights quickly).
pub fn leaf_bytes(t: &Tensor, fill: Fill, rng: &mut Pcg64, distinct_rows: usize) -> Result<Vec<u8>, String> {
    if !t.is_contiguous() {
        return Err(format!("leaf '{}' is not contiguous", t.name));
    }
    let ne0 = t.ne[0].max(0) as usize;
    let nrows = t.nrows().max(0) as usize;
    let row_bytes =
        t.ty.row_size(t.ne[0])
            .ok_or_else(|| format!("leaf {}: row is not a whole number of blocks", t.describe()))?;
    let mut out = vec![0u8; row_bytes * nrows];
    // A causal mask differs in every row.
    let drawn = if matches!(fill, Fill::Causal(_)) {
        nrows
    } else {
        nrows.min(distinct_rows.max(1))
    };
    let plane_rows = t.ne[1].max(1) as usize;
    let mut vals = vec![0f32; ne0];
    let mut ints = vec![0i64; ne0];
    for r in 0..drawn {
        let dst = &mut out[r * row_bytes..(r + 1) * row_bytes];
        match t.ty {
            ElemType::I32 | ElemType::I64 => {
                int_row(fill, rng, &mut ints)?;
                encode_ints(t.ty, &ints, dst);
            }
            _ => {
                float_row(fill, rng, &mut vals, r % plane_rows)?;
                encode_floats(t.ty, &vals, dst)?;
            }
        }
    }
    for r in drawn..nrows {
        let from = (r % drawn) * row_bytes;
        out.copy_within(from..from + row_bytes, r * row_bytes);
    }
    Ok(out)
}

/// Row `row` (within its plane) of a float leaf.
fn float_row(fill: Fill, rng: &mut Pcg64, v: &mut [f32], row: usize) -> Result<(), String> {
    match fill {
        Fill::Causal(offset) => {
            for (j, x) in v.iter_mut().enumerate() {
                *x = if j as i64 <= row as i64 + offset {
                    0.0
                } else {
                    f32::NEG_INFINITY
                };
            }
        }
        Fill::Uniform(lo, hi) => v.iter_mut().for_each(|x| *x = rng.random_range(lo..hi)),
        Fill::Mask(p) => {
            for (i, x) in v.iter_mut().enumerate() {
                *x = if i > 0 && rng.random::<f32>() < p {
                    f32::NEG_INFINITY
                } else {
                    rng.random_range(-1.0..1.0)
                };
            }
        }
        Fill::Distinct => {
            let n = v.len();
            let mut perm: Vec<usize> = (0..n).collect();
            perm.shuffle(rng);
            for (x, p) in v.iter_mut().zip(perm) {
                *x = (p as f32 - n as f32 / 2.0) * (4.0 / n.max(1) as f32);
            }
        }
        Fill::Index(_) | Fill::DistinctIndex(_) => return Err("index fill on a float tensor".into()),
    }
    Ok(())
}

fn int_row(fill: Fill, rng: &mut Pcg64, v: &mut [i64]) -> Result<(), String> {
    match fill {
        Fill::Index(upper) => v.iter_mut().for_each(|x| *x = rng.random_range(0..upper.max(1))),
        Fill::DistinctIndex(upper) => {
            if (v.len() as i64) > upper {
                return Err(format!("{} distinct indices below {upper} do not exist", v.len()));
            }
            let mut all: Vec<i64> = (0..upper).collect();
            all.shuffle(rng);
            v.copy_from_slice(&all[..v.len()]);
        }
        Fill::Uniform(lo, hi) => v.iter_mut().for_each(|x| *x = rng.random_range(lo..hi).round() as i64),
        Fill::Mask(_) | Fill::Distinct | Fill::Causal(_) => return Err("float fill on an integer tensor".into()),
    }
    Ok(())
}

fn encode_ints(ty: ElemType, v: &[i64], dst: &mut [u8]) {
    let w = ty.type_size();
    for (x, d) in v.iter().zip(dst.chunks_exact_mut(w)) {
        match ty {
            ElemType::I32 => d.copy_from_slice(&(*x as i32).to_le_bytes()),
            _ => d.copy_from_slice(&x.to_le_bytes()),
        }
    }
}

fn encode_floats(ty: ElemType, v: &[f32], dst: &mut [u8]) -> Result<(), String> {
    match ty {
        ElemType::F32 => v
            .iter()
            .zip(dst.chunks_exact_mut(4))
            .for_each(|(x, d)| d.copy_from_slice(&x.to_le_bytes())),
        ElemType::F16 => v
            .iter()
            .zip(dst.chunks_exact_mut(2))
            .for_each(|(x, d)| d.copy_from_slice(&f16::from_f32(*x).to_bits().to_le_bytes())),
        ElemType::BF16 => v
            .iter()
            .zip(dst.chunks_exact_mut(2))
            .for_each(|(x, d)| d.copy_from_slice(&bf16::from_f32(*x).to_bits().to_le_bytes())),
        q if q.is_quantized() => quantize_row(q, v, dst).map_err(|e| format!("quantize_row: {e}"))?,
        other => return Err(format!("no random fill for {other}")),
    }
    Ok(())
}

/// One allocated copy of a graph: every owning tensor with [`PAD`] sentinel bytes after it.
pub struct Instance {
    pub graph: Graph,
    buf: HostBuffer,
}

impl Instance {
    pub fn new(template: &Graph) -> Result<Instance, String> {
        let mut graph = template.clone();
        for t in &mut graph.tensors {
            t.data = 0;
        }
        let buf = allocate_graph(&mut graph, PAD)?;
        Ok(Instance { graph, buf })
    }

    /// The buffer range `[data, data + len)` of tensor `id`.
    fn range(&self, id: TensorId, len: usize) -> std::ops::Range<usize> {
        let start = self.graph.tensor(id).data - self.buf.addr();
        start..start + len
    }

    /// Copies `bytes` to the start of leaf `id`.
    pub fn write(&mut self, id: TensorId, bytes: &[u8]) -> Result<(), String> {
        let t = self.graph.tensor(id);
        if bytes.len() > t.nbytes() {
            return Err(format!(
                "{} bytes do not fit '{}' ({} bytes)",
                bytes.len(),
                t.name,
                t.nbytes()
            ));
        }
        let r = self.range(id, bytes.len());
        self.buf.as_mut_slice()[r].copy_from_slice(bytes);
        Ok(())
    }

    /// Tensors that own bytes (no `view_src`).
    fn owners(&self) -> Vec<TensorId> {
        (0..self.graph.tensors.len() as u32)
            .map(TensorId)
            .filter(|&id| self.graph.tensor(id).view_src.is_none())
            .collect()
    }

    /// Fills every node that owns its bytes with 0xFF (NaN for the float types), so an element
    /// the device never writes cannot pass as a result.
    pub fn poison_nodes(&mut self) {
        let nodes: std::collections::HashSet<TensorId> = self.graph.nodes.iter().copied().collect();
        for id in self.owners() {
            if nodes.contains(&id) {
                let r = self.range(id, self.graph.tensor(id).nbytes());
                self.buf.as_mut_slice()[r].fill(0xFF);
            }
        }
    }

    pub fn write_sentinels(&mut self) {
        for id in self.owners() {
            let n = self.graph.tensor(id).nbytes();
            let r = self.range(id, n + PAD);
            write_sentinel(&mut self.buf.as_mut_slice()[r.start + n..r.end]);
        }
    }

    /// The graph with the whole host image and its address, for a device that mirrors the
    /// image into its own memory.
    pub fn image(&mut self) -> (&Graph, &mut [u8], usize) {
        let base = self.buf.addr();
        (&self.graph, self.buf.as_mut_slice(), base)
    }

    /// Names the first tensor whose sentinel bytes changed.
    pub fn check_sentinels(&self) -> Result<(), String> {
        for id in self.owners() {
            let t = self.graph.tensor(id);
            let n = t.nbytes();
            let r = self.range(id, n + PAD);
            if let Some(pos) = sentinel_broken(&self.buf.as_slice()[r.start + n..r.end]) {
                return Err(format!(
                    "wrote past the end of '{}' {} (sentinel byte {pos} changed)",
                    t.name,
                    t.describe()
                ));
            }
        }
        Ok(())
    }
}

/// Draws every leaf of `g` once and writes the same bytes into each of `copies`.
pub fn fill_leaves(
    g: &Graph,
    fills: &HashMap<TensorId, Fill>,
    rng: &mut Pcg64,
    distinct_rows: usize,
    copies: &mut [&mut Instance],
) -> Result<(), String> {
    for id in g.leaves() {
        let t = g.tensor(id);
        if t.view_src.is_some() {
            continue;
        }
        let fill = fills.get(&id).copied().unwrap_or(Fill::Uniform(-1.0, 1.0));
        let bytes = leaf_bytes(t, fill, rng, distinct_rows).map_err(|e| format!("filling '{}': {e}", t.name))?;
        for c in copies.iter_mut() {
            c.write(id, &bytes)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tandem_graph::GraphBuilder;

    #[test]
    fn fills_are_seeded_and_in_range() {
        let t = Tensor::new(ElemType::I32, &[5, 3]);
        let a = leaf_bytes(&t, Fill::DistinctIndex(5), &mut case_rng(1, "x"), usize::MAX).unwrap();
        let b = leaf_bytes(&t, Fill::DistinctIndex(5), &mut case_rng(1, "x"), usize::MAX).unwrap();
        assert_eq!(a, b);
        for row in a.chunks(20) {
            let mut v: Vec<i32> = row
                .chunks(4)
                .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            v.sort();
            assert_eq!(v, vec![0, 1, 2, 3, 4]);
        }
        let m = Tensor::new(ElemType::F32, &[64, 8]);
        let mb = leaf_bytes(&m, Fill::Mask(0.5), &mut case_rng(2, "m"), usize::MAX).unwrap();
        let vals: Vec<f32> = mb
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert!(vals.iter().any(|v| v.is_infinite()));
        assert!(vals.chunks(64).all(|row| row[0].is_finite()));
    }

    #[test]
    fn sentinels_catch_an_overrun_and_nodes_are_poisoned() {
        let mut b = GraphBuilder::new();
        let x = b.new_tensor(ElemType::F32, &[8]);
        let y = b.scale(x, 2.0, 0.0);
        let g = b.build();
        let mut inst = Instance::new(&g).unwrap();
        inst.poison_nodes();
        inst.write_sentinels();
        assert!(inst.check_sentinels().is_ok());
        let t = inst.graph.tensor(y).clone();
        let r = inst.range(y, t.nbytes() + 1);
        assert!(inst.buf.as_slice()[r.start..r.end - 1].iter().all(|&b| b == 0xFF));
        inst.buf.as_mut_slice()[r.end - 1] ^= 0x40;
        let e = inst.check_sentinels().unwrap_err();
        assert!(e.contains(&t.name), "{e}");
    }
}
