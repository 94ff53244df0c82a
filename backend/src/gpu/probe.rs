//! Loading the runtimes `TANDEM_RUNTIME` asks for and reporting what was looked for and found.

use super::api::{DeviceInfo, GpuError, GpuRuntime, KernelCompiler, RuntimeKind};
use super::cuda::CudaRuntime;
use super::hip::HipRuntime;
use super::loader::LibReport;
use super::rtc::RtcCompiler;
use super::GpuBackend;
use std::fmt;
use std::sync::Arc;

/// `TANDEM_RUNTIME`: which vendor runtimes to load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeChoice {
    /// Both; devices of every runtime that has some.
    Auto,
    Cuda,
    Hip,
    /// No GPU runtime at all.
    None,
}

impl RuntimeChoice {
    /// Parses the variable's value; `Err` carries the unknown value (treated as `auto`).
    pub fn parse(v: Option<&str>) -> Result<RuntimeChoice, String> {
        match v.map(|s| s.trim().to_ascii_lowercase()).as_deref() {
            None | Some("") | Some("auto") => Ok(RuntimeChoice::Auto),
            Some("cuda") | Some("nvidia") => Ok(RuntimeChoice::Cuda),
            Some("hip") | Some("amd") | Some("rocm") => Ok(RuntimeChoice::Hip),
            Some("none") | Some("off") | Some("cpu") => Ok(RuntimeChoice::None),
            Some(other) => Err(other.to_string()),
        }
    }

    pub fn from_env() -> (RuntimeChoice, Option<String>) {
        match RuntimeChoice::parse(std::env::var("TANDEM_RUNTIME").ok().as_deref()) {
            Ok(c) => (c, None),
            Err(bad) => (
                RuntimeChoice::Auto,
                Some(format!(
                    "TANDEM_RUNTIME={bad:?} is not auto, cuda, hip or none; using the default (auto)"
                )),
            ),
        }
    }

    fn wants(self, kind: RuntimeKind) -> bool {
        match self {
            RuntimeChoice::Auto => true,
            RuntimeChoice::Cuda => kind == RuntimeKind::Cuda,
            RuntimeChoice::Hip => kind == RuntimeKind::Hip,
            RuntimeChoice::None => false,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RuntimeChoice::Auto => "auto",
            RuntimeChoice::Cuda => "cuda",
            RuntimeChoice::Hip => "hip",
            RuntimeChoice::None => "none",
        }
    }
}

/// One vendor's findings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeReport {
    pub kind: RuntimeKind,
    pub driver: LibReport,
    pub compiler: LibReport,
    pub driver_version: Option<i32>,
    /// e.g. `nvrtc 13.0`.
    pub compiler_version: Option<String>,
    pub devices: Vec<DeviceInfo>,
    /// Why the runtime offers no devices although its library loaded (e.g. `cuInit` failed).
    pub error: Option<String>,
}

impl RuntimeReport {
    pub fn usable(&self) -> bool {
        self.driver.usable() && self.compiler.usable() && !self.devices.is_empty()
    }

    fn status(&self) -> String {
        if !self.driver.usable() {
            return self.driver.summary();
        }
        if let Some(e) = &self.error {
            return e.clone();
        }
        if self.devices.is_empty() {
            return format!("{}: no devices", self.kind.name());
        }
        if !self.compiler.usable() {
            return format!("{} (GPU unusable without it)", self.compiler.summary());
        }
        format!("{} device(s)", self.devices.len())
    }
}

/// Everything `tandem info` prints about GPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeReport {
    pub choice: RuntimeChoice,
    /// A note about the environment (an unknown `TANDEM_RUNTIME` value).
    pub note: Option<String>,
    pub runtimes: Vec<RuntimeReport>,
}

impl ProbeReport {
    pub fn device_count(&self) -> usize {
        self.runtimes
            .iter()
            .filter(|r| r.usable())
            .map(|r| r.devices.len())
            .sum()
    }

