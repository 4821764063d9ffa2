//! The guard absent until installed, then the API server itself enforcing the claim rules on
//! raw requests, with the policy's message.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use vdi_core::claim::{ClaimOptions, assign};
use vdi_core::error::ErrorKind;
use vdi_core::guard::{self, GuardState};
use vdi_core::identity::Actor;
use vdi_core::names::{POOL_LABEL, lease_name};
use vdi_core::resources::VirtualMachine;

use crate::{client, denied, label_patch, lease_for, serial, wait_guard_enforced};

#[tokio::test]
async fn the_guard_is_absent_until_installed_then_the_api_server_enforces_the_claim_rules() {
    let _serial = serial().await;
    let admin = client("admin").await;
    let alice = client("alice").await;
    let bob = client("bob").await;

    let status = guard::status(&bob).await.unwrap();
    assert_eq!(
        status.state,
        GuardState::Unknown,
        "without the guard, bob may not even read whether it is there: {status:?}"
    );
    let status = guard::status(&admin).await.unwrap();
    assert_eq!(status.state, GuardState::Absent, "{status:?}");
    assert!(
        status.summary.contains("corral-vdi guard install"),
        "{}",
        status.summary
    );
    // Only a cluster administrator may install it.
    let err = guard::install(&alice).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
    assert!(
        err.to_string()
            .contains("you may not install the Corral VDI guard"),
        "{err}"
    );
    let status = guard::install(&admin).await.unwrap();
    assert_eq!(status.state, GuardState::Installed, "{status:?}");
    assert!(status.objects.iter().all(|o| o.present && o.current));
    // With it, everyone may read it (RBAC follows the new binding a moment later).
    let what = "bob to read that the guard is installed";
    corral_tests::eventually(what, Duration::from_secs(10), || async {
        let state = guard::status(&bob).await.unwrap().state;
        (state == GuardState::Installed).then_some(())
    })
    .await;

    // alice's claim, made as the product makes it.
    let ns = corral_tests::namespace("guard").await;
    corral_tests::pool_vms(&admin, &ns, "g", 3).await.unwrap();
    let alice_actor = Actor::connect(alice.clone()).await.unwrap();
    let claimed = assign(&alice_actor, &ns, "g", "alice", &ClaimOptions::default())
        .await
        .unwrap();
    let hers = claimed.member.clone();
    let free: Vec<String> = (1..=3)
        .map(|i| format!("g-{i}"))
        .filter(|m| *m != hers)
        .collect();

    // The API server compiles the policies a moment after they are written.
    wait_guard_enforced(&ns, &free[0]).await;

    let vms_as = |c: &Client| Api::<VirtualMachine>::namespaced(c.clone(), &ns);
    let leases_as = |c: &Client| Api::<Lease>::namespaced(c.clone(), &ns);
    let admin_leases = leases_as(&admin);
    let lease_before = admin_leases.get(&lease_name(&hers)).await.unwrap();
    let vm_before = vms_as(&admin).get(&hers).await.unwrap();

    // bob, raw API calls, the way kubectl makes them: every one refused by the API server.
    denied(
        "bob deletes alice's Lease",
        leases_as(&bob)
            .delete(&lease_name(&hers), &DeleteParams::default())
            .await,
        "is held by alice; only its holder or a member of corral-vdi:admins",
    );
    let mut takeover = lease_before.clone();
    takeover.spec.as_mut().unwrap().holder_identity = Some("bob".into());
    denied(
        "bob updates alice's Lease to name himself",
        leases_as(&bob)
            .replace(&lease_name(&hers), &PostParams::default(), &takeover)
            .await,
        "is held by alice",
    );
    denied(
        "bob sets the label on alice's VM to himself",
        vms_as(&bob)
            .patch(&hers, &PatchParams::default(), &label_patch(Some("bob")))
            .await,
        "is assigned to alice; only they or a member of corral-vdi:admins",
    );
    denied(
        "bob removes the label from alice's VM",
        vms_as(&bob)
            .patch(&hers, &PatchParams::default(), &label_patch(None))
            .await,
        "is assigned to alice",
    );
    denied(
        "bob labels a free member for alice",
        vms_as(&bob)
            .patch(
                &free[0],
                &PatchParams::default(),
                &label_patch(Some("alice")),
            )
            .await,
        "may set the assigned-to label of",
    );
    denied(
        "bob creates a Lease naming alice",
        leases_as(&bob)
            .create(&PostParams::default(), &lease_for(&free[0], "alice"))
            .await,
        "bob may not create claim Lease",
    );
    denied(
        "bob moves alice's VM out of its pool",
        vms_as(&bob)
            .patch(
                &hers,
                &PatchParams::default(),
                &Patch::Merge(json!({ "metadata": { "labels": { POOL_LABEL: null } } })),
            )
            .await,
        "only a member of corral-vdi:admins may move it out of its pool",
    );
    assert_eq!(
        admin_leases
            .get(&lease_name(&hers))
            .await
            .unwrap()
            .metadata
            .resource_version,
        lease_before.metadata.resource_version,
        "alice's Lease did not move"
    );
    assert_eq!(
        vms_as(&admin).get(&hers).await.unwrap().metadata.labels,
        vm_before.metadata.labels,
        "alice's labels did not move"
    );

    // alice on her own claim: renew, relabel, release.
    let mut renewed = admin_leases.get(&lease_name(&hers)).await.unwrap();
    renewed.spec.as_mut().unwrap().lease_duration_seconds = Some(7200);
    leases_as(&alice)
        .replace(&lease_name(&hers), &PostParams::default(), &renewed)
        .await
        .expect("the holder renews her Lease");
    vms_as(&alice)
        .patch(&hers, &PatchParams::default(), &label_patch(None))
        .await
        .expect("the holder removes her label");
    vms_as(&alice)
        .patch(&hers, &PatchParams::default(), &label_patch(Some("alice")))
        .await
        .expect("and sets it to herself");
    // An administrator may do what bob may not.
    admin_leases
        .create(&PostParams::default(), &lease_for(&free[0], "carol"))
        .await
        .expect("an administrator assigns to someone else");
    vms_as(&admin)
        .patch(
            &free[0],
            &PatchParams::default(),
            &label_patch(Some("carol")),
        )
        .await
        .expect("and labels for them");
    admin_leases
        .delete(&lease_name(&hers), &DeleteParams::default())
        .await
        .expect("an administrator releases anyone's Lease");
    // A Lease without a holder is nobody's.
    leases_as(&bob)
        .create(&PostParams::default(), &lease_for(&free[1], "bob"))
        .await
        .expect("bob claims for himself");
    leases_as(&bob)
        .delete(&lease_name(&free[1]), &DeleteParams::default())
        .await
        .expect("and releases his own");

    // Uninstall: back to absent, and bob's raw delete goes through again (RBAC alone).
    let removed = guard::uninstall(&admin).await.unwrap();
    assert!(removed.len() >= 4, "{removed:?}");
    assert_eq!(
        guard::status(&admin).await.unwrap().state,
        GuardState::Absent
    );
    assert!(guard::uninstall(&admin).await.unwrap().is_empty());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        // The API server drops a deleted policy from its cache within a moment.
        match leases_as(&bob)
            .delete(&lease_name(&free[0]), &DeleteParams::default())
            .await
        {
            Ok(_) => break,
            Err(e)
                if vdi_core::error::is_guard_denial(&e)
                    && tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("without the guard RBAC alone decides: {e}"),
        }
    }
}
