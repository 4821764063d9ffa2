//! Identities: names that need encoding round-trip through the holder label, the guard checks
//! encoded identities itself, and what each identity may do comes from the cluster.

use corral_tests::{actor_as, actor_impersonating, client_as, namespace};
use kube::Client;
use kube::api::Api;
use serde_json::json;
use vdi_core::error::ErrorKind;
use vdi_core::names::{ASSIGNED_TO_LABEL, encode_identity};
use vdi_core::resources::VirtualMachine;
use vdi_core::scope::Scope;
use vdi_core::state::MemberState;
use vdi_core::watch::list_pools;

use crate::{claim, clock, holders, pool, release};

#[tokio::test]
async fn identities_that_need_encoding_round_trip_through_the_label() {
    let ns = namespace("ids").await;
    let admin = client_as("admin").await;
    let admin_actor = actor_as("admin").await;
    let long = format!("{}@example.com", "x".repeat(58));
    let ids = [
        "alice@example.com",
        "system:serviceaccount:corral-vms:broker",
        long.as_str(),
    ];
    pool(&admin, &ns, "id", ids.len()).await;
    for id in ids {
        let c = claim(&admin_actor, &ns, "id", id).await.unwrap();
        let vm = Api::<VirtualMachine>::namespaced(admin.clone(), &ns)
            .get(&c.member)
            .await
            .unwrap();
        let label = vm.metadata.labels.unwrap()[ASSIGNED_TO_LABEL].clone();
        assert_eq!(label, encode_identity(id));
        assert!(vdi_core::names::is_valid_label_value(&label));
        let pools = list_pools(&admin, &Scope::Namespace(ns.clone()), &clock(&admin).await)
            .await
            .unwrap();
        let m = pools[0]
            .members
            .iter()
            .find(|m| m.name == c.member)
            .unwrap();
        assert_eq!(m.holder.as_deref(), Some(id), "the full identity is shown");
        assert_eq!(m.state, MemberState::Assigned, "a hashed label matches");
        assert!(claim(&admin_actor, &ns, "id", id).await.unwrap().resumed);
    }
    // The holder releases it, acting as itself through impersonation.
    let first = holders(&admin, &ns, "id")
        .await
        .into_iter()
        .find(|(_, (h, _))| h.as_deref() == Some(ids[0]))
        .unwrap()
        .0;
    let holder = actor_impersonating(ids[0], &["system:masters"]).await;
    release(&holder, &ns, &first).await.unwrap();
}

/// Gives `user` the client-side flow's desktop role in `ns` (`corral-vdi:self-service`).
async fn grant_desktop_user(admin: &Client, ns: &str, user: &str) {
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> = Api::namespaced(admin.clone(), ns);
    let name = format!(
        "desktop-{}",
        encode_identity(user).replace('.', "-").to_lowercase()
    );
    let binding = serde_json::from_value(json!({
        "metadata": { "name": name },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": sandbox::bootstrap::SELF_SERVICE },
        "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user }]
    }))
    .unwrap();
    bindings
        .create(&Default::default(), &binding)
        .await
        .unwrap();
}

#[tokio::test]
async fn the_guard_checks_encoded_identities_itself() {
    let ns = namespace("enc").await;
    let admin = client_as("admin").await;
    let email = "alice@example.com";
    let broker = "system:serviceaccount:corral-vms:broker";
    for user in [email, broker] {
        grant_desktop_user(&admin, &ns, user).await;
    }
    pool(&admin, &ns, "enc", 2).await;
    // A base32 identity labels its own desktop: the guard computes the same encoding.
    let c = claim(&actor_impersonating(email, &[]).await, &ns, "enc", email)
        .await
        .unwrap();
    assert_eq!(
        holders(&admin, &ns, "enc").await[&c.member],
        (
            Some(email.into()),
            Some("b32.mfwgsy3fibsxqylnobwgkltdn5wq".into())
        )
    );
    // A hashed identity cannot be checked by CEL: refused before any Lease is written.
    let before = holders(&admin, &ns, "enc").await;
    let err = claim(&actor_impersonating(broker, &[]).await, &ns, "enc", broker)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
    assert!(
        err.to_string().contains("cannot check a label")
            && err.suggestion().unwrap().contains("administrator"),
        "{err}"
    );
    assert_eq!(holders(&admin, &ns, "enc").await, before);
    // An administrator assigns to it.
    let c = claim(&actor_as("admin").await, &ns, "enc", broker)
        .await
        .unwrap();
    assert_eq!(
        holders(&admin, &ns, "enc").await[&c.member].0.as_deref(),
        Some(broker)
    );
}

#[tokio::test]
async fn what_each_identity_may_do_comes_from_the_cluster() {
    use vdi_core::identity::permissions;
    let ns = namespace("perm").await;
    let alice = permissions(&actor_as("alice").await, &ns, true).await;
    assert!(!alice.admin && alice.claim.allowed);
    for (what, verdict, needle) in [
        (
            "assign",
            &alice.assign,
            "only members of corral-vdi:admins may assign desktops",
        ),
        (
            "new pool",
            &alice.create_pool,
            "RBAC does not let you create virtualmachineclones.clone.kubevirt.io",
        ),
        (
            "delete pool",
            &alice.delete_pool,
            "RBAC does not let you delete virtualmachines.kubevirt.io",
        ),
        (
            "force release",
            &alice.force_release,
            "only members of corral-vdi:admins may release",
        ),
    ] {
        assert!(!verdict.allowed, "{what}");
        let reason = verdict.reason.clone().unwrap();
        assert!(reason.contains(needle), "{what}: {reason}");
    }
    let admin = permissions(&actor_as("admin").await, &ns, true).await;
    assert!(admin.admin);
    for verdict in [
        &admin.claim,
        &admin.assign,
        &admin.create_pool,
        &admin.delete_pool,
        &admin.force_release,
    ] {
        assert!(verdict.allowed && verdict.reason.is_none(), "{admin:?}");
    }
    let carol = permissions(&actor_as("carol").await, &ns, true).await;
    assert!(!carol.claim.allowed);
    assert!(
        carol
            .claim
            .reason
            .clone()
            .unwrap()
            .contains("patch virtualmachines.kubevirt.io"),
        "{carol:?}"
    );
    // Without the guard, RBAC alone decides: alice may assign to others there.
    let unguarded = permissions(&actor_as("alice").await, &ns, false).await;
    assert!(unguarded.assign.allowed);
}
