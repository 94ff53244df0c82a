//! Kernel families compiled for one device at first use (through the JIT cache) and kept loaded.

use super::api::{CompileError, GpuError, KernelCompiler};
use super::jit::{CompileRequest, JitError, KernelCache, Origin};
use super::safe::{Context, Function, Module};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tandem_kernels_hip::{catalog, units_of, KernelSource, KernelUnit, HEADERS};

#[derive(Clone, Debug)]
pub enum KernelError {
    UnknownFamily(String),
    /// (family, entry): an entry no unit of a family compiled in units defines.
    UnknownEntry(String, String),
    Jit(JitError),
    Gpu(GpuError),
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::UnknownFamily(n) => write!(f, "no kernel family {n}"),
            KernelError::UnknownEntry(family, e) => write!(f, "no unit of kernel family {family} defines {e}"),
            KernelError::Jit(e) => e.fmt(f),
            KernelError::Gpu(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for KernelError {}

impl From<GpuError> for KernelError {
    fn from(e: GpuError) -> Self {
        KernelError::Gpu(e)
    }
}

/// The full option list for `k` on `arch`: the compiler's arch options, then the family's.
pub fn options_for(compiler: &dyn KernelCompiler, k: &KernelSource, arch: &str) -> Vec<String> {
    options_for_unit(compiler, k, None, arch)
}

/// [`options_for`] for one unit of `k` (`None`: the whole family).
pub fn options_for_unit(
    compiler: &dyn KernelCompiler,
    k: &KernelSource,
    unit: Option<&KernelUnit>,
    arch: &str,
) -> Vec<String> {
    let mut o = compiler.arch_options(arch);
    o.extend(k.options.iter().map(|s| s.to_string()));
    if let Some(u) = unit {
        o.push("-DTANDEM_UNIT=1".to_string());
        o.push(format!("-D{}=1", u.define()));
    }
    // Only the GEMVs stream weights through tandem_ld_stream16 / tandem_seg_cp16; the other
    // families keep their one cached build.
    if k.family == "gemv" && crate::config::Config::get().weights_evict_first && arch.starts_with("sm_") {
        o.push("-DTANDEM_WEIGHTS_EVICT_FIRST".to_string());
    }
    o
}

/// Compiles (or fetches from `cache`) the code object of `k` (of its `unit` only, where given)
/// for `arch`.
pub fn build(
    compiler: &dyn KernelCompiler,
    cache: &KernelCache,
    k: &KernelSource,
    unit: Option<&KernelUnit>,
    arch: &str,
) -> Result<(Arc<Vec<u8>>, Origin), JitError> {
    let options = options_for_unit(compiler, k, unit, arch);
    let id = compiler.id();
    let name = program_name(k.family, unit);
    let req = CompileRequest {
        name: &name,
        source: k.source,
        headers: HEADERS,
        options: &options,
        arch,
        compiler: &id,
    };
    cache.get_or_compile(&req, || {
        compiler
            .compile(k.file, k.source, HEADERS, &options)
            .map_err(|e| CompileError {
                program: format!("{name} ({})", k.file),
                ..e
            })
    })
}

/// `family`, or `family.unit` for one unit of it.
pub fn program_name(family: &str, unit: Option<&KernelUnit>) -> String {
    match unit {
        Some(u) => format!("{family}.{}", u.name),
        None => family.to_string(),
    }
}

/// A family's load record, for `tandem kernels` and JIT timing.
#[derive(Clone, Debug)]
pub struct LoadRecord {
    pub family: &'static str,
    /// The unit loaded, for a family compiled in units.
    pub unit: Option<&'static str>,
    pub origin: Origin,
    pub time: Duration,
    pub bytes: usize,
}

/// (family, entry, function) of a looked-up entry point.
type CachedFunction = (String, String, Function);

/// The kernels of one device.
pub struct Kernels {
    ctx: Arc<Context>,
    compiler: Arc<dyn KernelCompiler>,
    cache: Arc<KernelCache>,
    /// Loaded modules by (family, unit name or "").
    modules: Mutex<HashMap<(&'static str, &'static str), Arc<Module>>>,
    /// Entry points already looked up, so a launch costs no driver lookup; keyed by a hash of
    /// (family, entry) so a lookup allocates nothing.
    functions: Mutex<HashMap<u64, Vec<CachedFunction>>>,
    records: Mutex<Vec<LoadRecord>>,
    /// The target the families are compiled for (`sm_90a` where the compiler turns the
    /// device's `sm_90` into it), see [`Kernels::target`].
    target: String,
}

/// The compile target named in `options` (`--gpu-architecture=` or `--offload-arch=`), else `arch`.
pub fn target_of(options: &[String], arch: &str) -> String {
    options
        .iter()
        .find_map(|o| {
            o.strip_prefix("--gpu-architecture=")
                .or_else(|| o.strip_prefix("--offload-arch="))
        })
        .unwrap_or(arch)
        .to_string()
}

impl Kernels {
    pub fn new(ctx: Arc<Context>, compiler: Arc<dyn KernelCompiler>, cache: Arc<KernelCache>) -> Kernels {
        let arch = ctx.info().arch.clone();
        let target = target_of(&compiler.arch_options(&arch), &arch);
        Kernels {
            ctx,
            compiler,
            cache,
            modules: Mutex::new(HashMap::new()),
            functions: Mutex::new(HashMap::new()),
            records: Mutex::new(Vec::new()),
            target,
        }
    }

    /// The compile target of this device's kernels, feature suffix included (`sm_90a`): what
    /// decides whether architecture-specific code (Hopper's warpgroup mma) is in the cubins.
    pub fn target(&self) -> &str {
        &self.target
    }

    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// The loaded module of `family` (of its `unit`, for a family compiled in units), compiling
    /// it on first use. Concurrent first uses of one module compile once (the JIT cache's
    /// per-key lock) and load at most one module each.
    pub fn module(&self, family: &str, unit: Option<&'static KernelUnit>) -> Result<Arc<Module>, KernelError> {
        let k = tandem_kernels_hip::find(family).ok_or_else(|| KernelError::UnknownFamily(family.into()))?;
        let key = (k.family, unit.map_or("", |u| u.name));
        if let Some(m) = self.lock_modules().get(&key) {
            return Ok(m.clone());
        }
        let t0 = Instant::now();
        let (code, origin) =
            build(&*self.compiler, &self.cache, k, unit, &self.ctx.info().arch).map_err(KernelError::Jit)?;
        let module = self.ctx.load_module(&code)?;
        let mut modules = self.lock_modules();
        let m = modules.entry(key).or_insert(module).clone();
        drop(modules);
        self.records.lock().unwrap_or_else(|p| p.into_inner()).push(LoadRecord {
            family: k.family,
            unit: unit.map(|u| u.name),
            origin,
            time: t0.elapsed(),
            bytes: code.len(),
        });
        Ok(m)
    }

    /// The entry point `entry` of `family`.
    pub fn function(&self, family: &str, entry: &str) -> Result<Function, KernelError> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (family, entry).hash(&mut h);
        let key = h.finish();
        let found = |v: &Vec<CachedFunction>| {
            v.iter()
                .find(|(fam, e, _)| fam == family && e == entry)
                .map(|(_, _, f)| f.clone())
        };
        if let Some(f) = self
            .functions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .and_then(found)
        {
            return Ok(f);
        }
        // A family compiled in units loads the unit defining the entry.
        let unit = tandem_kernels_hip::unit_of(family, entry);
        if unit.is_none() && !units_of(family).is_empty() {
            return Err(KernelError::UnknownEntry(family.to_string(), entry.to_string()));
        }
        let f = self.module(family, unit)?.function(entry)?;
        self.functions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key)
            .or_default()
            .push((family.to_string(), entry.to_string(), f.clone()));
        Ok(f)
    }

