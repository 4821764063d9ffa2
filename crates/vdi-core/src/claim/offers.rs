//! What each member's row offers the identity a cluster link acts as ([`MemberOffers`]): the
//! claim rules of [`super::rules`] (who may release what, SPEC "Unassign") and who may connect
//! (with a broker, access follows the claim: its holder, and administrators; without one, RBAC
//! decides and someone else's desktop is a take-over to confirm), judged once here for the app's
//! rows and dialogs. Pure: no request.

use super::ownership::{may_take, own_member, owners_count};
use super::rules::{conflict_error, may_release};
use crate::names::ADMIN_GROUP;
use crate::policy::Assignment;
use crate::state::offers::{MemberOffers, Offer, PoolOffer, ReleaseOffer};
use crate::state::{ClaimSide, MemberState, MemberView, PoolView};

/// Who looks at the views, and what decides what they may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Viewer {
    /// The identity, as the cluster names it (SelfSubjectReview).
    pub username: String,
    /// A member of [`ADMIN_GROUP`].
    pub admin: bool,
    /// The cluster's guard enforces the claim rules ([`crate::guard::GuardStatus::enforced`]).
    pub guarded: bool,
    /// Who does the cluster's half of claims (with a broker, access follows the claim).
    pub side: ClaimSide,
}

/// What `member`'s row offers `viewer`.
pub fn offers(member: &MemberView, viewer: &Viewer) -> MemberOffers {
    MemberOffers {
        release: release_offer(member, viewer),
        connect: connect_offer(member, viewer),
    }
}

/// Fills every member's [`MemberView::offers`] in `pool` for `viewer`, and what "Get a
/// desktop" offers them of it ([`PoolView::offer`]).
pub fn fill(pool: &mut PoolView, viewer: &Viewer) {
    for member in &mut pool.members {
        member.offers = Some(offers(member, viewer));
    }
    pool.offer = Some(pool_offer(pool, &viewer.username));
}

/// What a claim of `who` may take from `pool`: its free members, kept in a dedicated pool to
/// their own or the unowned ones ([`super::ownership`], as `assign` keeps them).
pub fn pool_offer(pool: &PoolView, who: &str) -> PoolOffer {
    let dedicated = owners_count(
        pool.policy
            .as_ref()
            .map(|p| p.assignment == Assignment::Dedicated),
    );
    let own = dedicated.then(|| own_member(&pool.members, who)).flatten();
    let free = pool
        .members
        .iter()
        .filter(|m| m.claimable && (!dedicated || may_take(m, own)))
        .count();
    PoolOffer {
        free: u32::try_from(free).unwrap_or(u32::MAX),
        yours: own.map(|m| m.name.clone()),
    }
}

/// Release… (or Force release…) for a member someone holds, by [`may_release`]; with the guard,
/// a label-only member only for the person it names or an administrator, and someone else's
/// live claim only for an administrator.
fn release_offer(member: &MemberView, viewer: &Viewer) -> Option<ReleaseOffer> {
    // A free member has no holder: nothing to release.
    let holder = member.holder.as_deref().filter(|h| !h.is_empty())?;
    let caller = viewer.username.as_str();
    if member.state == MemberState::Conflict && !viewer.admin {
        let refusal = conflict_error(member);
        return Some(ReleaseOffer {
            force: false,
            offer: Offer::no(format!(
                "{refusal}; {}",
                refusal.suggestion().unwrap_or_default()
            )),
        });
    }
    // With a broker, members' labels are the broker's and administrators' to write (its
    // admission policy, and users hold no right to patch VMs).
    if member.state == MemberState::AssignedLegacy
        && viewer.side == ClaimSide::Broker
        && !viewer.admin
    {
        return Some(ReleaseOffer {
            force: false,
            offer: Offer::no(format!(
                "{} is assigned to {holder} by its label alone, which only an administrator \
                 ({ADMIN_GROUP}) removes on a cluster with the broker: ask one to release it.",
                member.name
            )),
        });
    }
    let offer = match may_release(member, caller, viewer.admin, false, None) {
        Ok(_) => {
            let labelled_for_someone_else = member.state == MemberState::AssignedLegacy
                && member.label_holder.as_deref() != Some(caller);
            if labelled_for_someone_else && viewer.guarded && !viewer.admin {
                Offer::no(format!(
                    "Assigned to {holder} by label; with the cluster's guard only {holder} or an \
                     administrator ({ADMIN_GROUP}) may release it."
                ))
            } else {
                Offer::yes()
            }
        }
        Err(refusal) => {
            // Someone else's live claim: a force release, which says whose claim it ends.
            let offer = if viewer.guarded && !viewer.admin {
                Offer::no(format!(
                    "{refusal}; with the cluster's guard only an administrator ({ADMIN_GROUP}) \
                     takes someone else's desktop back"
                ))
            } else {
                Offer {
                    allowed: true,
                    reason: Some(refusal.to_string()),
                    ask: None,
                }
            };
            return Some(ReleaseOffer { force: true, offer });
        }
    };
    Some(ReleaseOffer {
        force: false,
        offer,
    })
}

/// Connect… on a running member ([`may_connect`]); none on a member that does not run.
fn connect_offer(member: &MemberView, viewer: &Viewer) -> Option<Offer> {
    (member.power == "Running").then(|| may_connect(member, viewer))
}

/// Whether `viewer` may connect to `member` (a console, a forward, RDP, SSH), whatever its
/// power: with a broker only its holder (and an administrator, who is asked first) may;
/// without one, RBAC decides and someone else's desktop is a take-over to confirm.
pub fn may_connect(member: &MemberView, viewer: &Viewer) -> Offer {
    let name = &member.name;
    let caller = viewer.username.as_str();
    // Someone else's: its holder, or in a conflict whom its label names.
    let other = [
        member.holder.as_deref(),
        (member.state == MemberState::Conflict)
            .then_some(member.label_holder.as_deref())
            .flatten(),
    ]
    .into_iter()
    .flatten()
    .find(|h| !h.is_empty() && *h != caller);
    let take_over = |holder: &str| Offer {
        allowed: true,
        reason: None,
        ask: Some(format!(
            "{name} is {holder}'s desktop. Connect anyway? They may be using it: what you do on \
             its screen, they see."
        )),
    };
    match (viewer.side, other) {
        (ClaimSide::Client, None) => Offer::yes(),
        (ClaimSide::Client, Some(holder)) => take_over(holder),
        (ClaimSide::Broker, Some(holder)) if viewer.admin => take_over(holder),
        (ClaimSide::Broker, Some(holder)) => Offer::no(format!(
            "Only {holder}, who holds {name}, can connect to it: with the cluster's broker, \
             access follows the claim. You may claim a free desktop of your own."
        )),
        (ClaimSide::Broker, None)
            if member.state == MemberState::AssignedLegacy && !viewer.admin =>
        {
            Offer::no(format!(
                "{name} is assigned to you by its label alone (a tool that does not claim wrote \
                 it): with the cluster's broker, a console and ports open only to the holder of \
                 a claim. Get a desktop for one of your own, and ask an administrator to release \
                 {name}."
            ))
        }
        (ClaimSide::Broker, None) if viewer.admin || member.holder.as_deref() == Some(caller) => {
            Offer::yes()
        }
        (ClaimSide::Broker, None) => Offer::no(format!(
            "{name} is not yours: with the cluster's broker only the person who holds a desktop \
             can connect to it. Get a desktop to have one of your own."
        )),
    }
}

#[cfg(test)]
mod tests;
