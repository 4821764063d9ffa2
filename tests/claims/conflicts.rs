//! Label and Lease that disagree: a conflict only an administrator resolves, a label-only
//! writer racing a claim always leaves the conflict visible, and an administrator's force
//! release recorded in an Event.

use std::time::Duration;

use corral_tests::{actor_as, client_as, member_state, namespace};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use vdi_core::claim::{UnassignOptions, unassign};
use vdi_core::error::ErrorKind;
use vdi_core::names::lease_name;
use vdi_core::resources::VirtualMachine;
use vdi_core::scope::Scope;
use vdi_core::state::MemberState;
use vdi_core::watch::list_pools;

use crate::{
    claim, clock, go_cli_assign, holders, pool, refused, release, unassign_label_only, wait_power,
};

#[tokio::test]
async fn label_and_lease_that_disagree_are_a_conflict_only_an_administrator_resolves() {
    let ns = namespace("conflict").await;
    let admin = client_as("admin").await;
    let admin_actor = actor_as("admin").await;
    let alice = actor_as("alice").await;
    let bob = actor_as("bob").await;
    pool(&admin, &ns, "cf", 1).await;
    claim(&alice, &ns, "cf", "alice").await.unwrap();
    // The Go CLI's unassign (label and annotation only; our Lease stays), then its assign to
    // bob: the VM says bob, the Lease says alice.
    unassign_label_only(&admin, &ns, "cf-1").await;
    go_cli_assign(&admin, &ns, "cf-1", "bob").await;

    let pools = list_pools(&admin, &Scope::Namespace(ns.clone()), &clock(&admin).await)
        .await
        .unwrap();
    let m = &pools[0].members[0];
    assert_eq!(m.state, MemberState::Conflict);
    assert!(!m.claimable);
    assert_eq!(
        (m.holder.as_deref(), m.label_holder.as_deref()),
        (Some("alice"), Some("bob")),
        "both names shown"
    );
    assert_eq!(pools[0].counts.claimed, 1);

    // Never "resumed" over, nobody gets it, nothing moves.
    let before = holders(&admin, &ns, "cf").await;
    let err = claim(&alice, &ns, "cf", "alice").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    assert!(
        err.to_string().contains("its assigned-to label names bob")
            && err.to_string().contains("held by alice"),
        "{err}"
    );
    refused(claim(&bob, &ns, "cf", "bob").await);
    // Neither the Lease holder nor the label's user resolves it; an administrator does.
    for who in [&alice, &bob] {
        let err = release(who, &ns, "cf-1").await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
        assert!(err.suggestion().unwrap().contains("administrator"), "{err}");
    }
    assert_eq!(holders(&admin, &ns, "cf").await, before);
    let r = release(&admin_actor, &ns, "cf-1").await.unwrap();
    assert!(r.lease_released && r.label_removed && !r.forced);
    assert_eq!(member_state(&admin, &ns, "cf-1").await, MemberState::Free);
    assert_eq!(claim(&bob, &ns, "cf", "bob").await.unwrap().member, "cf-1");
}

