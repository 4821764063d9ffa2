//! A claim from start to end: it labels and starts the member and unassign backs it all out,
//! every member-state row as a starting point for assign and unassign, and one person getting
//! their desktop back unless they ask for another.

use std::time::Duration;

use corral_tests::{actor_as, client_as, member_state, namespace};
use jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use vdi_core::claim::{ClaimOptions, PowerAction, assign};
use vdi_core::error::ErrorKind;
use vdi_core::names::{ASSIGNED_TO_LABEL, CLAIMED_AT_ANNOTATION};
use vdi_core::resources::VirtualMachine;
use vdi_core::state::MemberState;

use crate::{
    claim, claim_lasting, go_cli_assign, holders, pool, refused, release, unassign_label_only,
    wait_power,
};

#[tokio::test]
async fn a_claim_labels_starts_and_unassign_backs_it_all_out() {
    let ns = namespace("life").await;
    let admin = client_as("admin").await;
    let alice = actor_as("alice").await;
    let bob = actor_as("bob").await;
    pool(&admin, &ns, "dev", 1).await;

    let c = claim(&alice, &ns, "dev", "alice").await.unwrap();
    assert_eq!(
        (c.member.as_str(), c.resumed, c.power.clone()),
        ("dev-1", false, PowerAction::Started)
    );
    wait_power(&admin, &ns, "dev-1", "Running").await;
    let vm = Api::<VirtualMachine>::namespaced(admin.clone(), &ns)
        .get("dev-1")
        .await
        .unwrap();
    assert_eq!(
        vm.metadata.labels.as_ref().unwrap()[ASSIGNED_TO_LABEL],
        "alice"
    );
    let claimed_at: Timestamp = vm.metadata.annotations.as_ref().unwrap()[CLAIMED_AT_ANNOTATION]
        .parse()
        .unwrap();
    assert!((Timestamp::now().duration_since(claimed_at)).abs() < SignedDuration::from_secs(30));
    assert_eq!(
        member_state(&admin, &ns, "dev-1").await,
        MemberState::Assigned
    );

    // The holder may re-run assign: idempotent.
    let again = claim(&alice, &ns, "dev", "alice").await.unwrap();
    assert!(again.resumed && again.member == "dev-1");
    assert!(matches!(again.power, PowerAction::AlreadyRunning(_)));
    // Nobody else gets it, and nothing moves.
    let before = holders(&admin, &ns, "dev").await;
    let err = claim(&bob, &ns, "dev", "bob").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Refused, "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "pool has no free members: its 1 member is taken in \"dev\" (namespace \"{ns}\"): \
             1 assigned"
        )
    );
    // bob cannot make pools: his way out is another pool, the holder or an administrator.
    assert_eq!(
        err.suggestion().as_deref(),
        Some(
            "try another pool, ask a holder to release their member, or ask an administrator \
             (corral-vdi:admins) for a bigger pool"
        )
    );
    assert_eq!(holders(&admin, &ns, "dev").await, before);

    // Only the holder may release an active Lease.
    let err = release(&bob, &ns, "dev-1").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Refused);
    let text = err.to_string();
    assert!(
        text.contains("claimed by alice until") && text.contains("only alice can release it"),
        "{text}"
    );
    assert_eq!(holders(&admin, &ns, "dev").await, before);

    let released = release(&alice, &ns, "dev-1").await.unwrap();
    assert_eq!(released.previous_holder.as_deref(), Some("alice"));
    assert!(released.lease_released && released.label_removed && !released.forced);
    assert_eq!(released.power, PowerAction::Stopped);
    // Released again at once, while the VM may still be stopping: nothing left to release,
    // and no KubeVirt refusal of a second stop.
    let again = release(&alice, &ns, "dev-1").await.unwrap();
    assert_eq!(again.previous_holder, None);
    assert!(!again.lease_released && !again.label_removed);
    assert!(
        matches!(
            again.power,
            PowerAction::AlreadyStopping | PowerAction::AlreadyStopped
        ),
        "{:?}",
        again.power
    );
    let vm = Api::<VirtualMachine>::namespaced(admin.clone(), &ns)
        .get("dev-1")
        .await
        .unwrap();
    assert!(
        !vm.metadata.labels.unwrap().contains_key(ASSIGNED_TO_LABEL),
        "label removed, not blanked"
    );
    assert!(
        !vm.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(CLAIMED_AT_ANNOTATION)
    );
    wait_power(&admin, &ns, "dev-1", "Stopped").await;
    assert_eq!(member_state(&admin, &ns, "dev-1").await, MemberState::Free);
}

