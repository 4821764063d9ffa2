//! Changing a managed pool's policy from the client: [`set`] (warm, timeouts, onRelease) and
//! [`resize`] (size, and warm with it). Every refusal comes before the write, and the write
//! carries the resourceVersion that was read (optimistic concurrency): a DesktopPool changed
//! by someone else in between is refused, not overwritten. The broker does the rest (it clones
//! the missing members as pool create does, and removes free members highest index first).

use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::ops::{FIELD_MANAGER, managed, object_words};
use crate::clock::ServerClock;
use crate::error::{Error, ErrorKind, Result};
use crate::lease::ClaimLease;
use crate::names::{
    CHANGED_BY_ANNOTATION, CHANGED_GENERATION_ANNOTATION, OWNER_ANNOTATION, POOL_LABEL, member_name,
};
use crate::policy::plan::{
    DEFAULT_RECLAIM_MARGIN, PoolObjects, ResizePreview, index_of, resize_preview,
};
use crate::policy::{
    Assignment, DesktopPool, DesktopPoolSpec, MAX_SIZE, OnRelease, PolicyError, PolicyField,
};
use crate::resources::VirtualMachine;
use crate::validate;

/// What `pool set` (and `pool create`'s policy flags) change; `None` leaves a field as it is.
/// Durations are `vdi_core::policy::duration` texts (`"30m"`); `"none"` removes `maxSession` or
/// `idleTimeout` (no limit).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[cfg_attr(feature = "bindings", derive(specta::Type))]
#[serde(rename_all = "camelCase")]
pub struct PolicyChanges {
    /// Free members kept running.
    pub warm: Option<u32>,
    /// The claim Lease's duration.
    pub disconnect_grace: Option<String>,
    /// The longest claim, or `"none"`.
    pub max_session: Option<String>,
    /// The longest time without a logged-in user, or `"none"`.
    pub idle_timeout: Option<String>,
    /// What a release does.
    pub on_release: Option<OnRelease>,
    /// How members are handed out.
    pub assignment: Option<Assignment>,
}

/// The text that removes a limit.
pub const NO_LIMIT: &str = "none";

impl PolicyChanges {
    /// Whether it changes nothing.
    pub fn is_empty(&self) -> bool {
        *self == PolicyChanges::default()
    }

    /// `spec` with these changes.
    pub fn apply(&self, spec: &DesktopPoolSpec) -> DesktopPoolSpec {
        let limit = |change: &Option<String>, old: &Option<String>| match change.as_deref() {
            Some(NO_LIMIT) => None,
            Some(text) => Some(text.to_owned()),
            None => old.clone(),
        };
        DesktopPoolSpec {
            golden: spec.golden.clone(),
            size: spec.size,
            warm: self
                .warm
                .map(|w| i32::try_from(w).unwrap_or(i32::MAX))
                .or(spec.warm),
            disconnect_grace: self
                .disconnect_grace
                .clone()
                .or_else(|| spec.disconnect_grace.clone()),
            max_session: limit(&self.max_session, &spec.max_session),
            idle_timeout: limit(&self.idle_timeout, &spec.idle_timeout),
            on_release: self.on_release.or(spec.on_release),
            assignment: self.assignment.or(spec.assignment),
        }
    }

    /// A command's refusal of these changes for the spec error `error`: the rule's sentence and
    /// the flag that fixes it ([`PolicyChanges::fix_for`]).
    pub(crate) fn refusal(&self, error: &PolicyError) -> Error {
        Error::invalid(format!("pool policy: {error}"), self.fix_for(error))
    }

    /// The fix for a spec error `error` ([`DesktopPoolSpec::policy`]'s): the flag that sets its
    /// field.
    pub(crate) fn fix_for(&self, error: &PolicyError) -> String {
        let flag = match error.field {
            PolicyField::Warm => "--warm (0 to the size)",
            PolicyField::DisconnectGrace => "--disconnect-grace (10s to 168h)",
            PolicyField::MaxSession => "--max-session (10s to 8784h, or none)",
            PolicyField::IdleTimeout => "--idle-timeout (10s to 8784h, or none)",
            PolicyField::Size => "--size (1 to 500)",
            PolicyField::Golden => "--from (the golden VM)",
            PolicyField::OnRelease => "--on-release keep, or --assignment floating",
        };
        format!("fix {flag}; durations are written like 90s, 30m or 1h30m; nothing was written")
    }
}

