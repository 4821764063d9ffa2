//! What a member's row offers a viewer: release and force release by the claim rules, and
//! Connect with and without a broker; on members built by hand as the rules' tests build them.

use super::{Viewer, offers};
use crate::claim::rules::tests::{free, lease, member, unreadable};
use crate::state::offers::{Offer, ReleaseOffer};
use crate::state::{ClaimSide, MemberState, MemberView};

fn viewer(username: &str, admin: bool, guarded: bool, side: ClaimSide) -> Viewer {
    Viewer {
        username: username.into(),
        admin,
        guarded,
        side,
    }
}

fn alice() -> Viewer {
    viewer("alice", false, true, ClaimSide::Client)
}

fn running(mut m: MemberView) -> MemberView {
    m.power = "Running".into();
    m
}

fn alices() -> MemberView {
    member(
        "m-1",
        MemberState::Assigned,
        Some(lease(Some("alice"), true)),
        Some("alice"),
    )
}

#[test]
fn a_free_member_offers_no_release_and_the_holder_releases_her_own() {
    assert_eq!(offers(&free("m-1"), &alice()).release, None);
    assert_eq!(
        offers(&alices(), &alice()).release,
        Some(ReleaseOffer {
            force: false,
            offer: Offer::yes()
        })
    );
}

#[test]
fn someone_elses_live_claim_is_a_force_release_for_administrators_only_with_the_guard() {
    let bob = viewer("bob", false, true, ClaimSide::Client);
    let offer = offers(&alices(), &bob).release.unwrap();
    assert!(offer.force && !offer.offer.allowed, "{offer:?}");
    let reason = offer.offer.reason.unwrap();
    assert!(
        reason.contains("only alice can release it")
            && reason.contains("only an administrator (corral-vdi:admins)"),
        "{reason}"
    );
    // Words that stay on screen: the exact expiry, never "in 59m" going stale.
    let admin = viewer("admin", true, true, ClaimSide::Client);
    let offer = offers(&alices(), &admin).release.unwrap();
    assert!(offer.force && offer.offer.allowed, "{offer:?}");
    let reason = offer.offer.reason.unwrap();
    assert!(
        reason.contains("claimed by alice until 2026-12-01 13:00:00 UTC; only alice"),
        "{reason}"
    );
    // Without the guard, RBAC decides (Permissions::force_release): offered, with whose it is.
    let unguarded = viewer("bob", false, false, ClaimSide::Client);
    let offer = offers(&alices(), &unguarded).release.unwrap();
    assert!(offer.force && offer.offer.allowed, "{offer:?}");
}

#[test]
fn an_unreadable_claim_may_be_live_and_a_conflict_is_an_administrators() {
    let unread = member(
        "m-1",
        MemberState::Unreadable,
        Some(unreadable("bob")),
        None,
    );
    let offer = offers(&unread, &alice()).release.unwrap();
    assert!(offer.force, "{offer:?}");
    assert!(
        offers(&unread, &viewer("bob", false, true, ClaimSide::Client))
            .release
            .is_some_and(|o| !o.force && o.offer.allowed)
    );
    let conflict = member(
        "m-1",
        MemberState::Conflict,
        Some(lease(Some("alice"), true)),
        Some("bob"),
    );
    let offer = offers(&conflict, &alice()).release.unwrap();
    assert!(!offer.offer.allowed, "{offer:?}");
    assert!(offer.offer.reason.unwrap().contains("in conflict"));
    let admin = viewer("admin", true, true, ClaimSide::Client);
    assert!(offers(&conflict, &admin).release.unwrap().offer.allowed);
}

#[test]
fn with_the_guard_a_label_only_member_is_its_persons_or_an_administrators() {
    let legacy = member("m-1", MemberState::AssignedLegacy, None, Some("alice"));
    assert!(offers(&legacy, &alice()).release.unwrap().offer.allowed);
    let bob = viewer("bob", false, true, ClaimSide::Client);
    let offer = offers(&legacy, &bob).release.unwrap();
    assert!(!offer.offer.allowed);
    assert!(
        offer
            .offer
            .reason
            .unwrap()
            .contains("Assigned to alice by label")
    );
    let unguarded = viewer("bob", false, false, ClaimSide::Client);
    assert!(offers(&legacy, &unguarded).release.unwrap().offer.allowed);
}

#[test]
fn connect_is_offered_on_running_members_and_asks_before_someone_elses() {
    assert_eq!(offers(&alices(), &alice()).connect, None, "not running");
    let mine = running(alices());
    assert_eq!(offers(&mine, &alice()).connect, Some(Offer::yes()));
    let bob = viewer("bob", false, true, ClaimSide::Client);
    let ask = offers(&mine, &bob).connect.unwrap();
    assert!(ask.allowed);
    assert!(
        ask.ask
            .unwrap()
            .starts_with("m-1 is alice's desktop. Connect anyway?")
    );
    // In a conflict the other one is whom the label names when the Lease is yours.
    let conflict = running(member(
        "m-1",
        MemberState::Conflict,
        Some(lease(Some("alice"), true)),
        Some("bob"),
    ));
    assert!(
        offers(&conflict, &alice())
            .connect
            .unwrap()
            .ask
            .unwrap()
            .contains("bob's desktop")
    );
}

