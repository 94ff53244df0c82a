//! Compiled-kernel cache: one compile per key per process, and a disk cache shared by processes.
//!
//! The key is a SHA-256 over every input that changes the code object (source, headers, options,
//! arch, compiler id, this file's format version). Files are written to a temp name and renamed,
//! so readers see whole files or none; each file carries its payload's length and hash, so a
//! torn or foreign file is detected and recompiled rather than loaded.

use super::api::CompileError;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Bump when the file layout or key derivation changes.
pub const CACHE_FORMAT_VERSION: u32 = 1;
const MAGIC: &[u8; 8] = b"TNDMKRN\0";
const HEADER_BYTES: usize = 8 + 4 + 8 + 32;

/// Everything that decides a code object.
#[derive(Clone, Debug)]
pub struct CompileRequest<'a> {
    /// Program name (the kernel family), for messages.
    pub name: &'a str,
    pub source: &'a str,
    /// In-memory headers: (include name, contents).
    pub headers: &'a [(&'a str, &'a str)],
    pub options: &'a [String],
    pub arch: &'a str,
    /// Compiler and version, e.g. `nvrtc 13.0`.
    pub compiler: &'a str,
}

/// The stable hash of a request, hex-encoded (the cache file's name).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey(pub String);

impl CompileRequest<'_> {
    pub fn key(&self) -> CacheKey {
        let mut h = Sha256::new();
        // Length-prefixed fields, so no two different requests hash the same byte stream.
        let mut field = |tag: &str, bytes: &[u8]| {
            h.update(tag.as_bytes());
            h.update((bytes.len() as u64).to_le_bytes());
            h.update(bytes);
        };
        field("format", &CACHE_FORMAT_VERSION.to_le_bytes());
        field("source", self.source.as_bytes());
        for (name, body) in self.headers {
            field("header-name", name.as_bytes());
            field("header", body.as_bytes());
        }
        for o in self.options {
            field("option", o.as_bytes());
        }
        field("arch", self.arch.as_bytes());
        field("compiler", self.compiler.as_bytes());
        CacheKey(hex(&h.finalize()))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Why no code object came out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JitError {
    Compile(CompileError),
}

impl fmt::Display for JitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JitError::Compile(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for JitError {}

/// Where a code object came from, for statistics and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    Compiled,
    Disk,
    Memory,
}

type Slot = Arc<OnceLock<Result<Arc<Vec<u8>>, JitError>>>;

/// The cache. `dir = None` keeps it in memory only.
pub struct KernelCache {
    dir: Option<PathBuf>,
    slots: Mutex<HashMap<CacheKey, Slot>>,
    /// Set after the first failed write: the folder is unusable, so later compiles stay in
    /// memory without retrying (and without a warning per kernel family).
    write_failed: AtomicBool,
    /// Every distinct warning printed so far, each printed once.
    warnings: Mutex<Vec<String>>,
}

/// `TANDEM_KERNEL_CACHE`, else `$XDG_CACHE_HOME/tandem/kernels`, else `~/.cache/tandem/kernels`.
/// `TANDEM_KERNEL_CACHE=off` (or empty) disables the disk cache.
pub fn default_cache_dir() -> Option<PathBuf> {
    cache_dir_from(|k| std::env::var(k).ok())
}

/// [`default_cache_dir`] with the environment given as a lookup.
pub fn cache_dir_from(get: impl Fn(&str) -> Option<String>) -> Option<PathBuf> {
    match get("TANDEM_KERNEL_CACHE") {
        Some(v) if v.is_empty() || v == "off" || v == "0" => return None,
        Some(v) => return Some(PathBuf::from(v)),
        None => {}
    }
    if let Some(x) = get("XDG_CACHE_HOME").filter(|x| !x.is_empty()) {
        return Some(PathBuf::from(x).join("tandem/kernels"));
    }
    get("HOME")
        .filter(|h| !h.is_empty())
        .map(|h| PathBuf::from(h).join(".cache/tandem/kernels"))
}

impl KernelCache {
    pub fn new(dir: Option<PathBuf>) -> KernelCache {
        KernelCache {
            dir,
            slots: Mutex::new(HashMap::new()),
            write_failed: AtomicBool::new(false),
            warnings: Mutex::new(Vec::new()),
        }
    }

    /// The process-wide cache at [`default_cache_dir`].
    pub fn global() -> Arc<KernelCache> {
        static C: OnceLock<Arc<KernelCache>> = OnceLock::new();
        C.get_or_init(|| Arc::new(KernelCache::new(default_cache_dir())))
            .clone()
    }

    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The warnings this cache has printed (damaged files, an unwritable folder), in order.
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Prints `msg` on stderr the first time this cache meets it.
    fn warn(&self, msg: String) {
        let mut seen = self.warnings.lock().unwrap_or_else(|p| p.into_inner());
        if !seen.contains(&msg) {
            eprintln!("tandem: {msg}");
            seen.push(msg);
        }
    }

    /// The code object for `req`: from memory, else from disk, else from `compile` (at most once
    /// per key in this process; other threads asking for the same key wait for that result).
    pub fn get_or_compile(
        &self,
        req: &CompileRequest<'_>,
        compile: impl FnOnce() -> Result<Vec<u8>, CompileError>,
    ) -> Result<(Arc<Vec<u8>>, Origin), JitError> {
        let key = req.key();
        let slot: Slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            slots.entry(key.clone()).or_default().clone()
        };
        let mut origin = Origin::Memory;
        let result = slot.get_or_init(|| {
            if let Some(code) = self.read(&key) {
                origin = Origin::Disk;
                return Ok(Arc::new(code));
            }
            origin = Origin::Compiled;
            // The big families take tens of seconds on first use; say so rather than stall silently.
            let later = match self.path(&key) {
                Some(p) => format!("later runs load it from {}", p.display()),
                None => "the disk cache is off".to_string(),
            };
            eprintln!(
                "tandem: compiling GPU kernels `{}` for {} ({later})",
                req.name, req.arch
            );
            let started = std::time::Instant::now();
            let code = compile().map_err(JitError::Compile)?;
            eprintln!(
                "tandem: compiled `{}` for {} in {:.1} s",
                req.name,
                req.arch,
                started.elapsed().as_secs_f64()
            );
            if !self.write_failed.load(Ordering::Relaxed) {
                if let Err(e) = self.publish(&key, &code) {
                    // A read-only or full cache folder costs a recompile next run, nothing more.
                    self.write_failed.store(true, Ordering::Relaxed);
                    let dir = self.dir.as_deref().unwrap_or(Path::new("")).display();
                    self.warn(format!(
                        "kernel cache: cannot write {}: {e}; kernels compiled by this process stay in memory only (folder {dir})",
                        self.describe(&key)
                    ));
                }
            }
            Ok(Arc::new(code))
        });
        result.clone().map(|c| (c, origin))
    }

    fn path(&self, key: &CacheKey) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(format!("{}.bin", key.0)))
    }

    fn describe(&self, key: &CacheKey) -> String {
        self.path(key).map(|p| p.display().to_string()).unwrap_or_default()
    }

    /// A whole, intact cached file's payload; `None` for absent, short, torn or foreign files.
    /// A file that exists but does not decode is reported (once) and left for the recompile
    /// to replace.
    fn read(&self, key: &CacheKey) -> Option<Vec<u8>> {
        let path = self.path(key)?;
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            // Absent, or a folder that is not one (reported when writing fails).
            Err(_) if !path.is_file() => return None,
            Err(e) => {
                self.warn(format!(
                    "kernel cache: cannot read {}: {e}; recompiling",
                    path.display()
                ));
                return None;
            }
        };
        match decode(&bytes) {
            Ok(code) => Some(code),
            Err(why) => {
                self.warn(format!(
                    "kernel cache: {} is damaged ({why}); recompiling and replacing it",
                    path.display()
                ));
                None
            }
        }
    }

    /// Writes to a unique temp file in the same folder, then renames over the final name
    /// (atomic on POSIX): concurrent writers of one key each publish a whole, identical file.
    fn publish(&self, key: &CacheKey, code: &[u8]) -> std::io::Result<()> {
        let Some(path) = self.path(key) else { return Ok(()) };
        let dir = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let tmp = dir.join(format!(
            ".{}.{}.{}.tmp",
            key.0,
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&encode(code))?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        };
        let r = write();
        if r.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        r
    }
}

/// File layout: magic, format version (u32 LE), payload length (u64 LE), SHA-256 of the
/// payload, payload.
fn encode(code: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + code.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&CACHE_FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&(code.len() as u64).to_le_bytes());
    out.extend_from_slice(&Sha256::digest(code));
    out.extend_from_slice(code);
    out
}

/// The payload of a whole file, or why the bytes are not one.
fn decode(bytes: &[u8]) -> Result<Vec<u8>, &'static str> {
    if bytes.len() < HEADER_BYTES {
        return Err("shorter than the header");
    }
    if &bytes[..8] != MAGIC {
        return Err("not a tandem kernel file");
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if version != CACHE_FORMAT_VERSION {
        return Err("another cache format version");
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&bytes[12..20]);
    let payload = &bytes[HEADER_BYTES..];
    if payload.len() as u64 != u64::from_le_bytes(len) {
        return Err("truncated: payload length differs from the header");
    }
    if Sha256::digest(payload)[..] != bytes[20..52] {
        return Err("payload does not match its hash");
    }
    Ok(payload.to_vec())
}

#[cfg(test)]
#[path = "jit_tests.rs"]
mod tests;
