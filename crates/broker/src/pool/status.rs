//! A managed pool's `.status` (the `status` subresource of its DesktopPool): the counts of
//! [`vdi_core::policy::plan::Counts`], `observedGeneration`, and three conditions (Kubernetes' `Condition`
//! convention, `metav1.Condition`):
//! - `Ready`: size and warm reached, nothing being cloned or removed, no problem; `False` with
//!   a reason (`Resizing`, `GrowFailed`, `PolicyInvalid`) and a message naming the object and
//!   the fix otherwise;
//! - `Resizing`: members are being cloned or removed, or claimed members above the size wait
//!   for their release;
//! - `PolicyInvalid`: the spec cannot be read ([`vdi_core::policy::DesktopPool::policy`]); the
//!   broker then does nothing to the pool.
//!
//! It also keeps the pool's hourly usage history ([`vdi_core::policy::usage`]: peak claimed,
//! lowest free, reclaims by why), folded in at each look.
//!
//! Written only when it changed (a condition keeps its `lastTransitionTime` while its status
//! stays), with a merge patch of `status` (field manager `corral-vdi-broker`).

use anyhow::Context as _;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use std::collections::BTreeMap;
use vdi_core::names::BROKER_NAME;

use vdi_core::policy::usage;
use vdi_core::policy::{DesktopPool, DesktopPoolStatus};

use crate::context::PoolKey;
use vdi_core::names::lease_name;
use vdi_core::policy::plan::{Counts, Plan};
use vdi_core::pool::member_name;

/// One condition as the loop judges it (`type`, `True`/`False`, reason, message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    /// `type`.
    pub kind: &'static str,
    /// `status` is `True`.
    pub holds: bool,
    /// `reason` (CamelCase).
    pub reason: &'static str,
    /// `message`.
    pub message: String,
}

/// The status to write for `pool` with these counts and conditions; conditions that did not
/// change status keep their `lastTransitionTime`.
/// The usage history is `prior` (what was last written, else the status as read) with this
/// look and `reclaims` folded in.
pub fn status(
    pool: &DesktopPool,
    counts: Counts,
    judged: &[Judged],
    now: Timestamp,
    prior: &[usage::UsageBucket],
    reclaims: &BTreeMap<String, i32>,
) -> DesktopPoolStatus {
    let old = pool
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let generation = pool.metadata.generation;
    let conditions = judged
        .iter()
        .map(|j| {
            let status = if j.holds { "True" } else { "False" };
            let since = old
                .iter()
                .find(|c| c.type_ == j.kind && c.status == status)
                .map_or(Time(now), |c| c.last_transition_time.clone());
            Condition {
                type_: j.kind.to_owned(),
                status: status.to_owned(),
                reason: j.reason.to_owned(),
                message: j.message.clone(),
                last_transition_time: since,
                observed_generation: generation,
            }
        })
        .collect();
    DesktopPoolStatus {
        observed_generation: generation,
        members: counts.members,
        free: counts.free,
        claimed: counts.claimed,
        warm: counts.warm,
        creating: counts.creating,
        conditions,
        usage: usage::record(
            prior,
            now,
            &usage::Look {
                claimed: counts.claimed,
                free: counts.free,
                reclaims: reclaims.clone(),
            },
        ),
    }
}

/// The message of condition `kind` in the status as it is, if any.
pub fn message<'a>(pool: &'a DesktopPool, kind: &str) -> Option<&'a str> {
    pool.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| c.message.as_str())
}

/// Writes `status` on `pool` unless it holds it already. Whether it wrote.
///
/// Errors: the patch failed (a DesktopPool deleted meanwhile is no error).
pub async fn write(
    client: &Client,
    pool: &DesktopPool,
    status: &DesktopPoolStatus,
) -> anyhow::Result<bool> {
    if pool.status.as_ref() == Some(status) {
        return Ok(false);
    }
    let namespace = pool.namespace().unwrap_or_default();
    let name = pool.name_any();
    let api: Api<DesktopPool> = Api::namespaced(client.clone(), &namespace);
    let params = PatchParams {
        field_manager: Some(BROKER_NAME.into()),
        ..PatchParams::default()
    };
    match api
        .patch_status(&name, &params, &Patch::Merge(&json!({ "status": status })))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e).with_context(|| {
            format!("write the status of DesktopPool {name} in namespace \"{namespace}\"")
        }),
    }
}

