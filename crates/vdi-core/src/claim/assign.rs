//! Assign (SPEC "Assign"), step by step: refuse what the guard would refuse, read the pool,
//! resume or adopt what the assignee already has, else win a free member's Lease; then, with
//! the Lease held, label the VM and start it — or, with a broker on the cluster, wait for the
//! broker to do that ([`super::granting`]). The decisions are [`super::rules`]'; this file
//! reads and writes.

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::ClaimOptions;
use super::Claimed;
use super::granting::{ClaimProgress, await_grant, await_release};
use super::power::{start, stopping};
use super::rules::{
    Claim, candidates, check_assign, guard_may_refuse, guard_refusal, held_by, labelled_for,
    lease_end, no_free_members, others_stale,
};
use crate::broker::BrokerStatus;
use crate::error::{Error, ErrorKind, Result, is_status};
use crate::identity::Actor;
use crate::lease::ClaimLease;
use crate::names::{
    ADMIN_GROUP, ASSIGNED_TO_LABEL, CLAIMED_AT_ANNOTATION, POOL_LABEL, encode_identity, lease_name,
};
use crate::resources::VirtualMachine;
use crate::resources::runs;
use crate::scope::Scope;
use crate::state::{MemberState, MemberView, group_pools_on, label_holder};

/// Claims a member of `pool` in `namespace` for `assignee` (SPEC "Assign"), acting as
/// `actor`: `assignee` is whom the desktop is handed to (the actor itself for "Get a desktop";
/// someone else when an administrator assigns).
///
/// 1. Checks the input (no request on bad input), then lists the pool's VMs and Leases (two
///    requests). If `assignee` already holds a member of the pool — an active Lease, or the
///    label alone (a Phase 1 claim, which then gets its Lease) — continues with it
///    (`resumed`), unless [`ClaimOptions::another`]. A member whose label and Lease disagree
///    is never resumed over.
/// 2. Otherwise tries the claimable members in an order spread by identity: a free member's
///    Lease is created; a stale Lease is replaced by an update carrying its resourceVersion.
///    A 409 means another claimant won: the next member is tried. With the guard installed,
///    an ordinary user skips stale Leases held by others (an administrator recovers those).
/// 3. With the Lease held: sets the assigned-to label and claimed-at annotation (one merge
///    patch with the VM's resourceVersion; a label someone else wrote meanwhile is reported as
///    a conflict, not overwritten), then starts the VM through the start subresource unless
///    it runs. An uncontended claim makes four requests before the start.
///
/// Before a Lease is written for a member that would have to be started and asks for GPUs or
/// host devices, the member's devices are checked against the cluster's free ones
/// ([`crate::capacity`]; one read of the cluster per claim, none for members without
/// devices): when no schedulable node can hold them all now, that member is not claimed (a
/// member that runs already may still be). A member the assignee already holds is resumed
/// without the check. The check is not a reservation.
///
/// Errors: [`Error::Invalid`] for a bad namespace, pool name, user or Lease duration, or a
/// pool with no members; [`Error::Refused`] "pool has no free members" with the counts, or
/// "no node has a free <resource> for <member>: <node> 0 of 4 free, …" when no claimable
/// member can be started now for want of devices (nothing written);
/// [`Error::Rejected`] (`Forbidden`) when the guard is installed and a non-administrator
/// assigns to someone else (refused before the pool is read, as the guard would refuse the
/// Lease); [`Error::Rejected`] (`Conflict`) for a member in conflict; [`Error::Partial`] when the label
/// or the start failed after the Lease was won — the Lease is kept so nobody else gets a
/// half-configured desktop, and the holder can retry (a start failure leaves the label on).
///
/// In a managed pool (a `DesktopPool` whose policy can be read, [`crate::policy`]; asked only
/// with a broker installed, one more read) the Lease lasts the pool's `disconnectGrace`
/// ([`crate::policy::Policy::lease_seconds`]) instead of [`ClaimOptions::lease_seconds`].
///
/// With a broker installed on the cluster ([`crate::broker::status`], read once per claim;
/// [`BrokerStatus::installed`]), step 3 is the broker's: the claim waits, at most
/// [`ClaimOptions::timeout`], watching the member's VM, until the broker has labelled it, bound
/// the assignee's access and started it ([`assign_with_progress`] reports the wait); the wait
/// ending first is an [`Error::Partial`] with the broker's reason (the Lease is kept, the broker
/// goes on). When no member is free but some are being released by the broker
/// ([`MemberState::Releasing`]: a claim that ended a moment ago), the claim waits for one
/// (within the same timeout, reported to `progress`) and reads the pool again, instead of
/// failing for a member freed a second later.
pub async fn assign(
    actor: &Actor,
    namespace: &str,
    pool: &str,
    assignee: &str,
    options: &ClaimOptions,
) -> Result<Claimed> {
    assign_with_progress(actor, namespace, pool, assignee, options, |_| {}).await
}

