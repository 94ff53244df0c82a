//! Devices and execution: where each node runs (the plan), running the plan, memory, env config
//! and statistics. The host device (`TANDEM_HOST`) runs every node through tandem's own CPU
//! code; GPU devices are another placement of the same plan.

pub mod buffer;
pub mod config;
pub mod device;
pub mod executor;
pub mod gpu;
pub mod plan;
pub mod stats;

pub use buffer::HostBuffer;
pub use config::{Config, F16Prefill, OffloadExec, Setting, Source};
pub use device::{devices, Device, DeviceKind, HostDevice};
pub use executor::ExecError;
pub use plan::{GraphTag, Placement, Plan};
pub use stats::{DeviceGraph, GraphStats};