#[tokio::test]
async fn every_state_row_as_a_starting_point() {
    let ns = namespace("rows").await;
    let admin = client_as("admin").await;
    let admin_actor = actor_as("admin").await;
    let bob = actor_as("bob").await;

    // claiming / stuck: bob's active Lease, no label. Others skip it; bob resumes it.
    pool(&admin, &ns, "claiming", 1).await;
    claim(&admin_actor, &ns, "claiming", "bob").await.unwrap();
    unassign_label_only(&admin, &ns, "claiming-1").await;
    assert_eq!(
        member_state(&admin, &ns, "claiming-1").await,
        MemberState::Claiming
    );
    refused(claim(&admin_actor, &ns, "claiming", "alice").await);
    let resumed = claim(&bob, &ns, "claiming", "bob").await.unwrap();
    assert!(resumed.resumed);
    assert_eq!(
        member_state(&admin, &ns, "claiming-1").await,
        MemberState::Assigned
    );

    // assigned (legacy, label-only): not claimable. With the guard, only the person the label
    // names or an administrator may release it.
    pool(&admin, &ns, "legacy", 1).await;
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), &ns);
    let patch = json!({ "metadata": { "labels": { ASSIGNED_TO_LABEL: "carol" } } });
    vms.patch("legacy-1", &PatchParams::default(), &Patch::Merge(patch))
        .await
        .unwrap();
    assert_eq!(
        member_state(&admin, &ns, "legacy-1").await,
        MemberState::AssignedLegacy
    );
    refused(claim(&admin_actor, &ns, "legacy", "alice").await);
    let before = holders(&admin, &ns, "legacy").await;
    let err = release(&bob, &ns, "legacy-1").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
    assert!(
        err.to_string()
            .contains("corral-vdi guard: legacy-1 is assigned to carol"),
        "{err}"
    );
    let hint = err.suggestion().unwrap_or_default();
    assert!(
        hint.contains("corral-vdi guard refused it") && hint.contains("corral-vdi:admins"),
        "the fix names who may, not RBAC: {hint}"
    );
    assert_eq!(holders(&admin, &ns, "legacy").await, before);
    let r = release(&admin_actor, &ns, "legacy-1").await.unwrap();
    assert_eq!(
        (r.previous_holder.as_deref(), r.lease_released),
        (Some("carol"), false)
    );
    assert_eq!(
        member_state(&admin, &ns, "legacy-1").await,
        MemberState::Free
    );

    // free (stale lease) and assigned, lease expired.
    pool(&admin, &ns, "stale", 2).await;
    claim_lasting(&admin_actor, &ns, "stale", "carol", 1).await;
    claim_lasting(&admin_actor, &ns, "stale", "dave", 1).await;
    let carols = holders(&admin, &ns, "stale")
        .await
        .into_iter()
        .find(|(_, (h, _))| h.as_deref() == Some("carol"))
        .unwrap()
        .0;
    unassign_label_only(&admin, &ns, &carols).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let daves = if carols == "stale-1" {
        "stale-2"
    } else {
        "stale-1"
    };
    assert_eq!(
        member_state(&admin, &ns, &carols).await,
        MemberState::FreeStaleLease
    );
    assert_eq!(
        member_state(&admin, &ns, daves).await,
        MemberState::AssignedLeaseExpired
    );
    // With the guard, an ordinary user skips carol's expired claim and says so; nothing moves.
    let before = holders(&admin, &ns, "stale").await;
    let text = refused(claim(&bob, &ns, "stale", "bob").await);
    assert!(
        text.contains("1 member's claim expired: an administrator can recover it"),
        "{text}"
    );
    assert_eq!(holders(&admin, &ns, "stale").await, before);
    // An administrator takes the stale free one over (for bob); the expired-but-labelled
    // member is not claimable.
    let taken = claim(&admin_actor, &ns, "stale", "bob").await.unwrap();
    assert_eq!(taken.member, carols);
    refused(claim(&admin_actor, &ns, "stale", "erin").await);
    // An administrator recovers the expired member; then it is claimable again.
    let r = release(&admin_actor, &ns, daves).await.unwrap();
    assert_eq!(
        (r.previous_holder.as_deref(), r.lease_released, r.forced),
        (Some("dave"), true, false)
    );
    assert_eq!(
        claim(&admin_actor, &ns, "stale", "erin")
            .await
            .unwrap()
            .member,
        daves
    );

    // free: unassign has nothing to release and still says so plainly.
    pool(&admin, &ns, "free", 1).await;
    let r = release(&bob, &ns, "free-1").await.unwrap();
    assert_eq!(
        (r.previous_holder, r.lease_released, r.label_removed),
        (None, false, false)
    );

    // Bad input changes nothing.
    let err = claim(&admin_actor, &ns, "no-such-pool", "alice")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    assert!(
        err.to_string().contains("has no members in namespace"),
        "{err}"
    );
    let err = claim(&admin_actor, &ns, "Bad_Pool", "alice")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    let err = claim(&admin_actor, &ns, "free", " ").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    assert_eq!(member_state(&admin, &ns, "free-1").await, MemberState::Free);
    let err = release(&admin_actor, &ns, "nope").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert!(
        err.to_string().starts_with(&format!(
            "no such member: namespace \"{ns}\" has no VirtualMachine \"nope\": nothing to release"
        )),
        "{err}"
    );
}