    /// One line for logs: the devices, or what was looked for.
    pub fn info_line(&self) -> String {
        if self.choice == RuntimeChoice::None {
            return "tandem: GPU runtimes off (TANDEM_RUNTIME=none)".into();
        }
        let n = self.device_count();
        let parts: Vec<String> = self
            .runtimes
            .iter()
            .map(|r| {
                if r.usable() {
                    let devs: Vec<String> = r.devices.iter().map(|d| format!("{} {}", d.name, d.arch)).collect();
                    format!("{}: {}", r.kind.name(), devs.join(", "))
                } else {
                    r.status()
                }
            })
            .collect();
        if n == 0 {
            format!("tandem: 0 GPU devices; {}", parts.join("; "))
        } else {
            format!("tandem: {n} GPU device(s); {}", parts.join("; "))
        }
    }
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

impl fmt::Display for ProbeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "GPU runtimes (TANDEM_RUNTIME={}):", self.choice.name())?;
        if let Some(n) = &self.note {
            writeln!(f, "  note: {n}")?;
        }
        if self.runtimes.is_empty() {
            writeln!(f, "  none loaded")?;
        }
        for r in &self.runtimes {
            writeln!(f, "  {}: {}", r.kind.name(), r.status())?;
            let ver = r.driver_version.map(|v| match r.kind {
                RuntimeKind::Cuda => format!(" (driver API {}.{})", v / 1000, (v % 1000) / 10),
                RuntimeKind::Hip => format!(" (driver version {v})"),
            });
            writeln!(f, "    {}{}", r.driver.summary(), ver.unwrap_or_default())?;
            if !r.driver.tried.is_empty() && r.driver.found.is_some() {
                writeln!(f, "      searched: {}", r.driver.tried.join(", "))?;
            }
            let cv = r.compiler_version.as_ref().map(|v| format!(" ({v})"));
            writeln!(f, "    {}{}", r.compiler.summary(), cv.unwrap_or_default())?;
            for d in &r.devices {
                let unit = if r.kind == RuntimeKind::Cuda { "SMs" } else { "CUs" };
                writeln!(
                    f,
                    "    device {}: {}, {}, {} {unit}, wave {}, {:.1} GiB{}{}",
                    d.ordinal,
                    d.name,
                    d.arch,
                    d.compute_units,
                    d.warp_size,
                    gib(d.total_memory),
                    if d.can_map_host_memory {
                        ", maps host memory"
                    } else {
                        ""
                    },
                    if d.integrated { ", integrated" } else { "" },
                )?;
            }
        }
        write!(f, "  {}", self.info_line())
    }
}

/// The report of this process (loaded once).
pub fn probe() -> ProbeReport {
    super::report().clone()
}

/// Loads the runtimes `choice` names; never fails.
pub(crate) fn load(choice: (RuntimeChoice, Option<String>)) -> (ProbeReport, Vec<GpuBackend>) {
    let (choice, note) = choice;
    let mut report = ProbeReport {
        choice,
        note,
        runtimes: Vec::new(),
    };
    let mut backends = Vec::new();
    for kind in [RuntimeKind::Cuda, RuntimeKind::Hip] {
        if !choice.wants(kind) {
            continue;
        }
        let (rt, driver): (Option<Arc<dyn GpuRuntime>>, LibReport) = match kind {
            RuntimeKind::Cuda => {
                let (r, rep) = CudaRuntime::load();
                (r.map(|r| Arc::new(r) as Arc<dyn GpuRuntime>), rep)
            }
            RuntimeKind::Hip => {
                let (r, rep) = HipRuntime::load();
                (r.map(|r| Arc::new(r) as Arc<dyn GpuRuntime>), rep)
            }
        };
        let (backend, rr) = inspect(kind, rt, driver);
        report.runtimes.push(rr);
        backends.extend(backend);
    }
    (report, backends)
}

/// Why a runtime whose library loaded offers no devices. Its init call failing is the normal
/// state of a machine with the vendor's libraries but none of its GPUs (the kernel check installs
/// libamdhip64 on machines without AMD GPUs), so that case says so in those words.
fn no_devices_reason(kind: RuntimeKind, e: &GpuError) -> String {
    let (runtime, gpu) = match kind {
        RuntimeKind::Cuda => ("CUDA driver", "NVIDIA"),
        RuntimeKind::Hip => ("HIP runtime", "AMD"),
    };
    if matches!(e.call, "hipInit" | "cuInit") {
        format!("{runtime} present but no {gpu} GPU ({}: {})", e.call, e.message)
    } else {
        format!("{}: {e}", kind.name())
    }
}

