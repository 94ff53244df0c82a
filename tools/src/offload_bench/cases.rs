//! What offload-bench measures: the projections of two model presets, the weight types a split
//! node takes, the rotation over weight copies (and expert sets) that keeps every call's reads
//! cold, and the parsing of the flags that choose them.

use rand::seq::SliceRandom;
use rand_pcg::Pcg64;
use regex::Regex;
use tandem_backend::gpu::split::SplitKey;
use tandem_graph::ElemType;

/// Bytes the rotated reads of a case span at least: ten times a GPU's 50 MB L2, and more than a
/// server CPU's last-level cache.
pub const ROTATION_BYTES: usize = 512 << 20;
/// Rotation steps (weight copies, or expert sets) at most; the narrowest weight (q4_0 4096 × 1024,
/// 2.4 MB) then still spans 151 MB.
const MAX_VARIANTS: usize = 64;

/// The weight types a split node takes (the GEMV family).
pub const SPLIT_TYPES: [ElemType; 14] = [
    ElemType::F32,
    ElemType::F16,
    ElemType::BF16,
    ElemType::Q8_0,
    ElemType::Q4_0,
    ElemType::Q4_1,
    ElemType::Q5_0,
    ElemType::Q5_1,
    ElemType::IQ4NL,
    ElemType::Q2K,
    ElemType::Q3K,
    ElemType::Q4K,
    ElemType::Q5K,
    ElemType::Q6K,
];

/// One weight of a model: a projection of `k` inputs and `m` outputs, or with `experts` an MoE
/// expert tensor of which `used` experts serve each token.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Projection {
    pub preset: &'static str,
    pub name: &'static str,
    pub k: i64,
    pub m: i64,
    pub experts: i64,
    pub used: i64,
}

/// A Llama-3-8B projection.
const fn dense(name: &'static str, k: i64, m: i64) -> Projection {
    Projection {
        preset: "llama3-8b",
        name,
        k,
        m,
        experts: 0,
        used: 0,
    }
}

/// A Qwen3-30B-A3B expert tensor: 128 experts, 8 used a token.
const fn experts(name: &'static str, k: i64, m: i64) -> Projection {
    Projection {
        preset: "qwen3-30b-a3b",
        name,
        k,
        m,
        experts: 128,
        used: 8,
    }
}

/// The distinct shapes of Llama-3-8B's projections (q and o, k and v, gate and up share one) and
/// of Qwen3-30B-A3B's expert tensors.
pub const PROJECTIONS: [Projection; 6] = [
    dense("attn_qo", 4096, 4096),
    dense("attn_kv", 4096, 1024),
    dense("ffn_gate_up", 4096, 14336),
    dense("ffn_down", 14336, 4096),
    experts("ffn_gate_up_exps", 2048, 768),
    experts("ffn_down_exps", 768, 2048),
];

/// One measured case: a projection, a weight type and `n` columns (tokens of a MUL_MAT_ID).
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    pub proj: Projection,
    pub ty: ElemType,
    pub n: i64,
    pub name: String,
}

impl Case {
    pub fn new(proj: Projection, ty: ElemType, n: i64) -> Case {
        Case {
            name: format!("{}.{}.{}.n{n}", proj.preset, proj.name, ty),
            proj,
            ty,
            n,
        }
    }

    pub fn is_moe(&self) -> bool {
        self.proj.experts > 0
    }

    /// Bytes of one expert (of the whole weight of a MUL_MAT).
    pub fn matrix_bytes(&self) -> usize {
        self.ty.row_size(self.proj.k).unwrap_or(0) * self.proj.m as usize
    }

    /// Bytes of one copy of the weight, every expert.
    pub fn weight_bytes(&self) -> usize {
        self.matrix_bytes() * self.proj.experts.max(1) as usize
    }

    /// Experts one call reads: `used` a token, no token sharing one (the most a call can read).
    pub fn experts_per_call(&self) -> usize {
        (self.proj.used * self.n) as usize
    }

    /// Weight bytes one call reads: the whole weight, or the experts the call uses.
    pub fn read_bytes(&self) -> usize {
        if self.is_moe() {
            self.experts_per_call() * self.matrix_bytes()
        } else {
            self.weight_bytes()
        }
    }

    /// The shape key under which the scheduler learns this case's share.
    pub fn split_key(&self) -> SplitKey {
        SplitKey {
            ty: self.ty,
            k: self.proj.k,
            m: self.proj.m,
            n: if self.is_moe() { self.proj.used * self.n } else { self.n },
            experts: self.proj.experts,
        }
    }

    pub fn rotation(&self) -> Rotation {
        let sets_per_copy = if self.is_moe() {
            (self.proj.experts as usize / self.experts_per_call().max(1)).max(1)
        } else {
            1
        };
        let variants = ROTATION_BYTES.div_ceil(self.read_bytes().max(1)).clamp(1, MAX_VARIANTS);
        Rotation {
            variants,
            sets_per_copy,
            copies: variants.div_ceil(sets_per_copy),
        }
    }
}