/// [`assign`], reporting the wait for a broker's grant to `progress` as it goes (a
/// [`ClaimProgress`] when the Lease is held and on every change of what it shows; nothing
/// without a broker). `progress` is called from the calling task, one step at a time.
///
/// Errors: [`assign`]'s.
pub async fn assign_with_progress<P>(
    actor: &Actor,
    namespace: &str,
    pool: &str,
    assignee: &str,
    options: &ClaimOptions,
    progress: P,
) -> Result<Claimed>
where
    P: Fn(ClaimProgress) + Send + Sync,
{
    let lease_seconds = check_assign(namespace, pool, assignee, options)?;
    let claim = Claim {
        namespace,
        pool,
        assignee,
        forced: options.force,
    };
    refuse_if_guarded(actor, &claim).await?;
    refuse_unentitled(actor, &claim).await?;
    let broker = crate::broker::status(actor.client())
        .await
        .ok()
        .filter(BrokerStatus::installed);
    // A managed pool's claims last its disconnectGrace (SPEC "Pool policy and lifecycle");
    // only a broker applies a policy, so without one the pool is not asked about.
    let policy = match &broker {
        Some(_) => super::renew::pool_policy(actor, namespace, pool).await?,
        None => None,
    };
    let lease_seconds = policy.as_ref().map_or(lease_seconds, |p| p.lease_seconds());
    let owned = super::ownership::owners_count(policy.as_ref().map(|p| p.dedicated()));
    let mut finish = Finish {
        broker,
        timeout: options.timeout,
        progress: &progress,
    };
    let read = PoolRead::read(actor, &claim, &finish).await?;
    let mut devices = StartCheck::new(actor.client());
    if !options.another {
        if let Some(member) = held_by(&read.members, assignee)? {
            return resume(actor, &claim, &read, member, &finish).await;
        }
        if let Some(member) = read
            .members
            .iter()
            .find(|m| labelled_for(m, read.label(&m.name), assignee))
        {
            return adopt(
                actor,
                &claim,
                &read,
                member,
                &mut devices,
                lease_seconds,
                &finish,
            )
            .await;
        }
    }
    // No member free but some being released by the broker: wait for one, then read again
    // (a claim that fails for a member freed a second later reads as a full pool).
    let deadline = tokio::time::Instant::now() + options.timeout;
    let mut read = read;
    loop {
        let releasing: Vec<String> = read
            .members
            .iter()
            .filter(|m| m.state == MemberState::Releasing)
            .map(|m| m.name.clone())
            .collect();
        // Releasing is judged only with a broker: an empty list here without one.
        let none_free = !read.members.iter().any(|m| m.claimable);
        if !(none_free
            && await_release(actor.client(), &claim, &releasing, deadline, &progress).await)
        {
            break;
        }
        read = PoolRead::read(actor, &claim, &finish).await?;
        // The grant's wait has what is left of the claim's timeout.
        finish.timeout = deadline.saturating_duration_since(tokio::time::Instant::now());
    }
    if owned {
        keep_to_own(&mut read, &claim)?;
    }
    win_free_member(actor, &claim, &read, &mut devices, lease_seconds, &finish).await
}