/// Asks a loaded runtime for its devices and loads its compiler.
fn inspect(
    kind: RuntimeKind,
    rt: Option<Arc<dyn GpuRuntime>>,
    driver: LibReport,
) -> (Option<GpuBackend>, RuntimeReport) {
    let mut rr = RuntimeReport {
        kind,
        driver,
        compiler: LibReport {
            what: if kind == RuntimeKind::Cuda { "NVRTC" } else { "hiprtc" },
            ..Default::default()
        },
        driver_version: None,
        compiler_version: None,
        devices: Vec::new(),
        error: None,
    };
    // The compiler is looked for even without a driver or devices: `tandem info` should say
    // where it is (and the compile check needs no driver at all).
    let (compiler, crep) = RtcCompiler::load(kind);
    rr.compiler = crep;
    rr.compiler_version = compiler.as_ref().map(|c| c.id());
    let Some(rt) = rt else { return (None, rr) };
    rr.driver_version = rt.driver_version().ok();
    match rt.device_count() {
        Ok(n) => {
            for i in 0..n {
                match rt.device_info(i) {
                    Ok(d) => rr.devices.push(d),
                    Err(e) => rr.error = Some(format!("{}: device {i}: {e}", kind.name())),
                }
            }
        }
        Err(e) => rr.error = Some(no_devices_reason(kind, &e)),
    }
    let backend = match compiler {
        Some(c) if !rr.devices.is_empty() => Some(GpuBackend {
            runtime: rt,
            compiler: Arc::new(c) as Arc<dyn KernelCompiler>,
            devices: rr.devices.clone(),
        }),
        _ => None,
    };
    (backend, rr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_choice_parses() {
        assert_eq!(RuntimeChoice::parse(None), Ok(RuntimeChoice::Auto));
        assert_eq!(RuntimeChoice::parse(Some("AUTO")), Ok(RuntimeChoice::Auto));
        assert_eq!(RuntimeChoice::parse(Some("cuda")), Ok(RuntimeChoice::Cuda));
        assert_eq!(RuntimeChoice::parse(Some(" hip ")), Ok(RuntimeChoice::Hip));
        assert_eq!(RuntimeChoice::parse(Some("none")), Ok(RuntimeChoice::None));
        assert_eq!(RuntimeChoice::parse(Some("vulkan")), Err("vulkan".into()));
    }

    #[test]
    fn a_runtime_without_its_gpus_says_so_calmly() {
        let init = GpuError {
            call: "hipInit",
            code: 100,
            message: "hipErrorNoDevice".into(),
        };
        assert_eq!(
            no_devices_reason(RuntimeKind::Hip, &init),
            "HIP runtime present but no AMD GPU (hipInit: hipErrorNoDevice)"
        );
        let init = GpuError { call: "cuInit", ..init };
        assert!(no_devices_reason(RuntimeKind::Cuda, &init).starts_with("CUDA driver present but no NVIDIA GPU"));
        let other = GpuError::other("cuDeviceGet", "bad ordinal");
        assert_eq!(
            no_devices_reason(RuntimeKind::Cuda, &other),
            "cuda: cuDeviceGet: bad ordinal"
        );
    }

    #[test]
    fn none_loads_nothing_and_says_so() {
        let (rep, backends) = load((RuntimeChoice::None, None));
        assert!(backends.is_empty() && rep.runtimes.is_empty());
        assert_eq!(rep.device_count(), 0);
        assert!(rep.info_line().contains("TANDEM_RUNTIME=none"));
        assert!(rep.to_string().contains("none loaded"));
    }

    #[test]
    fn loading_never_fails_and_reports_every_runtime() {
        // Whatever this machine has: no panic, one report per runtime, and a line that names
        // what was looked for when nothing is usable.
        let (rep, backends) = load((RuntimeChoice::Auto, None));
        assert_eq!(rep.runtimes.len(), 2);
        assert_eq!(
            backends.iter().map(|b| b.devices.len()).sum::<usize>(),
            rep.device_count()
        );
        let line = rep.info_line();
        if rep.device_count() == 0 {
            assert!(line.starts_with("tandem: 0 GPU devices"), "{line}");
            for r in &rep.runtimes {
                if r.driver.found.is_none() {
                    assert!(line.contains(&r.driver.tried[0]), "{line}");
                }
            }
        }
        let text = rep.to_string();
        assert!(text.contains("cuda:") && text.contains("hip:"), "{text}");
        eprintln!("{text}");
    }
}