#[tokio::test]
async fn one_person_gets_their_desktop_back_unless_they_ask_for_another() {
    let ns = namespace("onepp").await;
    let admin = client_as("admin").await;
    let admin_actor = actor_as("admin").await;
    let alice = actor_as("alice").await;
    pool(&admin, &ns, "op", 3).await;
    // alice holds op-2 the Phase 1 way (label only): "Get a desktop" gives it back, with a Lease.
    go_cli_assign(&admin, &ns, "op-2", "alice").await;
    let c = claim(&alice, &ns, "op", "alice").await.unwrap();
    assert_eq!((c.member.as_str(), c.resumed), ("op-2", true));
    assert_eq!(
        member_state(&admin, &ns, "op-2").await,
        MemberState::Assigned
    );
    assert_eq!(
        holders(&admin, &ns, "op").await["op-2"],
        (Some("alice".into()), Some("alice".into()))
    );
    // Again: the same one.
    assert_eq!(
        claim(&alice, &ns, "op", "alice").await.unwrap().member,
        "op-2"
    );
    // bob may not assign for alice (the guard's rule), not even "resume" hers: refused before
    // anything, and nothing moved.
    let before = holders(&admin, &ns, "op").await;
    for another in [false, true] {
        let options = ClaimOptions {
            another,
            ..ClaimOptions::default()
        };
        let err = assign(&actor_as("bob").await, &ns, "op", "alice", &options)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
        assert!(
            err.to_string()
                .contains("bob may not assign desktops to alice"),
            "{err}"
        );
    }
    assert_eq!(holders(&admin, &ns, "op").await, before);
    // An administrator asks for a second one explicitly.
    let second = assign(
        &admin_actor,
        &ns,
        "op",
        "alice",
        &ClaimOptions {
            another: true,
            ..ClaimOptions::default()
        },
    )
    .await
    .unwrap();
    assert_ne!(second.member, "op-2");
    assert!(!second.resumed);
}