/// The policy a new pool gets from `pool create`'s flags: `golden` and `size` with `changes`
/// applied, checked by [`DesktopPoolSpec::policy`] without a request, so that a bad flag is
/// refused before anything is created.
///
/// Errors: [`Error::Invalid`] naming the field and the flag.
pub fn spec_for(golden: &str, size: u32, changes: &PolicyChanges) -> Result<DesktopPoolSpec> {
    let spec = changes.apply(&base_spec(golden, size));
    spec.policy().map_err(|e| changes.refusal(&e))?;
    Ok(spec)
}

/// A new pool's spec before its policy: `golden` and `size` (beyond `i32`: the largest, which
/// the size's rule refuses).
pub(crate) fn base_spec(golden: &str, size: u32) -> DesktopPoolSpec {
    DesktopPoolSpec {
        golden: golden.to_owned(),
        size: i32::try_from(size).unwrap_or(i32::MAX),
        ..Default::default()
    }
}

/// What only administrators do here, as a 403's refusal says it ([`Error::for_admins`]).
const ADMINS_DO: &str = "change a pool's settings or size";

/// Changes `pool`'s policy in `ns` by `changes`, checked through [`crate::policy::Policy`] (every
/// bound of the CRD) before anything is written; returns the DesktopPool as written.
///
/// Errors: [`Error::Invalid`] for a bad name, no change asked for, or a value out of range
/// (naming the field and its flag; nothing written); those of [`resize`]'s unmanaged-pool and
/// missing-CRD refusals; [`Error::Rejected`] `Conflict` when the DesktopPool changed since it
/// was read; `Forbidden` for a caller RBAC does not let write it ([`Error::for_admins`]);
/// [`Error::Kube`] naming the object for a failed request.
pub async fn set(
    client: &Client,
    ns: &str,
    pool: &str,
    changes: &PolicyChanges,
) -> Result<DesktopPool> {
    if changes.is_empty() {
        return Err(Error::invalid(
            format!("pool set {pool}: nothing to change"),
            "pass one or more of --warm, --disconnect-grace, --max-session, --idle-timeout, \
             --on-release, --assignment",
        ));
    }
    let current = managed(client, ns, pool)
        .await
        .map_err(|e| e.for_admins(ADMINS_DO))?;
    let spec = changes.apply(&current.spec);
    spec.policy().map_err(|e| {
        Error::invalid(
            format!("{}: {e}", object_words(ns, pool)),
            changes.fix_for(&e),
        )
    })?;
    write(client, ns, pool, &current, &spec).await
}

/// Sets `pool`'s size (and with `warm`, its warm buffer in the same write): the broker clones
/// the missing members or removes free ones, highest index first.
///
/// Refused before anything is written: a size outside 1 ..= [`MAX_SIZE`] (no request); an
/// unmanaged pool (fix: `pool adopt` first) or a cluster without the CRD; a warm buffer larger
/// than the new size (fix: lower warm first, or set both); and, for growth, what pool create
/// refuses: the golden VM must exist and the cluster must be able to place the new members
/// with their GPUs and host devices (the same admission, [`crate::capacity`]; a check, not a
/// reservation).
///
/// Errors: [`Error::Invalid`] for bad input; [`Error::Rejected`] (`NotFound`, `Invalid`,
/// `Refused` with the per-node table, `Conflict` when the DesktopPool changed since it was
/// read; `Forbidden` for a caller RBAC does not let write it: [`Error::for_admins`]);
/// [`Error::Kube`] naming the object for a failed request.
pub async fn resize(
    client: &Client,
    ns: &str,
    pool: &str,
    size: u32,
    warm: Option<u32>,
) -> Result<DesktopPool> {
    validate::namespace(ns)?;
    validate::pool_name(pool)?;
    let max = MAX_SIZE as u32;
    if !(1..=max).contains(&size) {
        return Err(Error::invalid(
            format!("pool size {size} is out of range (1 to {max})"),
            format!("pass --size between 1 and {max}"),
        ));
    }
    let current = managed(client, ns, pool)
        .await
        .map_err(|e| e.for_admins(ADMINS_DO))?;
    let changes = PolicyChanges {
        warm,
        ..Default::default()
    };
    let spec = DesktopPoolSpec {
        size: size as i32,
        ..changes.apply(&current.spec)
    };
    let new_warm = spec.warm.unwrap_or(0);
    if new_warm > spec.size {
        return Err(Error::rejected(
            ErrorKind::Invalid,
            format!(
                "{} keeps {new_warm} warm members, more than the size {size} asked for; nothing \
                 was written",
                object_words(ns, pool)
            ),
            format!(
                "lower warm first (corral-vdi pool set {pool} -n {ns} --warm {size}), or set both \
                 (corral-vdi pool resize {pool} -n {ns} --size {size} --warm {size})"
            ),
        ));
    }
    spec.policy().map_err(|e| {
        Error::invalid(
            format!("{}: {e}", object_words(ns, pool)),
            changes.fix_for(&e),
        )
    })?;
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    let live: Vec<_> = crate::pool::list_member_metadata(&vms, ns, pool)
        .await?
        .into_iter()
        .filter(|vm| vm.metadata.deletion_timestamp.is_none())
        .collect();
    let members = u32::try_from(live.len()).unwrap_or(u32::MAX);
    if size > members {
        crate::pool::admit_growth(client, ns, pool, &spec.golden, size - members).await?;
    }
    let owned = owned_above(pool, size, live.iter().map(|vm| &vm.metadata));
    if !owned.is_empty() {
        let highest = owned.iter().map(|(i, _)| *i).max().unwrap_or(size);
        let named: Vec<String> = owned
            .iter()
            .map(|(i, owner)| format!("{} ({owner})", member_name(pool, *i)))
            .collect();
        return Err(Error::rejected(
            ErrorKind::Conflict,
            format!(
                "{} would lose owned members: {}; a resize never removes a member of a \
                 dedicated pool that someone owns, so nothing was written",
                object_words(ns, pool),
                named.join(", ")
            ),
            format!(
                "free them first (corral-vdi pool owner <member> --none -n {ns}), or resize to \
                 at least {highest}"
            ),
        ));
    }
    write(client, ns, pool, &current, &spec).await
}