/// How a case's calls rotate: `variants` steps, each a copy of the weight (and a set of experts
/// in it); a copy holds `sets_per_copy` disjoint expert sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rotation {
    pub variants: usize,
    pub sets_per_copy: usize,
    pub copies: usize,
}

/// Every case of `types` and `n`, in preset order, whose name `filter` matches.
pub fn cases(types: &[ElemType], n: i64, filter: Option<&Regex>) -> Vec<Case> {
    PROJECTIONS
        .iter()
        .flat_map(|p| types.iter().map(move |&ty| Case::new(*p, ty, n)))
        .filter(|c| filter.is_none_or(|f| f.is_match(&c.name)))
        .collect()
}

/// `f16,q4_K` → the types, each one a split node takes; duplicates dropped.
pub fn parse_types(list: &str) -> Result<Vec<ElemType>, String> {
    let valid = || SPLIT_TYPES.iter().map(|t| t.name()).collect::<Vec<_>>().join(", ");
    let mut out = Vec::new();
    for s in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let ty = ElemType::from_name(s).ok_or_else(|| format!("--types: unknown type '{s}' (valid: {})", valid()))?;
        if !SPLIT_TYPES.contains(&ty) {
            return Err(format!(
                "--types: '{s}' is no weight type a split node takes (valid: {})",
                valid()
            ));
        }
        if !out.contains(&ty) {
            out.push(ty);
        }
    }
    if out.is_empty() {
        return Err(format!("--types: no type given in '{list}' (valid: {})", valid()));
    }
    Ok(out)
}

/// `0.1,0.5` → the GPU shares, each in [0, 1], sorted, duplicates dropped.
pub fn parse_shares(list: &str) -> Result<Vec<f64>, String> {
    let mut out = Vec::new();
    for s in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let v: f64 = s
            .parse()
            .map_err(|_| format!("--sweep: '{s}' is not a number (shares are GPU fractions in [0, 1])"))?;
        if !(0.0..=1.0).contains(&v) {
            return Err(format!(
                "--sweep: share '{s}' is outside [0, 1] (0 = every row on the CPU, 1 = every row on the GPU)"
            ));
        }
        out.push(v);
    }
    if out.is_empty() {
        return Err(format!("--sweep: no share given in '{list}'"));
    }
    out.sort_by(f64::total_cmp);
    out.dedup();
    Ok(out)
}

pub fn parse_filter(p: Option<&str>) -> Result<Option<Regex>, String> {
    p.map(|p| Regex::new(p).map_err(|e| format!("--filter: bad regular expression '{p}': {e}")))
        .transpose()
}

