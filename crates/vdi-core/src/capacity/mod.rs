//! GPU and host-device capacity (SPEC "GPU and host-device capacity admission"): whether the
//! cluster can run the VMs a pool create or a claim would start, and where every device is.
//!
//! Pure arithmetic apart from reading the cluster ([`read_devices`], the only IO), as
//! kube-core is apart from kube-client: [`objects`] turns what was read into a snapshot
//! ([`ClusterDevices`]), [`rules`] judges where a VM may be scheduled, [`plan()`] and
//! [`cluster_view`] count, and the text functions
//! ([`plan_table`], [`pool_refusal`], [`start_refusal`]) say it. Everything but the reads is
//! unit-tested without a cluster.
//!
//! **What a VM needs.** The `deviceName` of each entry of its
//! `spec.template.spec.domain.devices.gpus[]` and `.hostDevices[]` is an extended-resource
//! name; each entry asks for one, so several entries naming one resource ask for several
//! (KubeVirt `pkg/virt-controller/services/template.go`, `requestResource`).
//!
//! **How KubeVirt hands it out** ([`DeviceClass`]), from the KubeVirt CR's
//! `spec.configuration.permittedHostDevices`: `pciHostDevices` (exclusive PCI passthrough, one
//! VM per device), `mediatedDevices` (a vGPU profile: several VMs per card, up to the
//! profile's count, which the node reports as allocatable), `usb`, and any entry with
//! `externalResourceProvider: true` (a device plugin outside KubeVirt). A resource that is not
//! listed, while the list is set, is refused: KubeVirt would not even render the VM's launcher
//! pod ("GPU … is not permitted in permittedHostDevices configuration", virt-controller's
//! `validatePermittedHostDevices`).
//!
//! **Free on a node** = `status.allocatable[resource]` minus what is held there: the
//! `compute` limits of virt-launcher pods (`kubevirt.io=virt-launcher`) bound to the node and
//! not Succeeded or Failed (migration targets included), or, where a VMI's launcher pod is not
//! visible, the VMI's own device entries when it has `status.nodeName` and has not finished
//! (see [`objects`]). `status.capacity` (devices present, healthy or not) is shown, never
//! counted.
//!
//! **Where a VM may go** (see [`rules`]): not on a cordoned node, not where a `NoSchedule` or
//! `NoExecute` taint is not tolerated by the template, only where `kubevirt.io/schedulable` is
//! `"true"` and the template's `nodeSelector` and required node affinity match (plain label
//! matches; `Gt`, `Lt` and `matchFields` are noted, not judged). Each excluded node carries
//! its reason.
//!
//! **How many fit.** All of a VM's devices must be on one node. A node holds `min over
//! resources (free / per VM)` whole VMs; the cluster holds the sum. The members of a pool are
//! clones of one golden VM, so they are identical and the sum is exact for any number of
//! device types, not a greedy estimate that could undercount (a greedy placement of identical
//! items on independent nodes cannot do better or worse than each node's own count). Two
//! resource names backed by the same physical cards (a card offered both whole and as vGPU
//! profiles) are counted as independent, as the scheduler counts them.
//!
//! **A check, not a reservation.** Nothing is held for a pool that is admitted: devices free
//! now may be taken before its members start. Assign checks again for the member it starts,
//! before writing the Lease, and the scheduler has the last word.
//!
//! For the app: [`crate::pool::capacity_preview`] computes the New pool preview for (namespace,
//! golden VM, size), [`cluster_capacity`] the Capacity view; both return the ready-to-show
//! types of `view.rs` ([`CapacityPlan`], [`ClusterCapacity`]).

mod feed;
pub mod objects;
mod plan;
mod read;
pub mod rules;
mod text;
mod view;

pub use feed::{CapacityFeed, CapacitySnapshot, SETTLE};
pub use objects::{ClusterDevices, Hold, NodeDevices, Permits};
pub use plan::{Asked, Demand, cluster_view, plan, plan_without_devices};
pub use read::{READ_ACCESS_FIX, cluster_capacity, plan_vm, read_devices};
pub use text::{
    NOT_A_RESERVATION, cluster_table, needs_text, plan_table, pool_refusal, start_refusal,
};
pub use view::{
    CapacityPlan, ClusterCapacity, DeviceClass, DeviceHolder, DeviceNeed, NodeCapacity,
    NodeDeviceRow, NodePlan, NodeResource, PermittedDevice, PlanWords, ResourceTotal,
};