/// In a dedicated pool (SPEC "Pool policy and lifecycle": assignment), the members a claim for
/// the assignee may take: the one they own, if any ([`MemberView::owner`]), else the unowned
/// ones; never another's.
///
/// Errors: [`Error::Refused`] when they own one that cannot be claimed now, naming it and its
/// state.
fn keep_to_own(read: &mut PoolRead, claim: &Claim<'_>) -> Result<()> {
    let own = super::ownership::own_member(&read.members, claim.assignee).cloned();
    if let Some(mine) = &own
        && !mine.claimable
    {
        return Err(Error::Refused {
            message: format!(
                "{}'s desktop in dedicated pool \"{}\" is {}, which cannot be claimed now ({})",
                claim.assignee,
                claim.pool,
                mine.name,
                mine.state.label()
            ),
            suggestion: Some(format!(
                "try again once it is free (corral-vdi pool list -n {}), or ask an administrator \
                 to move it (corral-vdi pool owner {} --user … | --none)",
                claim.namespace, mine.name
            )),
        });
    }
    read.members
        .retain(|m| super::ownership::may_take(m, own.as_ref()));
    Ok(())
}

/// Who finishes a claim once its Lease is held: the broker (`broker`: installed), waited for
/// at most `timeout` with each step reported to `progress`; else this client.
struct Finish<'a> {
    broker: Option<BrokerStatus>,
    timeout: std::time::Duration,
    progress: &'a (dyn Fn(ClaimProgress) + Send + Sync),
}

impl Finish<'_> {
    /// Who does the cluster's half of the claim.
    fn side(&self) -> crate::state::ClaimSide {
        super::cluster_half::side(self.broker.as_ref())
    }
}

/// Step 0: with the guard enforced, refuses an assign it would refuse
/// ([`guard_may_refuse`]), before anything is read. The guard's status is asked only for such
/// an assign. A claim for oneself under an identity whose label the guard cannot check (a
/// service account's full name is often longer than it can encode) is refused only without a
/// broker: with one, the client writes no label (the broker does), and such identities claim,
/// renew, connect and release like anyone (the broker's status is read for them only).
async fn refuse_if_guarded(actor: &Actor, claim: &Claim<'_>) -> Result<()> {
    let admin = actor.identity().is_admin();
    if !guard_may_refuse(admin, actor.username(), claim.assignee) {
        return Ok(());
    }
    if claim.assignee == actor.username()
        && crate::broker::status(actor.client())
            .await
            .is_ok_and(|b| b.installed())
    {
        return Ok(());
    }
    if crate::guard::status(actor.client())
        .await
        .is_ok_and(|s| s.enforced())
    {
        return Err(guard_refusal(actor.username(), claim));
    }
    Ok(())
}

/// Step 0, for an assignment to someone else (an administrator's): refuses it, before anything
/// is read, when the pool is not for them as far as the cluster can tell
/// ([`crate::entitlement::is_entitled`]: one SubjectAccessReview), unless forced. A claim for
/// oneself is checked by the guard, with one's own groups, where the Lease is written.
///
/// Errors: [`Error::Refused`] naming the missing right and both fixes; the review's error.
async fn refuse_unentitled(actor: &Actor, claim: &Claim<'_>) -> Result<()> {
    if claim.forced || claim.assignee == actor.username() {
        return Ok(());
    }
    let Claim {
        namespace,
        pool,
        assignee,
        ..
    } = *claim;
    if crate::entitlement::is_entitled(actor.client(), namespace, pool, assignee).await? {
        return Ok(());
    }
    Err(Error::Refused {
        message: format!(
            "pool \"{pool}\" in namespace \"{namespace}\" is not for {assignee}: RBAC gives \
             {assignee} no {} on {}.{} \"{pool}\" by name (a grant to a group of theirs is not \
             seen: nobody but the API server knows a user's groups, and only while they sign in)",
            crate::entitlement::VERB,
            crate::entitlement::RESOURCE,
            crate::entitlement::GROUP
        ),
        suggestion: Some(format!(
            "entitle them (corral-vdi pool entitle {pool} --user {assignee} -n {namespace}), \
             let them take a desktop themselves, or assign with --force (recorded on the claim)"
        )),
    })
}

/// The pool as one claim reads it (two requests): its VMs, every claim Lease of the
/// namespace (joined to members by name, [`crate::lease`]: one without labels still holds its
/// member), and the members joined from them at `now` (API server time).
struct PoolRead {
    vms: Vec<VirtualMachine>,
    leases: Vec<ClaimLease>,
    members: Vec<MemberView>,
    now: Timestamp,
}

