//! Access follows the claim: the holder reaches their desktop's streams and power, another
//! claimant reaches nothing of it (and moves nothing), and a release takes the access away
//! within 5 s, cutting the console the holder has open.

use std::time::Duration;

use corral_tests::{
    actor_as, client_as, desktop_member, leases, namespace, streams_as, vms, wait_power,
};
use kube::ResourceExt;
use tokio::time::Instant;
use vdi_core::claim::{UnassignOptions, unassign};
use vdi_core::names::{ASSIGNED_TO_LABEL, CLAIMED_AT_ANNOTATION, lease_name};
use vdi_core::stream::Subresource;

use crate::{
    FOLLOW, STREAMS, assert_grant_shape, claim, console, ends_by, power_code, replicas_steady,
    still_open, stream_code, vm_version, wait_event, wait_granted, wait_no_grant,
};

#[tokio::test]
async fn access_follows_the_claim_and_ends_with_it() {
    let _steady = replicas_steady().await;
    let admin = client_as("admin").await;
    let ns = namespace("access").await;
    // With USB client passthrough, as the seed's golden VM has it (usbredir needs it).
    desktop_member(&ns, "acc", "acc-1", true).await;

    let claimed = claim("alice", &ns, "acc").await;
    assert_eq!(claimed.member, "acc-1");
    wait_granted(&ns, "acc-1", "alice", FOLLOW).await;
    wait_power(&ns, "acc-1", "Running").await;
    assert_grant_shape(&ns, "acc", "acc-1", "alice").await;

    // alice's console, opened as the app opens it (keeping any other viewer): 101.
    let mut console = console("alice", &ns, "acc-1").await;

    // bob: every stream and every power action refused, and nothing moved: the VM, its Lease
    // and alice's console (a vnc take-over would have cut it) are as they were.
    let lease_version = || async {
        leases(&admin, &ns)
            .get(&lease_name("acc-1"))
            .await
            .unwrap()
            .resource_version()
    };
    let (vm_before, lease_before) = (
        vm_version(&admin, &ns, "acc-1").await,
        lease_version().await,
    );
    for sub in STREAMS {
        assert_eq!(
            stream_code("bob", &ns, "acc-1", sub).await,
            403,
            "bob opens {} on alice's desktop",
            sub.name()
        );
    }
    for action in ["start", "stop", "restart"] {
        assert_eq!(
            power_code("bob", &ns, "acc-1", action, false).await,
            403,
            "bob's {action} of alice's desktop"
        );
    }
    assert_eq!(
        vm_version(&admin, &ns, "acc-1").await,
        vm_before,
        "bob moved the VM"
    );
    assert_eq!(lease_version().await, lease_before, "bob moved the Lease");
    assert!(
        still_open(&mut console, Duration::from_secs(1)).await,
        "bob's refused take-over cut alice's console"
    );

    // alice: the other streams open; her power actions pass RBAC (a dry run changes nothing;
    // start of a running VM is virt-api's 409, past RBAC).
    for sub in [Subresource::PortForward { port: 22 }, Subresource::UsbRedir] {
        assert_eq!(
            stream_code("alice", &ns, "acc-1", sub).await,
            101,
            "alice opens {} on her desktop",
            sub.name()
        );
    }
    for (action, want) in [("stop", 202), ("restart", 202), ("start", 409)] {
        assert_eq!(
            power_code("alice", &ns, "acc-1", action, true).await,
            want,
            "alice's dry-run {action} of her desktop"
        );
    }
    assert_eq!(
        vm_version(&admin, &ns, "acc-1").await,
        vm_before,
        "a dry run moved the VM"
    );

    // What Connect shows (the app's dialog, the CLI's `connect`): the holder's paths are
    // available through her grant, limited by resourceNames, which only a review naming the
    // member sees; bob's are not, with the member named.
    let paths = |user: &'static str| {
        let ns = ns.clone();
        async move {
            vdi_core::connect::paths(&streams_as(user).await, &ns, "acc-1")
                .await
                .unwrap()
        }
    };
    let hers = paths("alice").await;
    assert!(
        hers.paths.iter().all(|p| p.available),
        "alice's Connect on her granted desktop: {:?}",
        hers.paths
    );
    let his = paths("bob").await;
    for path in &his.paths {
        let reason = path.reason.as_deref().unwrap_or_default();
        assert!(
            !path.available && reason.contains("on \"acc-1\""),
            "bob's Connect on alice's desktop: {path:?}"
        );
    }

    // Her release: within 5 s her next upgrade is refused and the open console ends.
    let released_at = Instant::now();
    unassign(
        &actor_as("alice").await,
        &ns,
        "acc-1",
        &UnassignOptions::default(),
    )
    .await
    .unwrap();
    let deadline = released_at + FOLLOW;
    loop {
        let code = stream_code(
            "alice",
            &ns,
            "acc-1",
            Subresource::Vnc {
                preserve_session: true,
            },
        )
        .await;
        if code == 403 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "alice's vnc 5 s after her release: {code}, not 403"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        ends_by(&mut console, deadline).await,
        "alice's open console still open 5 s after her release"
    );
    println!(
        "release → alice refused and her console cut: {:.1?}",
        released_at.elapsed()
    );

    wait_no_grant(&ns, "acc-1", FOLLOW).await;
    wait_event(&ns, "acc-1", "Released", "alice", FOLLOW).await;
    wait_power(&ns, "acc-1", "Stopped").await;
    let vm = vms(&admin, &ns).get("acc-1").await.unwrap();
    assert!(
        !vm.labels().contains_key(ASSIGNED_TO_LABEL)
            && !vm.annotations().contains_key(CLAIMED_AT_ANNOTATION),
        "the released member keeps its claim marks: {:?} {:?}",
        vm.labels(),
        vm.annotations()
    );
}