/// The ids of every rotation step of a MUL_MAT_ID (none for a MUL_MAT): token after token, `used`
/// experts each. Each copy's experts are shuffled and dealt out in disjoint sets, one per step, so
/// no expert serves two tokens of a call or two steps on one copy.
pub fn expert_sets(case: &Case, rot: Rotation, rng: &mut Pcg64) -> Vec<Vec<i32>> {
    if !case.is_moe() {
        return vec![Vec::new(); rot.variants];
    }
    let per_call = case.experts_per_call();
    let mut perm: Vec<i32> = Vec::new();
    (0..rot.variants)
        .map(|v| {
            let set = v % rot.sets_per_copy;
            if set == 0 {
                perm = (0..case.proj.experts as i32).collect();
                perm.shuffle(rng);
            }
            perm[set * per_call..(set + 1) * per_call].to_vec()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn case(name: &str, ty: ElemType, n: i64) -> Case {
        let p = PROJECTIONS.iter().find(|p| p.name == name).expect("a projection");
        Case::new(*p, ty, n)
    }

    #[test]
    fn types_parse_with_ggml_names_and_refuse_the_rest() {
        let t = parse_types("f16, q8_0,Q4_0,q4_K,q4_k").unwrap();
        assert_eq!(t, vec![ElemType::F16, ElemType::Q8_0, ElemType::Q4_0, ElemType::Q4K]);
        let bad = parse_types("f16,q4_9").unwrap_err();
        assert!(
            bad.contains("--types") && bad.contains("'q4_9'") && bad.contains("q6_K"),
            "{bad}"
        );
        let no_split = parse_types("q8_K").unwrap_err();
        assert!(
            no_split.contains("--types") && no_split.contains("'q8_K'"),
            "{no_split}"
        );
        assert!(parse_types("i32").is_err());
        assert!(parse_types(" , ").unwrap_err().contains("--types"));
    }

    #[test]
    fn shares_parse_sorted_and_bounded() {
        assert_eq!(parse_shares("0.9,0.1, 0.5,0.1").unwrap(), vec![0.1, 0.5, 0.9]);
        assert_eq!(parse_shares("0,1").unwrap(), vec![0.0, 1.0]);
        for bad in ["1.5", "-0.1", "NaN", "inf"] {
            let e = parse_shares(&format!("0.5,{bad}")).unwrap_err();
            assert!(e.contains("--sweep") && e.contains(bad), "{bad}: {e}");
        }
        let e = parse_shares("0.5,half").unwrap_err();
        assert!(
            e.contains("--sweep") && e.contains("'half'") && e.contains("not a number"),
            "{e}"
        );
        assert!(parse_shares("").unwrap_err().contains("--sweep"));
    }

    #[test]
    fn a_bad_filter_names_the_flag_and_the_pattern() {
        let e = parse_filter(Some("ffn_(down")).unwrap_err();
        assert!(e.contains("--filter") && e.contains("'ffn_(down'"), "{e}");
        assert!(parse_filter(None).unwrap().is_none());
    }

    #[test]
    fn cases_cover_every_projection_and_type_and_filter_by_name() {
        let types = [ElemType::F16, ElemType::Q4K];
        let all = cases(&types, 1, None);
        assert_eq!(all.len(), PROJECTIONS.len() * types.len());
        assert_eq!(all[0].name, "llama3-8b.attn_qo.f16.n1");
        assert!(all.iter().any(|c| c.name == "qwen3-30b-a3b.ffn_down_exps.q4_K.n1"));
        let f = parse_filter(Some(r"ffn_down\b.*q4_K")).unwrap();
        let some: Vec<String> = cases(&types, 2, f.as_ref()).into_iter().map(|c| c.name).collect();
        assert_eq!(some, vec!["llama3-8b.ffn_down.q4_K.n2"]);
        let none = parse_filter(Some("mistral")).unwrap();
        assert!(cases(&types, 1, none.as_ref()).is_empty());
    }

    #[test]
    fn bytes_read_count_the_used_experts_only() {
        let down = case("ffn_down", ElemType::Q4_0, 1);
        assert_eq!(down.weight_bytes(), 4096 * 14336 / 32 * 18);
        assert_eq!(down.read_bytes(), down.weight_bytes());
        assert_eq!(down.split_key().n, 1);
        let exps = case("ffn_gate_up_exps", ElemType::Q8_0, 2);
        assert_eq!(exps.matrix_bytes(), 768 * 2048 / 32 * 34);
        assert_eq!(exps.weight_bytes(), 128 * exps.matrix_bytes());
        assert_eq!(exps.read_bytes(), 16 * exps.matrix_bytes());
        let key = exps.split_key();
        assert_eq!((key.k, key.m, key.n, key.experts), (2048, 768, 16, 128));
    }

    #[test]
    fn rotations_span_the_working_set_up_to_the_cap() {
        // f16 ffn_gate_up: 117 MB a copy, five copies span 587 MB.
        let r = case("ffn_gate_up", ElemType::F16, 1).rotation();
        assert_eq!(
            r,
            Rotation {
                variants: 5,
                sets_per_copy: 1,
                copies: 5
            }
        );
        // q4_0 attn_kv: 2.4 MB a copy, capped at 64.
        let r = case("attn_kv", ElemType::Q4_0, 1).rotation();
        assert_eq!(
            r,
            Rotation {
                variants: MAX_VARIANTS,
                sets_per_copy: 1,
                copies: MAX_VARIANTS
            }
        );
        // f16 expert gate: 25 MB a call, 16 sets of 8 experts a copy.
        let c = case("ffn_gate_up_exps", ElemType::F16, 1);
        let r = c.rotation();
        assert_eq!((r.sets_per_copy, r.variants, r.copies), (16, 22, 2));
        assert!(r.variants * c.read_bytes() >= ROTATION_BYTES);
        // Eight tokens read 64 experts: two sets a copy.
        assert_eq!(case("ffn_down_exps", ElemType::Q4K, 8).rotation().sets_per_copy, 2);
    }

    #[test]
    fn expert_sets_are_distinct_in_a_call_and_disjoint_on_a_copy() {
        let c = case("ffn_down_exps", ElemType::Q4_0, 3);
        let rot = c.rotation();
        let sets = expert_sets(&c, rot, &mut Pcg64::seed_from_u64(7));
        assert_eq!(sets.len(), rot.variants);
        for copy in sets.chunks(rot.sets_per_copy) {
            let mut seen: Vec<i32> = copy.iter().flatten().copied().collect();
            assert!(copy.iter().all(|s| s.len() == 24));
            let n = seen.len();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), n, "an expert twice on one copy");
            assert!(seen.iter().all(|&e| (0..128).contains(&e)));
        }
        let dense = case("attn_qo", ElemType::F16, 1);
        assert!(expert_sets(&dense, dense.rotation(), &mut Pcg64::seed_from_u64(7))
            .iter()
            .all(Vec::is_empty));
    }
}