impl PoolRead {
    /// Lists the pool's VMs and the namespace's claim Leases, judging the members as `finish`
    /// does the cluster's half of claims.
    ///
    /// Errors: [`Error::Invalid`] for a pool with no members; the lists' errors.
    async fn read(actor: &Actor, claim: &Claim<'_>, finish: &Finish<'_>) -> Result<Self> {
        let Claim {
            namespace, pool, ..
        } = *claim;
        let client = actor.client();
        let vms_api: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
        let selector = ListParams::default().labels(&format!("{POOL_LABEL}={pool}"));
        let vms = vms_api
            .list(&selector)
            .await
            .map_err(|e| {
                Error::kube(
                    format!("list the members of pool \"{pool}\" in namespace \"{namespace}\""),
                    e,
                )
            })?
            .items;
        if vms.is_empty() {
            return Err(Error::invalid(
                format!("pool \"{pool}\" has no members in namespace \"{namespace}\""),
                format!(
                    "check the pool name and the namespace (-n); `corral-vdi pool list -n {namespace}` lists the pools"
                ),
            ));
        }
        let leases = crate::lease::list(client, &Scope::Namespace(namespace.to_owned())).await?;
        let now = actor.clock().now();
        let members = group_pools_on(&vms, &leases, now, finish.side())
            .into_iter()
            .next()
            .map(|p| p.members)
            .unwrap_or_default();
        Ok(PoolRead {
            vms,
            leases,
            members,
            now,
        })
    }

    /// The VM of `member`, if listed.
    fn vm(&self, member: &str) -> Option<&VirtualMachine> {
        self.vms.iter().find(|vm| vm.name_any() == member)
    }

    /// The VM of a member that was found among the members (it was listed).
    fn listed_vm(&self, member: &str) -> Result<&VirtualMachine> {
        self.vm(member)
            .ok_or_else(|| Error::Config("member vanished".into()))
    }

    /// The claim Lease of `member`, if any.
    fn lease(&self, member: &str) -> Option<&ClaimLease> {
        let name = lease_name(member);
        self.leases.iter().find(|l| l.name_any() == name)
    }

    /// The assigned-to label of `member`'s VM, as written, if any.
    fn label(&self, member: &str) -> Option<&str> {
        self.vm(member)
            .and_then(|vm| vm.labels().get(ASSIGNED_TO_LABEL))
            .map(String::as_str)
    }
}

/// Step 1a: the assignee holds `member`'s active Lease already: continue with it (an
/// idempotent retry), without the capacity check.
async fn resume(
    actor: &Actor,
    claim: &Claim<'_>,
    read: &PoolRead,
    member: &MemberView,
    how: &Finish<'_>,
) -> Result<Claimed> {
    let expires = member
        .lease
        .as_ref()
        .and_then(|l| l.expires_at)
        .unwrap_or(read.now);
    let vm = read.listed_vm(&member.name)?;
    finish(actor, claim, vm, expires, true, 0, how).await
}

/// Step 1b: `member` is labelled for the assignee without a live Lease of anyone else's (a
/// Phase 1 claim, or their own expired one): it is theirs; it gets its Lease.
///
/// Errors: [`Error::Refused`] when someone else wrote its Lease meanwhile; the capacity
/// check's refusal; [`finish`]'s.
async fn adopt(
    actor: &Actor,
    claim: &Claim<'_>,
    read: &PoolRead,
    member: &MemberView,
    devices: &mut StartCheck<'_>,
    lease_seconds: i32,
    how: &Finish<'_>,
) -> Result<Claimed> {
    let name = &member.name;
    let vm = read.listed_vm(name)?;
    if let Some(refusal) = devices.refusal(vm).await? {
        return Err(refusal);
    }
    let now = actor.clock().now();
    let lease = claim.lease(name, now, lease_seconds, read.lease(name), actor.username());
    match write_lease(actor.client(), claim, lease, read.lease(name)).await {
        Ok(()) => {
            finish(
                actor,
                claim,
                vm,
                lease_end(now, lease_seconds),
                true,
                0,
                how,
            )
            .await
        }
        Err(e) if is_status(&e, 409) => Err(Error::Refused {
            message: format!(
                "{name} is labelled for {}, but someone else wrote its Lease meanwhile",
                claim.assignee
            ),
            suggestion: Some("list the pool again to see who holds it".into()),
        }),
        Err(e) => Err(lease_error(claim, name, e)),
    }
}