#[test]
fn with_a_broker_only_the_holder_and_administrators_connect() {
    let mine = running(alices());
    let on_broker = |name: &str, admin: bool| viewer(name, admin, true, ClaimSide::Broker);
    assert_eq!(
        offers(&mine, &on_broker("alice", false)).connect,
        Some(Offer::yes())
    );
    let bobs = offers(&mine, &on_broker("bob", false)).connect.unwrap();
    assert!(!bobs.allowed && bobs.ask.is_none());
    assert!(
        bobs.reason
            .unwrap()
            .starts_with("Only alice, who holds m-1, can connect to it"),
    );
    let admins = offers(&mine, &on_broker("admin", true)).connect.unwrap();
    assert!(admins.allowed && admins.ask.is_some());
    // A free member that runs (the warm one) is nobody's to connect to but an administrator's.
    let warm = running(free("m-2"));
    assert!(
        !offers(&warm, &on_broker("bob", false))
            .connect
            .unwrap()
            .allowed
    );
    assert!(
        offers(&warm, &on_broker("admin", true))
            .connect
            .unwrap()
            .allowed
    );
    assert_eq!(
        offers(&warm, &viewer("bob", false, true, ClaimSide::Client)).connect,
        Some(Offer::yes())
    );
}

#[test]
fn with_a_broker_a_label_only_desktop_is_neither_connected_to_nor_released_by_its_user() {
    let labelled = running(member(
        "m-3",
        MemberState::AssignedLegacy,
        None,
        Some("alice"),
    ));
    let on_broker = |name: &str, admin: bool| viewer(name, admin, true, ClaimSide::Broker);
    let offered = offers(&labelled, &on_broker("alice", false));
    let connect = offered.connect.unwrap();
    assert!(!connect.allowed, "{connect:?}");
    assert!(
        connect
            .reason
            .unwrap()
            .contains("open only to the holder of a claim"),
    );
    let release = offered.release.unwrap();
    assert!(!release.force && !release.offer.allowed, "{release:?}");
    assert!(
        release
            .offer
            .reason
            .unwrap()
            .contains("only an administrator (corral-vdi:admins) removes"),
    );
    // An administrator does both; without a broker, alice does both.
    let admins = offers(&labelled, &on_broker("admin", true));
    assert!(admins.connect.unwrap().allowed && admins.release.unwrap().offer.allowed);
    let no_broker = offers(&labelled, &viewer("alice", false, true, ClaimSide::Client));
    assert_eq!(no_broker.connect, Some(Offer::yes()));
    assert!(no_broker.release.unwrap().offer.allowed);
}

/// A dedicated pool `d` of three stopped members, `d-1` bob's, `d-2` nobody's, `d-3` alice's.
fn dedicated_pool(assignment: &str) -> crate::state::PoolView {
    use crate::names::{OWNER_ANNOTATION, POOL_LABEL};
    use crate::policy::DesktopPool;
    use crate::resources::VirtualMachine;
    let vm = |name: &str, owner: Option<&str>| -> VirtualMachine {
        let annotations = owner.map_or(
            serde_json::json!({}),
            |o| serde_json::json!({ OWNER_ANNOTATION: o }),
        );
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": { "name": name, "namespace": "ns", "labels": { POOL_LABEL: "d" },
                          "annotations": annotations },
            "spec": {}, "status": { "printableStatus": "Stopped" }
        }))
        .unwrap()
    };
    let vms = [
        vm("d-1", Some("bob")),
        vm("d-2", None),
        vm("d-3", Some("alice")),
    ];
    let pool: DesktopPool = serde_json::from_value(serde_json::json!({
        "apiVersion": "corral.dev/v1alpha1", "kind": "DesktopPool",
        "metadata": { "name": "d", "namespace": "ns" },
        "spec": { "golden": "gold", "size": 3, "assignment": assignment }
    }))
    .unwrap();
    let now = "2026-12-04T12:00:00Z".parse().unwrap();
    let mut pools = crate::state::group_pools_with(&vms, &[], [&pool], now, ClaimSide::Broker);
    pools.remove(0)
}

#[test]
fn get_a_desktop_offers_a_dedicated_pool_s_own_or_unowned_members_only() {
    let pool = dedicated_pool("dedicated");
    let offer = |who: &str| {
        let o = super::pool_offer(&pool, who);
        (o.free, o.yours)
    };
    assert_eq!(offer("alice"), (1, Some("d-3".into())), "her own only");
    assert_eq!(offer("carol"), (1, None), "the unowned one");
    // Floating: owner marks left from a dedicated past keep nobody out.
    assert_eq!(
        super::pool_offer(&dedicated_pool("floating"), "carol").free,
        3
    );
}
