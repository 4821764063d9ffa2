//! Managed pools (a `DesktopPool`, issue 26) as tests see them: the DesktopPool API, each
//! member's VM, power, claim and annotations, and waiting until the broker has brought a pool
//! where a test expects it.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use vdi_core::names::{ASSIGNED_TO_LABEL, MEMBER_LABEL, POOL_LABEL};
use vdi_core::policy::{DesktopPool, DesktopPoolSpec};

use crate::{client_as, vms};

/// The DesktopPools of `ns`, as `client`.
pub fn desktop_pools(client: &Client, ns: &str) -> Api<DesktopPool> {
    Api::namespaced(client.clone(), ns)
}

/// One member of a pool as a test sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolMember {
    /// The VM's uid: a member deleted and cloned again has another.
    pub uid: String,
    /// `status.printableStatus`.
    pub power: String,
    /// The claim Lease's holder, if it has one.
    pub holder: Option<String>,
    /// The assigned-to label.
    pub label: Option<String>,
    /// The VM's annotations.
    pub annotations: BTreeMap<String, String>,
    /// Whether the VM is being deleted.
    pub deleting: bool,
}

impl PoolMember {
    /// Whether nothing is under way on it: not being deleted, powered Stopped or Running.
    pub fn settled(&self) -> bool {
        !self.deleting && matches!(self.power.as_str(), "Stopped" | "Running")
    }

    /// Whether no one holds it (no Lease holder, no label).
    pub fn free(&self) -> bool {
        self.holder.is_none() && self.label.is_none()
    }
}

/// The members of `pool` in `ns` by name, with their Leases' holders (read as admin).
pub async fn pool_members(ns: &str, pool: &str) -> BTreeMap<String, PoolMember> {
    let admin = client_as("admin").await;
    let selector = ListParams::default().labels(&format!("{POOL_LABEL}={pool}"));
    let holders: BTreeMap<String, String> = Api::<Lease>::namespaced(admin.clone(), ns)
        .list(&selector)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|l| {
            let member = l.labels().get(MEMBER_LABEL)?.clone();
            let holder = l.spec?.holder_identity.filter(|h| !h.is_empty())?;
            Some((member, holder))
        })
        .collect();
    vms(&admin, ns)
        .list(&selector)
        .await
        .unwrap()
        .into_iter()
        .map(|vm| {
            let name = vm.name_any();
            let member = PoolMember {
                uid: vm.uid().unwrap_or_default(),
                power: vm.data["status"]["printableStatus"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                holder: holders.get(&name).cloned(),
                label: vm.labels().get(ASSIGNED_TO_LABEL).cloned(),
                annotations: vm.annotations().clone(),
                deleting: vm.metadata.deletion_timestamp.is_some(),
            };
            (name, member)
        })
        .collect()
}

/// Waits (`within` at most, polling every 100 ms) until the members of `pool` in `ns` satisfy
/// `check`; returns them. Panics naming `what` and the members last seen.
pub async fn wait_pool_members(
    ns: &str,
    pool: &str,
    what: &str,
    within: Duration,
    check: impl Fn(&BTreeMap<String, PoolMember>) -> bool,
) -> BTreeMap<String, PoolMember> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let now = pool_members(ns, pool).await;
        if check(&now) {
            return now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "pool {pool} in {ns}: no {what} within {within:?}; last seen: {now:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Makes `pool` in `ns` managed with `spec` (a DesktopPool written as admin; its golden VM
/// must exist), open to everyone who may claim there as `pool create` makes it, and waits (`within` at most) until the broker has made its `spec.size` members,
/// each settled ([`PoolMember::settled`]) and, when `spec.warm` is set, that many running.
pub async fn managed_pool_in(ns: &str, pool: &str, spec: DesktopPoolSpec, within: Duration) {
    let size = spec.size as usize;
    let warm = spec.warm.unwrap_or(0) as usize;
    desktop_pools(&client_as("admin").await, ns)
        .create(&PostParams::default(), &DesktopPool::new(pool, spec))
        .await
        .unwrap_or_else(|e| panic!("create DesktopPool {pool} in {ns}: {e}"));
    crate::open_to_everyone(ns, pool).await;
    let what = format!("{size} members, {warm} running");
    wait_pool_members(ns, pool, &what, within, |m| {
        m.len() == size
            && m.values().all(PoolMember::settled)
            && m.values().filter(|m| m.power == "Running").count() == warm
    })
    .await;
}

/// Changes the spec of DesktopPool `pool` in `ns` by a merge patch of `fields`, as admin.
pub async fn set_pool_spec(ns: &str, pool: &str, fields: serde_json::Value) {
    desktop_pools(&client_as("admin").await, ns)
        .patch(
            pool,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "spec": fields })),
        )
        .await
        .unwrap_or_else(|e| panic!("patch DesktopPool {pool} in {ns}: {e}"));
}

/// `user` releases their claim on `member` in `ns` (vdi-core's unassign, as the app does).
pub async fn release_as(user: &str, ns: &str, member: &str) {
    vdi_core::claim::unassign(
        &crate::actor_as(user).await,
        ns,
        member,
        &vdi_core::claim::UnassignOptions::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("{user} releases {member}: {e}"));
}