/// Step 2: tries the claimable members in the assignee's order until one's Lease is won,
/// skipping members whose devices no node can hold now and, with the guard enforced, others'
/// stale Leases (for a non-administrator); then [`finish`]es with it.
///
/// Errors: the first capacity refusal when no member could be claimed for want of devices;
/// else "pool has no free members" ([`no_free_members`]); [`Error::Kube`] for a Lease write
/// refused for another reason than a lost race.
async fn win_free_member(
    actor: &Actor,
    claim: &Claim<'_>,
    read: &PoolRead,
    devices: &mut StartCheck<'_>,
    lease_seconds: i32,
    how: &Finish<'_>,
) -> Result<Claimed> {
    let admin = actor.identity().is_admin();
    let mut no_room = None;
    let mut lost = 0;
    let mut expired_skipped = 0;
    // Whether the guard stops this actor from taking over others' stale Leases; asked once,
    // and only when such a Lease is in the way.
    let mut guarded: Option<bool> = None;
    for m in candidates(&read.members, claim.assignee) {
        let Some(vm) = read.vm(&m.name) else {
            continue;
        };
        let others_stale = others_stale(m, actor.username());
        if others_stale && !admin {
            let enforced = match guarded {
                Some(known) => known,
                None => {
                    let known = crate::guard::status(actor.client())
                        .await
                        .is_ok_and(|s| s.enforced());
                    guarded = Some(known);
                    known
                }
            };
            if enforced {
                expired_skipped += 1;
                continue;
            }
        }
        if let Some(refusal) = devices.refusal(vm).await? {
            // Another member may run already (no start needed); else this is the answer.
            no_room.get_or_insert(refusal);
            continue;
        }
        let now = actor.clock().now();
        // A stale Lease is taken over (an update with its resourceVersion); else one is created.
        let previous = read
            .lease(&m.name)
            .filter(|_| m.state == MemberState::FreeStaleLease);
        let lease = claim.lease(&m.name, now, lease_seconds, previous, actor.username());
        match write_lease(actor.client(), claim, lease, previous).await {
            Ok(()) => {
                tracing::info!(namespace = %claim.namespace, pool = %claim.pool, member = %m.name, assignee = %claim.assignee, actor = %actor.username(), races_lost = lost, "Lease won");
                let expires = lease_end(now, lease_seconds);
                return finish(actor, claim, vm, expires, false, lost, how).await;
            }
            Err(e) if is_status(&e, 409) => {
                tracing::debug!(member = %m.name, "lost the Lease race; trying the next member");
                lost += 1;
            }
            Err(e) if others_stale && crate::error::is_guard_denial(&e) => {
                expired_skipped += 1;
            }
            Err(e) => return Err(lease_error(claim, &m.name, e)),
        }
    }
    if let Some(refusal) = no_room {
        return Err(refusal);
    }
    Err(no_free_members(
        claim.pool,
        claim.namespace,
        &read.members,
        lost,
        expired_skipped,
        admin,
    ))
}

/// Writes a claim's `lease`: an update of `previous` (carrying its resourceVersion, so a 409
/// means another claimant won), else a create (a 409 `AlreadyExists` means the same).
async fn write_lease(
    client: &Client,
    claim: &Claim<'_>,
    lease: Lease,
    previous: Option<&ClaimLease>,
) -> kube::Result<()> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), claim.namespace);
    match previous {
        Some(old) => {
            leases
                .replace(&old.name_any(), &PostParams::default(), &lease)
                .await
        }
        None => leases.create(&PostParams::default(), &lease).await,
    }
    .map(|_| ())
}

