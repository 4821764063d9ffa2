//! What the broker's reconciles share, and the keys of its work queue: a member ([`Key`]),
//! a managed pool ([`PoolKey`]), the watched state ([`Stores`]) and the [`Context`] every
//! reconcile is given (the clients, the API server's clock, this replica's identity, the
//! stores). Below every loop that uses them: it imports none of them.

use jiff::SignedDuration;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::Client;
use kube::runtime::reflector::Store;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use vdi_core::clock::ServerClock;
use vdi_core::policy::usage::UsageBucket;

use crate::serve::Telemetry;
use vdi_core::lease::ClaimLease;
use vdi_core::policy::DesktopPool;
use vdi_core::resources::{VirtualMachine, VirtualMachineInstance};

use crate::enforcement::Enforcement;
use crate::idle::Polls;

/// A member: its namespace and name (the work queue's key).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// The member's namespace.
    pub namespace: String,
    /// The member (VM) name.
    pub member: String,
}

/// The cluster as the broker's watches hold it (objects trimmed to what the rules read).
#[derive(Clone)]
pub struct Stores {
    /// Pool members (VMs labelled `corral.dev/vdi-pool`).
    pub vms: Store<VirtualMachine>,
    /// Claim Leases (`corral-vdi-<member>`).
    pub leases: Store<ClaimLease>,
    /// The broker's grant Roles.
    pub roles: Store<Role>,
    /// The broker's grant RoleBindings.
    pub bindings: Store<RoleBinding>,
    /// Managed pools' policies (`DesktopPool`, named like their pool, in its namespace).
    pub pools: Store<DesktopPool>,
    /// The members' VMIs (metadata only): which VMI runs a member now, by its uid.
    pub vmis: Store<VirtualMachineInstance>,
}

/// What every reconcile shares.
pub struct Context {
    /// The broker's client.
    pub client: Client,
    /// A client without automatic retries, for the `vnc` stream that cuts a console.
    pub streams: Client,
    /// The API server's clock.
    pub clock: ServerClock,
    /// The reclaim margin.
    pub margin: SignedDuration,
    /// This replica's identity (the Events' reportingInstance).
    pub identity: String,
    /// The watched state.
    pub stores: Stores,
    /// When each member's guest was last asked who is logged in ([`crate::idle`]).
    pub idle: Polls<Key>,
    /// Whether the cluster enforces the claim rules ([`crate::enforcement`]): no grant while
    /// it does not.
    pub enforcement: Enforcement,
    /// The replica's metrics and health.
    pub telemetry: Telemetry,
    /// Claims reclaimed in each managed pool, by why, since its usage history last took them
    /// ([`Context::count_reclaim`], [`Context::take_reclaims`]).
    pub reclaimed: Mutex<HashMap<PoolKey, BTreeMap<String, i32>>>,
    /// Each managed pool's usage history as this leader last wrote it: what the next status
    /// folds into, so that a store lagging behind its own writes loses no bucket.
    pub usage: Mutex<HashMap<PoolKey, Vec<UsageBucket>>>,
}

impl Context {
    /// Counts a claim of managed pool `pool` in `namespace` reclaimed for `why`, for the pool's
    /// usage history (an unmanaged pool keeps none).
    pub fn count_reclaim(&self, namespace: &str, pool: &str, why: &str) {
        let managed = self
            .stores
            .pools
            .get(&kube::runtime::reflector::ObjectRef::new(pool).within(namespace))
            .is_some();
        if !managed {
            return;
        }
        let key = PoolKey {
            namespace: namespace.to_owned(),
            pool: pool.to_owned(),
        };
        let mut reclaimed = self.reclaimed.lock().unwrap_or_else(|p| p.into_inner());
        let count = reclaimed
            .entry(key)
            .or_default()
            .entry(why.to_owned())
            .or_default();
        *count = count.saturating_add(1);
    }

    /// The reclaims of `pool` counted since the last take, by why (emptied).
    pub fn take_reclaims(&self, pool: &PoolKey) -> BTreeMap<String, i32> {
        let mut reclaimed = self.reclaimed.lock().unwrap_or_else(|p| p.into_inner());
        reclaimed.remove(pool).unwrap_or_default()
    }

    /// Gives back reclaims taken for a status that could not be written.
    pub fn give_back_reclaims(&self, pool: &PoolKey, taken: BTreeMap<String, i32>) {
        let mut reclaimed = self.reclaimed.lock().unwrap_or_else(|p| p.into_inner());
        let counts = reclaimed.entry(pool.clone()).or_default();
        for (why, n) in taken {
            let count = counts.entry(why).or_default();
            *count = count.saturating_add(n);
        }
    }

    /// The usage history this leader last wrote for `pool`, if it wrote one.
    pub fn written_usage(&self, pool: &PoolKey) -> Option<Vec<UsageBucket>> {
        let usage = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        usage.get(pool).cloned()
    }

    /// Remembers the usage history written for `pool`.
    pub fn wrote_usage(&self, pool: &PoolKey, written: &[UsageBucket]) {
        let mut usage = self.usage.lock().unwrap_or_else(|p| p.into_inner());
        usage.insert(pool.clone(), written.to_vec());
    }
}

/// A managed pool: its namespace and name (the DesktopPool's).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PoolKey {
    /// The pool's namespace.
    pub namespace: String,
    /// The pool (and DesktopPool) name.
    pub pool: String,
}