/// A condition judged ([`Judged`]).
pub(super) fn judged(
    kind: &'static str,
    holds: bool,
    reason: &'static str,
    message: String,
) -> Judged {
    Judged {
        kind,
        holds,
        reason,
        message,
    }
}

/// The conditions for `planned` (see [`super::status`]); `growing`: the clones run now;
/// `failed`: the last grow's failure, while it is not tried again.
pub(super) fn judge(
    key: &PoolKey,
    planned: &Plan,
    size: u32,
    growing: bool,
    failed: Option<&str>,
) -> Vec<Judged> {
    let PoolKey { namespace, pool } = key;
    let names = |indices: &[u32]| {
        indices
            .iter()
            .map(|i| member_name(pool, *i))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut busy = Vec::new();
    if growing {
        busy.push(format!("cloning {}", names(&planned.clone)));
    }
    if planned.counts.removing > 0 {
        busy.push(format!("removing {} member(s)", planned.counts.removing));
    }
    if !planned.waiting.is_empty() {
        busy.push(format!(
            "{} above size {size} stay(s) until released",
            names(&planned.waiting)
        ));
    }
    if !planned.blocked.is_empty() {
        busy.push(format!(
            "{} cannot be cloned: a claim Lease of that name exists without its VM (delete it: \
             `kubectl delete lease -n {namespace} {}`)",
            names(&planned.blocked),
            planned
                .blocked
                .iter()
                .map(|i| lease_name(&member_name(pool, *i)))
                .collect::<Vec<_>>()
                .join(" ")
        ));
    }
    let c = planned.counts;
    let summary = format!(
        "{} member(s) of {size}: {} free ({} running), {} claimed",
        c.members, c.free, c.warm, c.claimed
    );
    let resizing = !busy.is_empty();
    let mut out = vec![judged(
        "Resizing",
        resizing,
        if resizing { "Resizing" } else { "SizeReached" },
        if resizing {
            busy.join("; ")
        } else {
            summary.clone()
        },
    )];
    out.insert(
        0,
        match failed {
            Some(why) => judged("Ready", false, "GrowFailed", why.to_owned()),
            None if resizing => judged("Ready", false, "Resizing", busy.join("; ")),
            None => judged("Ready", true, "Ready", summary),
        },
    );
    out.push(judged(
        "PolicyInvalid",
        false,
        "PolicyValid",
        format!("DesktopPool {pool} is applied"),
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use vdi_core::policy::DesktopPoolSpec;

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_stays() {
        let mut pool = DesktopPool::new("dev", DesktopPoolSpec::default());
        pool.metadata.generation = Some(3);
        let ready = |holds| Judged {
            kind: "Ready",
            holds,
            reason: "Ready",
            message: "m".into(),
        };
        let t0: Timestamp = "2026-12-04T10:00:00Z".parse().unwrap();
        // Within the same hour: the usage history's bucket does not change either (a new hour
        // is a new bucket, written once).
        let t1: Timestamp = "2026-12-04T10:40:00Z".parse().unwrap();
        let first = status(
            &pool,
            Counts::default(),
            &[ready(true)],
            t0,
            &[],
            &BTreeMap::new(),
        );
        assert_eq!(first.observed_generation, Some(3));
        pool.status = Some(first.clone());
        let again = status(
            &pool,
            Counts::default(),
            &[ready(true)],
            t1,
            &pool.status.clone().unwrap_or_default().usage,
            &BTreeMap::new(),
        );
        assert_eq!(again, first, "nothing changed: nothing to write");
        let flipped = status(
            &pool,
            Counts::default(),
            &[ready(false)],
            t1,
            &pool.status.clone().unwrap_or_default().usage,
            &BTreeMap::new(),
        );
        assert_eq!(flipped.conditions[0].last_transition_time, Time(t1));
        assert_eq!(message(&pool, "Ready"), Some("m"));
    }
}
