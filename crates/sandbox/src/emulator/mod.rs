//! An emulation of the KubeVirt behaviour Corral VDI depends on, running against the sandbox's
//! real API server:
//!
//! | piece | emulates | module |
//! |---|---|---|
//! | VM controller | run strategy → VMI → `status.printableStatus` (Stopped, Starting, Running, Stopping, ErrorUnschedulable), `volumeSnapshotStatuses` | [`vm`] |
//! | clone controller | VirtualMachineClone phases → target VM | [`clone`] |
//! | virt-api | `subresources.kubevirt.io/v1` start/stop/restart behind the aggregator, with RBAC | [`api`] |
//!
//! Not emulated: guests, disks, VNC/console/port-forward/usbredir streams, live migration, GPUs.
//! Timings and injected failures are set through [`knobs`].

pub mod api;
pub mod clone;
pub mod knobs;
pub mod types;
pub mod vm;

use anyhow::Result;
use kube::Client;
use tokio::task::JoinHandle;

use crate::pki::Pki;

/// The running emulator.
pub struct Emulator {
    /// Port of the emulated virt-api on 127.0.0.1.
    pub port: u16,
    /// The task running the controllers and the server; abort it to stop them.
    pub task: JoinHandle<()>,
}

/// Starts the controllers and the virt-api server with the admin client.
pub async fn start(admin: Client, pki: &Pki) -> Result<Emulator> {
    let (port, serve) = api::bind(admin.clone(), pki).await?;
    let task = tokio::spawn(async move {
        futures::join!(serve, vm::run(admin.clone()), clone::run(admin));
    });
    Ok(Emulator { port, task })
}
