//! Pool create, SPEC step 3: the pool's names must be free. No VM carries the pool's label,
//! no VM has a member's name, no clone object targets a member (another create in progress, or
//! debris of an aborted one), and no member's claim Lease is left over.

use std::collections::BTreeSet;

use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams};

use super::clone_object::{in_phase, phase_of, target_of};
use super::{CLONE_KIND, CLONE_PREFIX, RUN_LABEL};
use crate::error::{Error, ErrorKind, Result};
use crate::names::{POOL_LABEL, lease_name};
use crate::resources::VirtualMachine;

/// The objects that make a pool's names taken.
pub(super) struct Namespaced {
    /// The pool's namespace.
    pub(super) namespace: String,
    /// The pool's name.
    pub(super) pool: String,
    /// Its member names, `<pool>-1` … `<pool>-<size>`.
    pub(super) members: Vec<String>,
    /// VirtualMachines in the namespace.
    pub(super) vms: Api<VirtualMachine>,
    /// VirtualMachineClones in the namespace, at the version discovery chose.
    pub(super) clones: Api<DynamicObject>,
    /// Leases in the namespace.
    pub(super) leases: Api<Lease>,
    /// The pool exists and `members` are added to it ([`super::add_members`]): its labelled
    /// VMs are no conflict.
    pub(super) existing: bool,
}

impl Namespaced {
    /// Refuses (naming the object) if the pool exists (unless [`Namespaced::existing`]), a
    /// member name is taken, a clone object
    /// other than those of run `own_run` targets a member, or a member's claim Lease exists.
    pub(super) async fn check_free(&self, own_run: Option<&str>) -> Result<()> {
        let ns = &self.namespace;
        let pool = &self.pool;
        let delete_hint = format!("corral-vdi pool delete {pool} -n {ns}");

        if !self.existing {
            self.check_no_pool(&delete_hint).await?;
        }
        self.check_names_free(own_run, &delete_hint).await
    }

    /// Refuses if a VM carries the pool's label.
    async fn check_no_pool(&self, delete_hint: &str) -> Result<()> {
        let ns = &self.namespace;
        let pool = &self.pool;
        let labelled = super::list_member_metadata(&self.vms, ns, pool).await?;
        if !labelled.is_empty() {
            let mut names: Vec<String> = labelled.iter().map(|m| m.name_any()).collect();
            names.sort();
            return Err(Error::rejected(
                ErrorKind::Conflict,
                format!(
                    "pool \"{pool}\" already exists in namespace \"{ns}\" ({} member{}: {})",
                    names.len(),
                    if names.len() == 1 { "" } else { "s" },
                    names.join(", ")
                ),
                format!("pick another pool name, or delete this pool first ({delete_hint})"),
            ));
        }

        Ok(())
    }

    /// Refuses if a member name is taken by a VM, a clone object or a claim Lease.
    async fn check_names_free(&self, own_run: Option<&str>, delete_hint: &str) -> Result<()> {
        let ns = &self.namespace;
        let pool = &self.pool;
        let members: BTreeSet<&str> = self.members.iter().map(String::as_str).collect();
        let all = self
            .vms
            .list_metadata(&ListParams::default())
            .await
            .map_err(|e| Error::kube(format!("list VirtualMachines in namespace \"{ns}\""), e))?;
        let mut taken: Vec<String> = all
            .items
            .iter()
            .map(|m| m.name_any())
            .filter(|n| members.contains(n.as_str()))
            .collect();
        if !taken.is_empty() {
            taken.sort();
            return Err(Error::rejected(
                ErrorKind::Conflict,
                format!(
                    "VirtualMachine \"{}\" already exists in namespace \"{ns}\" but is no member of \
                     pool \"{pool}\": the member names {pool}-1 … {} must be free",
                    taken.join("\", \""),
                    self.members.last().map(String::as_str).unwrap_or_default()
                ),
                "pick another pool name, or rename or delete those VMs",
            ));
        }

        let clones = self
            .clones
            .list(&ListParams::default())
            .await
            .map_err(|e| Error::kube(format!("list {CLONE_KIND}s in namespace \"{ns}\""), e))?;
        for clone in &clones.items {
            if own_run.is_some() && clone.labels().get(RUN_LABEL).map(String::as_str) == own_run {
                continue;
            }
            let name = clone.name_any();
            let target = target_of(clone);
            let member = target
                .as_deref()
                .filter(|t| members.contains(t))
                .or_else(|| {
                    name.strip_prefix(CLONE_PREFIX)
                        .filter(|m| members.contains(m))
                });
            let ours = clone.labels().get(POOL_LABEL) == Some(pool);
            if member.is_none() && !ours {
                continue;
            }
            let what = match member {
                Some(m) => format!("targets member \"{m}\""),
                None => format!("belongs to pool \"{pool}\""),
            };
            let phase = phase_of(clone);
            if matches!(phase.as_str(), "Succeeded" | "Failed") {
                // Finished, and its target is gone (a member-named VM was refused above).
                return Err(Error::rejected(
                    ErrorKind::Conflict,
                    format!(
                        "{CLONE_KIND} \"{name}\" in namespace \"{ns}\" {what} and is {}, but no \
                         such VM exists: it is debris of an earlier pool \"{pool}\" (the `corral \
                         vdi` Go CLI never deletes its clone objects, and an interrupted create \
                         can leave one)",
                        in_phase(&phase)
                    ),
                    format!(
                        "remove the debris with `{delete_hint}` (it deletes clone objects that \
                         target the pool's member names), then create the pool again"
                    ),
                ));
            }
            return Err(Error::rejected(
                ErrorKind::Conflict,
                format!(
                    "{CLONE_KIND} \"{name}\" already exists in namespace \"{ns}\" and {what} \
                     ({}): another create of this pool is in progress, or an aborted one left it \
                     behind",
                    in_phase(&phase)
                ),
                format!(
                    "wait for the other create to finish (kubectl get virtualmachineclone -n {ns}); \
                     if none is running, remove the leftovers with `{delete_hint}` and try again"
                ),
            ));
        }

        let leases = self
            .leases
            .list_metadata(&ListParams::default())
            .await
            .map_err(|e| Error::kube(format!("list Leases in namespace \"{ns}\""), e))?;
        let wanted: BTreeSet<String> = self.members.iter().map(|m| lease_name(m)).collect();
        if let Some(lease) = leases
            .items
            .iter()
            .map(|l| l.name_any())
            .find(|n| wanted.contains(n))
        {
            return Err(Error::rejected(
                ErrorKind::Conflict,
                format!(
                    "claim Lease \"{lease}\" already exists in namespace \"{ns}\": it is left over \
                     from an earlier pool \"{pool}\", and would make a new member look claimed"
                ),
                format!(
                    "remove the leftovers with `{delete_hint}` (or kubectl delete lease -n {ns} \
                     {lease}) and try again"
                ),
            ));
        }
        Ok(())
    }
}