/// A Lease write of `member`'s claim that failed for another reason than a lost race: the
/// guard's refusal of a claim its claimant is not entitled to, as the missing right and whom to
/// ask ([`crate::entitlement::not_entitled`]); else the API server's answer.
fn lease_error(claim: &Claim<'_>, member: &str, e: kube::Error) -> Error {
    let unentitled = matches!(&e, kube::Error::Api(s)
        if crate::error::is_guard_denial(&e)
            && s.message.contains(crate::entitlement::GUARD_REFUSAL));
    if unentitled {
        return crate::entitlement::not_entitled(claim.assignee, claim.namespace, claim.pool);
    }
    Error::kube(format!("claim {member} (Lease {})", lease_name(member)), e)
}

/// The capacity check of a claim (SPEC "GPU and host-device capacity admission": assign
/// applies the same check to the member it would start, and refuses before writing the
/// Lease). A member that asks for no device, or that runs already, passes without a request
/// (decided from the VM already listed); otherwise the cluster's devices are read once per
/// claim ([`crate::capacity::read_devices`]) and the member passes if one schedulable node can
/// hold all of its devices now. A member still stopping is judged without the devices it
/// holds itself. An identity that may not read nodes and launcher pods is not refused: the
/// check is skipped (logged) and the scheduler decides, as it always has the last word.
///
/// The broker applies the same check before it starts a claimed member.
pub struct StartCheck<'a> {
    client: &'a Client,
    /// `None` until read; `Some(None)` when RBAC hides the devices from this identity.
    devices: Option<Option<crate::capacity::ClusterDevices>>,
}

impl<'a> StartCheck<'a> {
    /// A check that reads the cluster's devices with `client`, at most once.
    pub fn new(client: &'a Client) -> Self {
        StartCheck {
            client,
            devices: None,
        }
    }

    /// The refusal for starting `vm` now, or `None` when it may be claimed.
    ///
    /// Errors: a read of the cluster's devices that fails for another reason than RBAC.
    pub async fn refusal(&mut self, vm: &VirtualMachine) -> Result<Option<Error>> {
        use crate::capacity::{Demand, plan, read_devices, start_refusal};
        let power = vm.printable_status();
        if runs(power) || power == "Paused" {
            return Ok(None);
        }
        let mut demand = Demand::of_vm(vm);
        if !demand.asks_for_devices() {
            return Ok(None);
        }
        demand.ignore_own = stopping(power);
        if self.devices.is_none() {
            self.devices = Some(match read_devices(self.client).await {
                Ok(devices) => Some(devices),
                Err(e) if e.kind() == ErrorKind::Forbidden => {
                    tracing::warn!(member = %vm.name_any(), error = %e, "capacity check skipped: the cluster's devices are not readable by this identity");
                    None
                }
                Err(e) => return Err(e),
            });
        }
        let Some(Some(devices)) = &self.devices else {
            return Ok(None);
        };
        let planned = plan(devices, &demand, 1);
        Ok((!planned.fits_one).then(|| start_refusal(&planned, &vm.name_any())))
    }
}

/// Step 3, with the Lease held: with a broker, the wait for its grant ([`await_grant`]);
/// else the presentation label and annotation, then the start.
///
/// Errors: [`Error::Rejected`] (`Conflict`) for a label someone else wrote meanwhile;
/// [`Error::Partial`] when labelling or starting failed, or the broker did not finish in time
/// (the Lease is kept).
async fn finish(
    actor: &Actor,
    claim: &Claim<'_>,
    vm: &VirtualMachine,
    lease_expires_at: Timestamp,
    resumed: bool,
    races_lost: u32,
    how: &Finish<'_>,
) -> Result<Claimed> {
    let (client, namespace, assignee) = (actor.client(), claim.namespace, claim.assignee);
    let member = vm.name_any();
    let claimed = |power| Claimed {
        namespace: namespace.to_owned(),
        pool: claim.pool.to_owned(),
        member: member.clone(),
        identity: assignee.to_owned(),
        resumed,
        races_lost,
        lease_expires_at,
        power,
    };
    if let Some(broker) = &how.broker {
        let clock = actor.clock();
        let power = await_grant(
            client,
            clock,
            claim,
            &member,
            broker,
            how.timeout,
            how.progress,
        )
        .await?;
        return Ok(claimed(power));
    }
    let label = encode_identity(assignee);
    let labelled = vm.labels().get(ASSIGNED_TO_LABEL) == Some(&label)
        && vm.annotations().contains_key(CLAIMED_AT_ANNOTATION);
    let vm = if labelled {
        vm.clone()
    } else {
        match label_member(actor, claim, vm, &label).await {
            Ok(vm) => vm,
            Err(e @ Error::Rejected { .. }) => return Err(e),
            Err(e) => {
                // The patch may have landed even though its answer was lost (an API server
                // restart): look before reporting a failure.
                let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
                match vms.get(&member).await {
                    Ok(now) if now.labels().get(ASSIGNED_TO_LABEL) == Some(&label) => now,
                    _ => {
                        return Err(Error::Partial {
                            message: format!(
                                "{assignee} holds the Lease on {member}, but labelling the VM failed; the Lease is kept so nobody else gets a half-configured desktop"
                            ),
                            suggestion: format!(
                                "fix the cause and run the same assign again (it resumes with {member}), or `corral-vdi unassign {member}` to back out"
                            ),
                            source: Box::new(e),
                        });
                    }
                }
            }
        }
    };
    let power = start(client, namespace, &vm).await.map_err(|e| Error::Partial {
        message: format!("{member} is assigned to {assignee} (Lease and label), but starting the VM failed"),
        suggestion: format!("fix the cause and run the same assign again, or `corral-vdi unassign {member}` to back out"),
        source: Box::new(e),
    })?;
    Ok(claimed(power))
}

