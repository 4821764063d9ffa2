//! An emulation of the KubeVirt behaviour Corral VDI depends on, running against the sandbox's
//! real API server:
//!
//! | piece | emulates | module |
//! |---|---|---|
//! | VM controller | run strategy → VMI → `status.printableStatus` (Stopped, Starting, Running, Stopping, ErrorUnschedulable), `volumeSnapshotStatuses` | [`vm`] |
//! | scheduler | a VMI with `gpus[]`/`hostDevices[]` → a node with the free devices (`status.allocatable` minus what bound pods request; cordons, taints, nodeSelector, required node affinity, KubeVirt's permits) → a virt-launcher pod there, freed when the VMI stops; none fits → `ErrorUnschedulable` | [`scheduler`] |
//! | clone controller | VirtualMachineClone phases → target VM | [`clone`] |
//! | virt-api | `subresources.kubevirt.io/v1` start/stop/restart and VMI `softreboot` behind the aggregator, with RBAC | [`api`], [`rest`] (what its handlers and the streams' share) |
//! | virt-api streams | VMI `vnc`, `vnc/screenshot`, `portforward/{port}[/tcp\|udp]`, `usbredir`: virt-api's refusals (Status bodies before the upgrade), websockets with `plain.kubevirt.io`, VNC session take-over, four usbredir slots | [`streams`] |
//! | guest agent | VMI `userlist` (virt-api's refusals, the users from a VM annotation) and the VMI condition `AgentConnected` | [`agent`], [`vm`] |
//! | guests | real servers behind the streams: an `Xvnc` per running VMI (lazily), an RDP server shadowing it, the sandbox's `sshd` on guest port 22, an emulated usbredir server | [`guests`], [`crate::ssh`] |
//!
//! There is no guest OS, disk, console, live migration or GPU: the "guest" of a running VMI is
//! its X display, the sandbox's sshd and an echo service on other open ports. Devices exist
//! only as numbers: nodes' `status.allocatable` (set by tests, see [`crate::devices`]) and the
//! launcher pods that hold them.
//! Timings, injected failures and per-VM behaviour (paused, open guest ports, forced answers)
//! are set through [`knobs`].

pub mod agent;
pub mod api;
pub mod clone;
pub mod guests;
pub mod knobs;
pub mod rest;
pub mod sam;
pub mod scheduler;
pub mod streams;
pub mod types;
pub mod vm;
pub mod xrdp;

use std::path::PathBuf;
use std::sync::Arc;

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
    /// The guests' servers (stop them with [`guests::Guests::shutdown`]).
    pub guests: Arc<guests::Guests>,
}

/// Who KubeVirt's virt-api is on a cluster: its service account in the namespace `kubevirt`
/// (KubeVirt `pkg/virt-operator/resource/generate/rbac`: `kubevirt-apiserver`). The emulated
/// virt-api acts as it, so the Corral VDI guard trusts it with a pool member's run strategy as
/// it trusts KubeVirt's (and, like KubeVirt's, never with the claim labels).
pub const VIRT_API_USER: &str = "system:serviceaccount:kubevirt:kubevirt-apiserver";
/// Who KubeVirt's virt-controller is (`kubevirt-controller`); the emulated controllers act as it.
pub const VIRT_CONTROLLER_USER: &str = "system:serviceaccount:kubevirt:kubevirt-controller";
/// The groups the emulator's identities act in: a service account's of namespace `kubevirt`,
/// and `system:masters` for RBAC (the sandbox does not model KubeVirt's own cluster roles);
/// never `corral-vdi:admins`.
pub const KUBEVIRT_GROUPS: &[&str] = &[
    "system:serviceaccounts",
    "system:serviceaccounts:kubevirt",
    "system:masters",
];

/// Starts the controllers (acting through `controller`, a client that is
/// [`VIRT_CONTROLLER_USER`]) and the virt-api server (through `virt_api`, [`VIRT_API_USER`]).
/// Guest working files (Xvnc and RDP logs, RDP certificates) go under `guest_dir`; guest port
/// 22 reaches the sshd on `ssh_port` (closed when `None`).
pub async fn start(
    virt_api: Client,
    controller: Client,
    pki: &Pki,
    guest_dir: PathBuf,
    ssh_port: Option<u16>,
) -> Result<Emulator> {
    let guests = guests::Guests::new(virt_api.clone(), guest_dir, ssh_port);
    let (port, serve) = api::bind(virt_api, pki, guests.clone()).await?;
    let reaper = guests.clone().run_reaper();
    let task = tokio::spawn(async move {
        futures::join!(
            serve,
            vm::run(controller.clone()),
            clone::run(controller),
            reaper
        );
    });
    Ok(Emulator { port, task, guests })
}