#[tokio::test]
async fn a_label_only_writer_racing_a_claim_always_leaves_the_conflict_visible() {
    let ns = namespace("lrace").await;
    let admin = client_as("admin").await;
    let alice = actor_as("alice").await;
    pool(&admin, &ns, "lr", 1).await;
    // One running member, as the issue saw it.
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), &ns);
    vms.patch(
        "lr-1",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "runStrategy": "Always" } })),
    )
    .await
    .unwrap();
    wait_power(&admin, &ns, "lr-1", "Running").await;
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &ns);
    let (mut won, mut conflicts, mut lost) = (0, 0, 0);
    for round in 0..50u64 {
        // Varied offsets: the writer starts 0..=48 ms after the claim (a claim is a few
        // round trips of a few milliseconds each).
        let offset = Duration::from_millis(round * 7 % 49);
        let writer = {
            let admin = admin.clone();
            let ns = ns.clone();
            async move {
                tokio::time::sleep(offset).await;
                go_cli_assign(&admin, &ns, "lr-1", "bob").await;
            }
        };
        let (result, ()) = tokio::join!(claim(&alice, &ns, "lr", "alice"), writer);
        let state = member_state(&admin, &ns, "lr-1").await;
        match result {
            Ok(c) => {
                won += 1;
                assert!(!c.resumed);
                assert_eq!(
                    state,
                    MemberState::Conflict,
                    "round {round}: alice was told assigned, bob's label landed after: the conflict must show"
                );
            }
            Err(e) if e.kind() == ErrorKind::Conflict => {
                conflicts += 1;
                assert_eq!(state, MemberState::Conflict, "round {round}: {e}");
            }
            Err(e) => {
                lost += 1;
                assert!(
                    e.to_string().contains("pool has no free members"),
                    "round {round}: {e}"
                );
                assert_eq!(state, MemberState::AssignedLegacy, "round {round}");
            }
        }
        // Reset for the next round.
        unassign_label_only(&admin, &ns, "lr-1").await;
        let _ = leases
            .delete(&lease_name("lr-1"), &Default::default())
            .await;
    }
    eprintln!(
        "50 rounds: alice told assigned {won}, conflict reported {conflicts}, bob first {lost}"
    );
}

#[tokio::test]
async fn an_administrator_force_releases_and_an_event_records_it() {
    let ns = namespace("force").await;
    let admin = client_as("admin").await;
    let admin_actor = actor_as("admin").await;
    let alice = actor_as("alice").await;
    let bob = actor_as("bob").await;
    pool(&admin, &ns, "fr", 1).await;
    claim(&bob, &ns, "fr", "bob").await.unwrap();
    // alice may not, even with force: with the guard enforced she is refused up front, and
    // nothing moves.
    let before = holders(&admin, &ns, "fr").await;
    let err = unassign(&alice, &ns, "fr-1", &UnassignOptions { force: true })
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
    assert_eq!(
        err.to_string(),
        "alice may not force-release fr-1 from bob: with the cluster's Corral VDI guard only \
         administrators (corral-vdi:admins) release someone else's desktop; nothing was changed"
    );
    assert!(
        err.suggestion()
            .is_some_and(|s| s.starts_with("ask bob to release it")),
        "{err:?}"
    );
    assert_eq!(holders(&admin, &ns, "fr").await, before);
    // Without force an administrator is refused too, with the way to force it.
    let err = release(&admin_actor, &ns, "fr-1").await.unwrap_err();
    assert!(err.suggestion().unwrap().contains("--force"), "{err:?}");
    let r = unassign(&admin_actor, &ns, "fr-1", &UnassignOptions { force: true })
        .await
        .unwrap();
    assert!(r.forced && r.lease_released);
    assert_eq!(r.previous_holder.as_deref(), Some("bob"));
    assert_eq!(member_state(&admin, &ns, "fr-1").await, MemberState::Free);
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(admin.clone(), &ns);
    let list = events
        .list(&ListParams::default().fields("involvedObject.name=fr-1"))
        .await
        .unwrap();
    let event = list
        .items
        .iter()
        .find(|e| e.reason.as_deref() == Some(vdi_core::claim::FORCE_RELEASE_REASON))
        .expect("a ForceReleased event on the VM");
    // The audit note (vdi_core::audit): the facts, then the sentence.
    let message = event.message.clone().unwrap_or_default();
    let (facts, text) = vdi_core::audit::parse_note(&message);
    let facts = facts.expect("the note starts with the facts");
    assert_eq!(
        (
            facts.user.as_deref(),
            facts.by.as_deref(),
            facts.why.as_deref()
        ),
        (Some("bob"), Some("admin"), Some("force"))
    );
    assert!(
        text.starts_with("admin force-released fr-1 from bob at "),
        "{message}"
    );
}
