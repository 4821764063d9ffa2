//! One managed pool's reconcile: read its DesktopPool, members and claim Leases from the
//! stores, [`plan`] what they ask for (the core's rule, which the app and the CLI preview a
//! resize with), do it, and write the status.
//!
//! Order: removals are finished and taken first, then the warm buffer, then the status is
//! written, and last the missing members are cloned ([`vdi_core::pool::add_members`], which
//! blocks this pool's reconcile, and only this pool's, for as long as the clones take). A grow
//! that is refused (golden VM missing or not clonable, capacity, a name taken) becomes the
//! `Ready=False GrowFailed` condition and one `GrowFailed` Event per new message, and is tried
//! again after [`GROW_RETRY`], not in a loop.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use tokio::time::Instant;
use vdi_core::audit::Facts;
use vdi_core::lease::ClaimLease;
use vdi_core::names::{
    BROKER_USER, CHANGED_BY_ANNOTATION, CHANGED_GENERATION_ANNOTATION, member_name,
};
use vdi_core::policy::DesktopPool;
use vdi_core::policy::plan::{PoolObjects, plan};
use vdi_core::resources::VirtualMachine;

use super::status::{self, judge, judged};
use super::take;
use crate::context::{Context, PoolKey};
use crate::decide::shown;
use crate::events::{self, Act};

/// How soon a refused or failed grow is tried again.
pub const GROW_RETRY: Duration = Duration::from_secs(60);

/// The DesktopPool (uid) and size this process last saw for each pool: a resize is a change of
/// the size, recorded once, whatever else a later spec change touches (durations, warm); a
/// pool deleted and made again under its name is another uid.
static SIZES_SEEN: Mutex<Option<HashMap<PoolKey, (String, u32)>>> = Mutex::new(None);

/// Whether DesktopPool `uid` (pool `key`) was resized to `size`, and marks `size` seen: a
/// change from the size seen last; at this process's first sight of the pool (just started,
/// or a new pool), `first_sight` judges (from the pool's status).
fn resized_to(key: &PoolKey, uid: String, size: u32, first_sight: impl FnOnce() -> bool) -> bool {
    let Ok(mut map) = SIZES_SEEN.lock() else {
        return first_sight();
    };
    let before = map
        .get_or_insert_with(HashMap::new)
        .insert(key.clone(), (uid.clone(), size));
    match before {
        Some((seen_uid, seen_size)) if seen_uid == uid => seen_size != size,
        _ => first_sight(),
    }
}

/// The last failed grow of each pool: when, and the sentence.
static GROW_FAILURES: Mutex<Option<HashMap<PoolKey, (Instant, String)>>> = Mutex::new(None);

fn failure(key: &PoolKey) -> Option<(Instant, String)> {
    GROW_FAILURES.lock().ok()?.as_ref()?.get(key).cloned()
}

fn set_failure(key: &PoolKey, failed: Option<String>) {
    if let Ok(mut map) = GROW_FAILURES.lock() {
        let map = map.get_or_insert_with(HashMap::new);
        match failed {
            Some(why) => map.insert(key.clone(), (Instant::now(), why)),
            None => map.remove(key),
        };
    }
}

/// A pool's members and Leases as the stores hold them, by index.
pub type Members = PoolObjects<Arc<VirtualMachine>, Arc<ClaimLease>>;

/// Pool `key`'s members and Leases as the broker's stores hold them now.
pub fn gather(ctx: &Context, key: &PoolKey) -> Members {
    PoolObjects::gather(
        &key.namespace,
        &key.pool,
        ctx.stores.vms.state(),
        ctx.stores.leases.state(),
    )
}

/// A VM's reference for an Event (one that may not be in the store yet).
pub(super) fn vm_ref(namespace: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("kubevirt.io/v1".into()),
        kind: Some("VirtualMachine".into()),
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        ..Default::default()
    }
}

