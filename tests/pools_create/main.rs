//! Pool create and delete against a real API server (the sandbox) with emulated KubeVirt clones:
//! each SPEC rule and refusal, with the message checked and the cluster checked unchanged; the
//! stall timeout, an outright clone failure, a label patch that RBAC refuses, two creators
//! racing, leftovers of an aborted run, delete's refusals, force and idempotency, and pool
//! policy on a cluster without the DesktopPool CRD.
//!
//! What comes from the emulator (not KubeVirt): clone phases and their timing, the
//! `stallClones` / `failClones` knobs, and the `sandbox.corral.dev/snapshot-disabled` annotation
//! that makes a volume report snapshots disabled as KubeVirt does for a StorageClass without a
//! VolumeSnapshotClass.
//!
//! One test binary (one sandbox), a module per part; the world they create pools in and their
//! shared checks are here.

mod clones;
mod delete;
mod policy;
mod races;
mod refusals;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use corral_tests::client_as;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use vdi_core::Error;
use vdi_core::error::PoolCreateFailure;
use vdi_core::names::{ASSIGNED_TO_LABEL, CLAIMED_AT_ANNOTATION, POOL_LABEL};
use vdi_core::pool::{CreateOptions, CreatePool, CreateProgress};
use vdi_core::resources::VirtualMachine;

/// What a namespace holds that pool create could touch: VMs (name → labels), clone objects and
/// Leases, by name.
#[derive(Debug, PartialEq)]
struct World {
    vms: BTreeMap<String, BTreeMap<String, String>>,
    clones: BTreeSet<String>,
    leases: BTreeSet<String>,
}

async fn world(ns: &str) -> World {
    let admin = client_as("admin").await;
    let all = ListParams::default();
    let vms = Api::<VirtualMachine>::namespaced(admin.clone(), ns)
        .list(&all)
        .await
        .unwrap();
    let clones = corral_tests::clones(&admin, ns).list(&all).await.unwrap();
    let leases = Api::<Lease>::namespaced(admin.clone(), ns)
        .list(&all)
        .await
        .unwrap();
    World {
        vms: vms
            .items
            .iter()
            .map(|vm| (vm.name_any(), vm.labels().clone()))
            .collect(),
        clones: clones.items.iter().map(|c| c.name_any()).collect(),
        leases: leases.items.iter().map(|l| l.name_any()).collect(),
    }
}

fn request(ns: &str, pool: &str, golden: &str, size: u32) -> CreatePool {
    CreatePool {
        namespace: ns.into(),
        name: pool.into(),
        golden: golden.into(),
        size,
        options: CreateOptions::default(),
    }
}

/// Every progress event, in order.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<(Instant, CreateProgress)>>>);

impl Recorder {
    fn sink(&self) -> impl Fn(CreateProgress) + Send + Sync + use<> {
        let events = self.0.clone();
        move |e| events.lock().unwrap().push((Instant::now(), e))
    }

    fn events(&self) -> Vec<(Instant, CreateProgress)> {
        self.0.lock().unwrap().clone()
    }

    fn member(&self, member: &str) -> Vec<(Instant, vdi_core::pool::MemberProgress)> {
        self.events()
            .into_iter()
            .filter_map(|(t, e)| match e {
                CreateProgress::Member(p) if p.member == member => Some((t, p)),
                _ => None,
            })
            .collect()
    }
}

fn incomplete(err: Error) -> PoolCreateFailure {
    match err {
        Error::PoolIncomplete(failure) => *failure,
        other => panic!("expected a partial failure, got {other:?}: {other}"),
    }
}

async fn assert_member_ready(admin: &Client, ns: &str, pool: &str, member: &str) {
    let vm = Api::<VirtualMachine>::namespaced(admin.clone(), ns)
        .get(member)
        .await
        .unwrap_or_else(|e| panic!("member {member}: {e}"));
    assert_eq!(
        vm.labels().get(POOL_LABEL).map(String::as_str),
        Some(pool),
        "{member}"
    );
    assert!(
        !vm.labels().contains_key(ASSIGNED_TO_LABEL),
        "{member} is unassigned"
    );
    assert!(
        !vm.annotations().contains_key(CLAIMED_AT_ANNOTATION),
        "{member} has no claimed-at"
    );
    assert_eq!(
        vm.spec.run_strategy.as_deref(),
        Some("Halted"),
        "{member} is halted"
    );
}
