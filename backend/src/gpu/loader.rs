//! Finding and opening the vendor libraries at run time, and tables of their symbols. Nothing here
//! fails hard: a missing library or symbol becomes a report line and zero GPU devices.

use libloading::Library;
use std::path::{Path, PathBuf};

/// The outcome of looking for one library: every candidate tried and the one that opened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LibReport {
    /// What it is, e.g. `CUDA driver`.
    pub what: &'static str,
    pub tried: Vec<String>,
    pub found: Option<String>,
    /// Why the found library is still unusable (missing symbols), or the last open error.
    pub error: Option<String>,
}

impl LibReport {
    pub fn usable(&self) -> bool {
        self.found.is_some() && self.error.is_none()
    }

    /// One line: what was found, or what was looked for.
    pub fn summary(&self) -> String {
        match (&self.found, &self.error) {
            (Some(f), None) => format!("{}: {f}", self.what),
            (Some(f), Some(e)) => format!("{}: {f} unusable ({e})", self.what),
            (None, _) => format!("{}: not found (tried {})", self.what, self.tried.join(", ")),
        }
    }
}

/// Opens the first candidate that loads. Bare names go through the system search path; paths
/// are tried only if they exist (so the report does not fill with dlopen noise).
pub fn open_first(what: &'static str, candidates: &[String]) -> (Option<Library>, LibReport) {
    let mut report = LibReport {
        what,
        ..Default::default()
    };
    for c in candidates {
        if report.tried.contains(c) {
            continue;
        }
        report.tried.push(c.clone());
        let is_path = c.contains('/');
        if is_path && !Path::new(c).exists() {
            continue;
        }
        // SAFETY: loading a vendor library runs its initialisers; these are the libraries the
        // vendor meant to be loaded this way (cudarc and ggml's backends do the same).
        match unsafe { Library::new(c) } {
            Ok(lib) => {
                report.found = Some(c.clone());
                report.error = None;
                return (Some(lib), report);
            }
            Err(e) if is_path => report.error = Some(e.to_string()),
            Err(_) => {}
        }
    }
    (None, report)
}

/// `names` in each folder of `dirs`, after the bare names.
pub fn candidates(names: &[&str], dirs: &[PathBuf]) -> Vec<String> {
    let mut out: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    for d in dirs {
        for n in names {
            out.push(d.join(n).to_string_lossy().into_owned());
        }
    }
    out
}

/// Python package folders (`site-packages`, `dist-packages`) of the usual prefixes, where the
/// PyPI wheels of NVRTC put their libraries.
pub fn python_package_dirs() -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(v) = std::env::var_os(var) {
            prefixes.push(PathBuf::from(v).join("lib"));
        }
    }
    // Each `bin` folder on PATH implies a prefix (venvs, conda, pyenv versions, /usr/local).
    if let Some(path) = std::env::var_os("PATH") {
        for bin in std::env::split_paths(&path) {
            if let Some(prefix) = bin.parent() {
                prefixes.push(prefix.join("lib"));
            }
        }
    }
    if let Some(home) = std::env::var_os("HOME") {
        prefixes.push(PathBuf::from(home).join(".local/lib"));
    }
    prefixes.push("/usr/local/lib".into());
    prefixes.push("/usr/lib".into());
    let mut out: Vec<PathBuf> = Vec::new();
    for p in prefixes {
        let Ok(rd) = std::fs::read_dir(&p) else { continue };
        let mut pythons: Vec<PathBuf> = rd
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
            .map(|e| e.path())
            .collect();
        pythons.sort();
        pythons.reverse(); // newest Python first
        for py in pythons {
            for sub in ["site-packages", "dist-packages"] {
                let d = py.join(sub);
                if d.is_dir() && !out.contains(&d) {
                    out.push(d);
                }
            }
        }
    }
    out
}

/// Looks up every symbol of a table; collects all missing names instead of stopping at the first.
pub struct SymbolLoader<'a> {
    lib: &'a Library,
    pub missing: Vec<&'static str>,
}

impl<'a> SymbolLoader<'a> {
    pub fn new(lib: &'a Library) -> Self {
        SymbolLoader {
            lib,
            missing: Vec::new(),
        }
    }