/// The members of `pool` above `size` that someone owns ([`crate::names::OWNER_ANNOTATION`]),
/// as (index, owner), lowest index first: what a resize refuses to remove.
pub fn owned_above<'a>(
    pool: &str,
    size: u32,
    members: impl Iterator<Item = &'a ObjectMeta>,
) -> Vec<(u32, String)> {
    let mut owned: Vec<(u32, String)> = members
        .filter_map(|m| {
            let index = index_of(pool, m.name.as_deref()?)?;
            let owner = m.annotations.as_ref()?.get(OWNER_ANNOTATION)?;
            (index > size && !owner.is_empty()).then(|| (index, owner.clone()))
        })
        .collect();
    owned.sort();
    owned
}

/// What resizing `pool` in `ns` to `size` does to its members as they are now, by the
/// broker's own rule ([`crate::policy::plan::resize_preview`]): which free members go now,
/// which claimed ones go once released, which are cloned. Reads the pool's members (every
/// pool member of the namespace, so that a Lease named for a VM of another pool is told apart)
/// and the namespace's Leases, judged by the API server's clock, with the broker's default
/// margin after a claim's expiry ([`crate::policy::plan::DEFAULT_RECLAIM_MARGIN`]).
///
/// Errors: [`Error::Invalid`] for a bad name; [`Error::Kube`] when a list fails.
pub async fn preview_resize(
    client: &Client,
    ns: &str,
    pool: &str,
    size: u32,
) -> Result<ResizePreview> {
    validate::namespace(ns)?;
    validate::pool_name(pool)?;
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), ns);
    let members = vms
        .list(&ListParams::default().labels(POOL_LABEL))
        .await
        .map_err(|e| Error::kube(format!("list pool members in namespace \"{ns}\""), e))?;
    let leases: Api<ClaimLease> = Api::namespaced(client.clone(), ns);
    let leases = leases
        .list(&ListParams::default())
        .await
        .map_err(|e| Error::kube(format!("list Leases in namespace \"{ns}\""), e))?;
    let now = ServerClock::measure(client).await?.now();
    let objects = PoolObjects::gather(ns, pool, members.iter(), leases.iter());
    Ok(resize_preview(
        pool,
        size,
        &objects.seen(now, DEFAULT_RECLAIM_MARGIN),
    ))
}

/// The merge patch that makes `current`'s spec `spec`, carrying `current`'s resourceVersion
/// (a changed object answers 409) and, when the spec changes, `by` (the writer's identity) as
/// [`CHANGED_BY_ANNOTATION`] and the generation the change makes as
/// [`CHANGED_GENERATION_ANNOTATION`] (a write that changes nothing makes no generation, so it
/// records none): every spec field written, absent ones as `null`.
fn patch_of(current: &DesktopPool, spec: &DesktopPoolSpec, by: &str) -> Value {
    let mut fields = serde_json::to_value(spec).unwrap_or_else(|_| json!({}));
    if let Some(map) = fields.as_object_mut() {
        for key in [
            "warm",
            "disconnectGrace",
            "maxSession",
            "idleTimeout",
            "onRelease",
        ] {
            map.entry(key).or_insert(Value::Null);
        }
    }
    let mut patch = json!({
        "metadata": { "resourceVersion": current.resource_version() },
        "spec": fields,
    });
    if *spec != current.spec {
        patch["metadata"]["annotations"] = json!({
            CHANGED_BY_ANNOTATION: by,
            CHANGED_GENERATION_ANNOTATION:
                current.metadata.generation.unwrap_or_default().saturating_add(1).to_string(),
        });
    }
    patch
}