/// Whether the API server's authorizer lets `user` open `vnc` on `member` in `ns` (a
/// SubjectAccessReview, as virt-api asks it).
async fn may_open_vnc(user: &str, ns: &str, member: &str) -> bool {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    let review: SubjectAccessReview = serde_json::from_value(serde_json::json!({
        "spec": { "user": user, "resourceAttributes": {
            "namespace": ns, "verb": "get", "group": "subresources.kubevirt.io",
            "resource": "virtualmachineinstances", "subresource": "vnc", "name": member } } }))
    .unwrap();
    kube::Api::<SubjectAccessReview>::all(client_as("admin").await)
        .create(&kube::api::PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .is_some_and(|s| s.allowed)
}

#[tokio::test]
async fn a_service_account_holder_is_bound_as_a_service_account_to_its_member_only() {
    let _steady = replicas_steady().await;
    let ns = namespace("robot").await;
    desktop_member(&ns, "sa", "sa-1", true).await;
    desktop_member(&ns, "sa", "sa-2", true).await;
    let robot = format!("system:serviceaccount:{ns}:robot");
    // An administrator assigns a desktop to a ServiceAccount (a kiosk, a CI job).
    let claimed = vdi_core::claim::assign(
        &actor_as("admin").await,
        &ns,
        "sa",
        &robot,
        &vdi_core::claim::ClaimOptions::default(),
    )
    .await
    .unwrap();
    let other = if claimed.member == "sa-1" {
        "sa-2"
    } else {
        "sa-1"
    };
    let (_, binding) = crate::grant(&ns, &claimed.member).await;
    let subjects = binding.and_then(|b| b.subjects).unwrap_or_default();
    assert!(
        subjects.len() == 1
            && subjects[0].kind == "ServiceAccount"
            && subjects[0].name == "robot"
            && subjects[0].namespace.as_deref() == Some(ns.as_str()),
        "{}'s binding names ServiceAccount {ns}/robot alone: {subjects:?}",
        claimed.member
    );
    // RBAC follows the binding a moment later (its authorizer reads through a cache).
    corral_tests::eventually("the ServiceAccount's grant to hold", FOLLOW, || async {
        may_open_vnc(&robot, &ns, &claimed.member)
            .await
            .then_some(())
    })
    .await;
    assert!(!may_open_vnc(&robot, &ns, other).await);
}

#[tokio::test]
async fn a_service_account_claims_renews_connects_and_releases_its_own_desktop() {
    use vdi_core::broker::claimants::{Claimant, allow};
    let _steady = replicas_steady().await;
    let ns = namespace("kiosk").await;
    desktop_member(&ns, "kiosk", "kiosk-1", true).await;
    // A kiosk's identity: longer than the guard can encode in a label (36 characters), which
    // with a broker matters no more, since the broker writes the label.
    let dave = format!("system:serviceaccount:{ns}:dave");
    assert!(
        dave.len() > 36,
        "{dave} is short enough for the guard to check its label"
    );
    let admin = client_as("admin").await;
    let sa = Claimant::ServiceAccount {
        namespace: ns.clone(),
        name: "dave".into(),
    };
    allow(&admin, &ns, &[sa]).await.unwrap();
    let groups = [
        "system:serviceaccounts".to_owned(),
        format!("system:serviceaccounts:{ns}"),
    ];
    let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
    let actor = corral_tests::actor_impersonating(&dave, &groups).await;

    let claimed = vdi_core::claim::assign(
        &actor,
        &ns,
        "kiosk",
        &dave,
        &vdi_core::claim::ClaimOptions::default(),
    )
    .await
    .unwrap_or_else(|e| panic!("{dave} claims for itself: {e}"));
    assert_eq!(claimed.member, "kiosk-1");
    // Granted to the service account, as a service account.
    let (_, binding) = crate::grant(&ns, "kiosk-1").await;
    let subjects = binding.and_then(|b| b.subjects).unwrap_or_default();
    assert!(
        subjects.len() == 1 && subjects[0].kind == "ServiceAccount" && subjects[0].name == "dave",
        "kiosk-1's binding: {subjects:?}"
    );
    corral_tests::eventually("the kiosk's grant to hold", crate::CONVERGE, || async {
        may_open_vnc(&dave, &ns, "kiosk-1").await.then_some(())
    })
    .await;
    vdi_core::claim::renew::renew(&actor, &ns, "kiosk-1")
        .await
        .unwrap_or_else(|e| panic!("{dave} renews its claim: {e}"));
    unassign(&actor, &ns, "kiosk-1", &UnassignOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{dave} releases its claim: {e}"));
    wait_no_grant(&ns, "kiosk-1", crate::CONVERGE).await;
}