    /// The symbol `name` as a value of type `T`, or `None`.
    ///
    /// # Safety
    /// `T` is the exact function-pointer type of the symbol's C declaration, and the value is
    /// not used after the library is closed.
    pub unsafe fn optional<T: Copy>(&self, name: &'static str) -> Option<T> {
        let mut z = Vec::with_capacity(name.len() + 1);
        z.extend_from_slice(name.as_bytes());
        z.push(0);
        // SAFETY: the caller guarantees `T` matches the symbol's declaration.
        unsafe { self.lib.get::<T>(&z).ok().map(|s| *s) }
    }

    /// Like `optional`, but a missing symbol is recorded (and `None` returned).
    ///
    /// # Safety
    /// As for `optional`.
    pub unsafe fn required<T: Copy>(&mut self, name: &'static str) -> Option<T> {
        // SAFETY: forwarded contract.
        let v = unsafe { self.optional::<T>(name) };
        if v.is_none() {
            self.missing.push(name);
        }
        v
    }

    /// Ok if nothing required was missing, else the list of missing symbols.
    pub fn finish(self) -> Result<(), String> {
        if self.missing.is_empty() {
            Ok(())
        } else {
            Err(format!("missing symbols: {}", self.missing.join(", ")))
        }
    }
}

/// Declares a table of required C functions loaded from a library at run time:
/// `symbol_table! { pub struct CudaSys { cuInit: fn(u32) -> i32; ... } }` gives a struct with
/// one `unsafe extern "C" fn` field per symbol, the library kept open beside them, and
/// `load(lib) -> Result<Self, String>` naming every missing symbol.
macro_rules! symbol_table {
    ($(#[$m:meta])* pub struct $table:ident {
        $( $sym:ident : fn($($arg:ty),* $(,)?) -> $ret:ty; )*
    }) => {
        $(#[$m])*
        #[allow(non_snake_case)]
        pub struct $table {
            $( pub $sym: unsafe extern "C" fn($($arg),*) -> $ret, )*
            _lib: libloading::Library,
        }

        impl $table {
            #[allow(non_snake_case)]
            pub fn load(lib: libloading::Library) -> Result<Self, String> {
                let mut l = $crate::gpu::loader::SymbolLoader::new(&lib);
                // SAFETY: each field type is the C declaration of the symbol of the same name;
                // the pointers live in the same struct as the library, which is never closed
                // while the table exists.
                $( let $sym = unsafe { l.required::<unsafe extern "C" fn($($arg),*) -> $ret>(stringify!($sym)) }; )*
                l.finish()?;
                Ok($table {
                    $( $sym: $sym.expect("checked by finish"), )*
                    _lib: lib,
                })
            }
        }
    };
}
pub(crate) use symbol_table;

/// Reads a NUL-terminated C string the runtime owns (error strings), or "" for null.
///
/// # Safety
/// `p` is null or points at a NUL-terminated string valid for the call.
pub unsafe fn c_str(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: non-null and NUL-terminated per the contract.
    unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_is_a_report_not_an_error() {
        let c = candidates(&["libtandem_does_not_exist.so.9"], &[PathBuf::from("/nonexistent/dir")]);
        assert_eq!(c.len(), 2);
        let (lib, rep) = open_first("test library", &c);
        assert!(lib.is_none());
        assert!(!rep.usable());
        assert_eq!(rep.tried, c);
        assert!(rep.summary().contains("not found (tried libtandem_does_not_exist.so.9"));
    }

    #[test]
    fn found_library_with_missing_symbols_names_them() {
        // libc is always there; it has `strlen` but none of the vendor symbols.
        let (lib, rep) = open_first("libc", &["libc.so.6".to_string()]);
        let lib = lib.expect("libc.so.6 loads");
        assert!(rep.usable());
        let mut l = SymbolLoader::new(&lib);
        // SAFETY: `strlen` is `size_t strlen(const char*)`; the probe symbol is never called.
        unsafe {
            assert!(l
                .required::<unsafe extern "C" fn(*const std::ffi::c_char) -> usize>("strlen")
                .is_some());
            assert!(l
                .required::<unsafe extern "C" fn() -> i32>("cuTandemNoSuchSymbol")
                .is_none());
        }
        let err = l.finish().unwrap_err();
        assert!(err.contains("cuTandemNoSuchSymbol") && !err.contains("strlen"), "{err}");
    }
}