    /// Loads every catalog family, each unit of a family compiled in units (`tandem kernels
    /// --build`); one result per module, named as [`program_name`].
    pub fn build_all(&self) -> Vec<(String, Result<(), KernelError>)> {
        modules_of_catalog()
            .into_iter()
            .map(|(k, u)| (program_name(k.family, u), self.module(k.family, u).map(|_| ())))
            .collect()
    }

    /// What was loaded so far, in order, with where it came from and how long it took.
    pub fn records(&self) -> Vec<LoadRecord> {
        self.records.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn lock_modules(&self) -> std::sync::MutexGuard<'_, HashMap<(&'static str, &'static str), Arc<Module>>> {
        self.modules.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Every module the runtime may load: each family whole, or each of its units.
pub fn modules_of_catalog() -> Vec<(&'static KernelSource, Option<&'static KernelUnit>)> {
    catalog()
        .iter()
        .flat_map(|k| {
            let units = units_of(k.family);
            if units.is_empty() {
                vec![(k, None)]
            } else {
                units.iter().map(|u| (k, Some(u))).collect()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::target_of;

    #[test]
    fn the_kernels_target_is_read_from_the_compile_options() {
        let o = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            target_of(&o(&["--gpu-architecture=sm_90a", "-std=c++17"]), "sm_90"),
            "sm_90a"
        );
        assert_eq!(target_of(&o(&["--offload-arch=gfx1100", "-O3"]), "gfx1100"), "gfx1100");
        assert_eq!(target_of(&o(&["-std=c++17"]), "sm_80"), "sm_80");
    }
}