/// How many times a write is tried again when only the broker's status moved the
/// resourceVersion.
const STATUS_RETRIES: usize = 5;

/// Writes `spec` over `current` (read before), or refuses when its spec changed meanwhile.
///
/// The patch carries the resourceVersion read, so any change in between answers 409. The
/// broker writes the status (its own subresource) often, which moves the resourceVersion but
/// not `metadata.generation` (the API server bumps it on spec changes only, for a CRD with a
/// status subresource): on a 409 the object is read again, and while its generation is the
/// one the change was computed from, the same spec is written with the new resourceVersion
/// ([`STATUS_RETRIES`] times at most). Another generation means someone else changed the
/// policy: refused, nothing written.
async fn write(
    client: &Client,
    ns: &str,
    pool: &str,
    current: &DesktopPool,
    spec: &DesktopPoolSpec,
) -> Result<DesktopPool> {
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let api: Api<DesktopPool> = Api::namespaced(client.clone(), ns);
    let by = crate::identity::whoami(client).await?.username;
    let changed = |seen: &DesktopPool| {
        Error::rejected(
            ErrorKind::Conflict,
            format!(
                "{} changed while it was being updated (its spec is no longer generation {}, \
                 resourceVersion {}); nothing was written",
                object_words(ns, pool),
                current.metadata.generation.unwrap_or_default(),
                seen.resource_version().unwrap_or_default()
            ),
            "someone else changed the policy: look at it again (corral-vdi pool list) and retry",
        )
    };
    let mut read = current.clone();
    for _ in 0..=STATUS_RETRIES {
        match api
            .patch(pool, &params, &Patch::Merge(&patch_of(&read, spec, &by)))
            .await
        {
            Ok(written) => {
                tracing::info!(namespace = %ns, pool, size = written.spec.size, warm = ?written.spec.warm, "DesktopPool policy written");
                return Ok(written);
            }
            Err(e) if crate::error::is_status(&e, 409) => {
                read = managed(client, ns, pool).await?;
                if read.metadata.generation != current.metadata.generation {
                    return Err(changed(&read));
                }
            }
            Err(e) => {
                return Err(Error::kube(format!("update {}", object_words(ns, pool)), e)
                    .for_admins(ADMINS_DO));
            }
        }
    }
    Err(changed(&read))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> DesktopPoolSpec {
        DesktopPoolSpec {
            golden: "g".into(),
            size: 4,
            max_session: Some("8h".into()),
            ..Default::default()
        }
    }

    #[test]
    fn changes_apply_and_none_removes_a_limit() {
        let changes = PolicyChanges {
            warm: Some(2),
            max_session: Some(NO_LIMIT.into()),
            idle_timeout: Some("30m".into()),
            ..Default::default()
        };
        let new = changes.apply(&spec());
        assert_eq!(new.warm, Some(2));
        assert_eq!(new.max_session, None);
        assert_eq!(new.idle_timeout.as_deref(), Some("30m"));
        assert_eq!(PolicyChanges::default().apply(&spec()), spec());
    }

    #[test]
    fn the_patch_nulls_what_is_gone_and_carries_the_resource_version_and_the_writer() {
        let mut current = DesktopPool::new("p", spec());
        current.metadata.resource_version = Some("42".into());
        current.metadata.generation = Some(6);
        let new = DesktopPoolSpec {
            max_session: None,
            ..spec()
        };
        let patch = patch_of(&current, &new, "admin");
        assert_eq!(patch["metadata"]["resourceVersion"], "42");
        let annotations = &patch["metadata"]["annotations"];
        assert_eq!(annotations[CHANGED_BY_ANNOTATION], "admin");
        assert_eq!(annotations[CHANGED_GENERATION_ANNOTATION], "7");
        let same = patch_of(&current, &spec(), "admin");
        assert_eq!(
            same["metadata"].get("annotations"),
            None,
            "a write that changes nothing records no writer: no generation follows it"
        );
        assert_eq!(patch["spec"]["maxSession"], Value::Null);
        assert_eq!(patch["spec"]["size"], 4);
    }

    #[test]
    fn a_bad_value_points_at_its_flag() {
        let too_warm = PolicyChanges {
            warm: Some(9),
            ..Default::default()
        };
        let err = too_warm.apply(&spec()).policy().unwrap_err();
        assert!(too_warm.fix_for(&err).contains("--warm"), "{err}");
    }
}