/// Sets the assigned-to label and claimed-at annotation with the VM's resourceVersion as a
/// precondition. On a conflict it reads the VM again: a label someone else wrote meanwhile is
/// reported as a conflict (never overwritten; the Lease is kept, so the member shows as
/// "conflict"), otherwise it checks that the Lease is still the assignee's and tries again.
async fn label_member(
    actor: &Actor,
    claim: &Claim<'_>,
    vm: &VirtualMachine,
    label: &str,
) -> Result<VirtualMachine> {
    let (client, namespace, assignee, clock) = (
        actor.client(),
        claim.namespace,
        claim.assignee,
        actor.clock(),
    );
    let member = vm.name_any();
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    let mut current = vm.clone();
    for _ in 0..5 {
        if let Some(foreign) = current
            .labels()
            .get(ASSIGNED_TO_LABEL)
            .filter(|l| !l.is_empty() && l.as_str() != label)
        {
            return Err(Error::rejected(
                ErrorKind::Conflict,
                format!(
                    "conflict on {member}: while {assignee} was claiming it, its assigned-to label \
                     was set to {} by another tool; {assignee} holds the Lease, so {member} shows \
                     as \"conflict\" and is not handed out",
                    label_holder(foreign)
                ),
                format!(
                    "an administrator ({ADMIN_GROUP}) resolves it with `corral-vdi unassign \
                     {member} -n {namespace}`; then claim again"
                ),
            ));
        }
        let claimed_at = crate::clock::annotation_time(clock.now());
        let patch = json!({ "metadata": {
            "resourceVersion": current.resource_version(),
            "labels": { ASSIGNED_TO_LABEL: label },
            "annotations": { CLAIMED_AT_ANNOTATION: claimed_at },
        } });
        match vms
            .patch(&member, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(vm) => return Ok(vm),
            Err(e) if is_status(&e, 409) => {
                current = vms
                    .get(&member)
                    .await
                    .map_err(|e| Error::kube(format!("re-read VirtualMachine {member}"), e))?;
                let lease = crate::lease::get(client, namespace, &lease_name(&member)).await?;
                let held = lease.map(|l| crate::lease::lease_view(&l, clock.now()));
                if !held.is_some_and(|h| h.active && h.holder.as_deref() == Some(assignee)) {
                    return Err(Error::Refused {
                        message: format!(
                            "{assignee} lost the claim on {member} while labelling it"
                        ),
                        suggestion: Some("run assign again to get another member".into()),
                    });
                }
            }
            Err(e) => {
                return Err(Error::kube(
                    format!("label VirtualMachine {member} as assigned to {assignee}"),
                    e,
                ));
            }
        }
    }
    Err(Error::Refused {
        message: format!("{member} kept changing while it was being labelled"),
        suggestion: Some("run assign again".into()),
    })
}