/// One pool being reconciled.
pub(super) struct Work<'a> {
    pub(super) ctx: &'a Context,
    pub(super) key: &'a PoolKey,
    recorder: Recorder,
}

impl Work<'_> {
    pub(super) async fn record(
        &self,
        regarding: &ObjectReference,
        reason: &str,
        action: &str,
        warning: bool,
        why: Option<&str>,
        text: String,
    ) {
        let act = Act {
            reason,
            action,
            warning,
            facts: Facts {
                by: Some(BROKER_USER.to_owned()),
                pool: self.key.pool.clone(),
                why: why.map(str::to_owned),
                ..Default::default()
            },
            text,
        };
        events::record(&self.recorder, regarding, &self.key.namespace, act).await;
    }

    pub(super) fn member(&self, index: u32) -> String {
        member_name(&self.key.pool, index)
    }
}

/// Reconciles the managed pool `key` (nothing for a pool without a DesktopPool); returns when
/// to look at it again without an event.
///
/// Errors: a request failed (the caller retries); the status is written before.
pub async fn reconcile(ctx: &Context, key: &PoolKey) -> anyhow::Result<Option<Timestamp>> {
    let Some(desktop_pool) = ctx
        .stores
        .pools
        .get(&ObjectRef::new(&key.pool).within(&key.namespace))
    else {
        return Ok(None);
    };
    let now = ctx.clock.now();
    let members = gather(ctx, key);
    let seen = members.seen(now, ctx.margin);
    let work = Work {
        ctx,
        key,
        recorder: take::recorder(ctx),
    };
    let PoolKey { namespace, pool } = key;
    // Reclaims since the last look, for the usage history of the status written first, folded
    // into the history this leader last wrote (the store may lag behind it).
    let reclaims = ctx.take_reclaims(key);
    let prior = ctx.written_usage(key).unwrap_or_else(|| {
        (desktop_pool.status.as_ref())
            .map(|s| s.usage.clone())
            .unwrap_or_default()
    });
    let policy = match desktop_pool.policy() {
        Ok(policy) => policy,
        Err(problem) => {
            let message = format!(
                "DesktopPool {pool} in namespace \"{namespace}\" is not applied: {problem}; fix it \
                 with `kubectl edit desktoppool {pool} -n {namespace}` (nothing is resized, warmed \
                 or reclaimed by its policy meanwhile)"
            );
            let largest = seen.iter().map(|s| s.index).max().unwrap_or(0);
            let mut counts = plan(largest, 0, &seen).counts;
            counts.creating = 0;
            let judged = [
                judged("Ready", false, "PolicyInvalid", message.clone()),
                judged("Resizing", false, "PolicyInvalid", message.clone()),
                judged("PolicyInvalid", true, "PolicyInvalid", message.clone()),
            ];
            if status::message(&desktop_pool, "PolicyInvalid") != Some(message.as_str()) {
                let regarding = desktop_pool.object_ref(&());
                work.record(&regarding, "PolicyInvalid", "Refuse", true, None, message)
                    .await;
            }
            let written = status::status(&desktop_pool, counts, &judged, now, &prior, &reclaims);
            write_status(ctx, key, &desktop_pool, &written, reclaims).await?;
            return Ok(None);
        }
    };
    let planned = plan(policy.size, policy.warm, &seen);
    // At first sight, a spec not yet observed whose size is not the members' count.
    let resized = resized_to(
        key,
        desktop_pool.uid().unwrap_or_default(),
        policy.size,
        || {
            desktop_pool.status.as_ref().is_some_and(|s| {
                s.observed_generation.is_some()
                    && s.observed_generation != desktop_pool.metadata.generation
                    && i64::from(s.members) != i64::from(policy.size)
            })
        },
    );
    if resized {
        let had = desktop_pool.status.as_ref().map_or(0, |s| s.members);
        // Who asked, from the DesktopPool's own record (which the broker's admission policy
        // pins to its writer), when it was written with this generation.
        let generation = desktop_pool
            .metadata
            .generation
            .unwrap_or_default()
            .to_string();
        let annotations = desktop_pool.annotations();
        let by = annotations
            .get(CHANGED_BY_ANNOTATION)
            .filter(|by| !by.is_empty())
            .filter(|_| annotations.get(CHANGED_GENERATION_ANNOTATION) == Some(&generation))
            .cloned();
        let asked = match &by {
            Some(by) => format!("by {}", shown(by)),
            None => "by a writer that did not say who (no corral.dev/vdi-changed-by for this \
                     generation)"
                .into(),
        };
        let how = if i64::from(policy.size) < i64::from(had) {
            "free members above the size are removed, claimed ones once released".to_owned()
        } else {
            format!("missing ones cloned from {}", policy.golden)
        };
        let text = format!(
            "pool {pool} resized {asked}: {had} → {} members ({how})",
            policy.size
        );
        let act = Act {
            reason: "Resized",
            action: "Resize",
            warning: false,
            facts: Facts {
                by,
                pool: pool.clone(),
                ..Default::default()
            },
            text,
        };
        events::record(
            &work.recorder,
            &desktop_pool.object_ref(&()),
            namespace,
            act,
        )
        .await;
    }
    let errors = work.act(&planned, &members, policy.warm).await;
    // Grow last: it blocks this pool's reconcile while the clones run.
    let retry_at = failure(key).filter(|(at, _)| at.elapsed() < GROW_RETRY);
    let grow = !planned.clone.is_empty() && retry_at.is_none();
    let failed = retry_at.map(|(_, why)| why);
    let judged = judge(key, &planned, policy.size, grow, failed.as_deref());
    let before = status::status(
        &desktop_pool,
        planned.counts,
        &judged,
        now,
        &prior,
        &reclaims,
    );
    write_status(ctx, key, &desktop_pool, &before, reclaims).await?;
    if grow {
        let failed = work.grow(&policy.golden, &planned.clone).await;
        if let Some(why) = &failed
            && status::message(&desktop_pool, "Ready") != Some(why.as_str())
        {
            let regarding = desktop_pool.object_ref(&());
            work.record(&regarding, "GrowFailed", "Resize", true, None, why.clone())
                .await;
        }
        let mut counts = planned.counts;
        counts.creating = 0;
        let judged = judge(key, &planned, policy.size, false, failed.as_deref());
        // As written just now, so that the second write compares with it.
        let written = DesktopPool {
            status: Some(before),
            ..(*desktop_pool).clone()
        };
        // Folded into what was written just now: its reclaims are in it already.
        let usage = written
            .status
            .as_ref()
            .map(|s| s.usage.clone())
            .unwrap_or_default();
        let after = status::status(&written, counts, &judged, now, &usage, &Default::default());
        write_status(ctx, key, &written, &after, Default::default()).await?;
        set_failure(key, failed);
    }
    if let Some(e) = errors.into_iter().next() {
        return Err(e);
    }
    Ok(failure(key).and_then(|(at, _)| {
        let wait = GROW_RETRY.saturating_sub(at.elapsed());
        now.checked_add(SignedDuration::try_from(wait).ok()?).ok()
    }))
}

/// Writes `status` on `pool` (`key`) unless it holds it already, remembering the usage history
/// it carries; the `reclaims` folded into it are given back when the write fails, for the next
/// look.
///
/// Errors: the write failed.
async fn write_status(
    ctx: &Context,
    key: &PoolKey,
    pool: &DesktopPool,
    status: &vdi_core::policy::DesktopPoolStatus,
    reclaims: std::collections::BTreeMap<String, i32>,
) -> anyhow::Result<()> {
    match status::write(&ctx.client, pool, status).await {
        Ok(_) => {
            ctx.wrote_usage(key, &status.usage);
            Ok(())
        }
        Err(e) => {
            ctx.give_back_reclaims(key, reclaims);
            Err(e)
        }
    }
}
