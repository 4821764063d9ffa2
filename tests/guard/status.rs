//! `guard status` names what was changed on the cluster, and install restores it.

use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use vdi_core::guard::{self, GuardState};

use crate::{client, serial, uninstall};

/// The guard's policies or bindings (`kind`) as `admin` sees them, untyped.
fn guard_objects(admin: &Client, kind: &str) -> Api<DynamicObject> {
    let plural = format!("{}s", kind.to_lowercase()).replace("policys", "policies");
    Api::all_with(
        admin.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind),
            &plural,
        ),
    )
}

/// This binary's turn (the guard is cluster-wide), admin and bob, with the guard installed as
/// shipped.
async fn installed_as_shipped() -> (tokio::sync::MutexGuard<'static, ()>, Client, Client) {
    let serial = serial().await;
    let admin = client("admin").await;
    let bob = client("bob").await;
    assert_eq!(
        guard::install(&admin).await.unwrap().state,
        GuardState::Installed
    );
    (serial, admin, bob)
}

#[tokio::test]
async fn guard_status_names_what_was_changed_on_the_cluster_and_install_restores_it() {
    let (_serial, admin, bob) = installed_as_shipped().await;
    let bindings = guard_objects(&admin, "ValidatingAdmissionPolicyBinding");
    let policies = guard_objects(&admin, "ValidatingAdmissionPolicy");

    // A binding set to warn only: not installed as shipped, for everyone who reads it.
    bindings
        .patch(
            guard::LEASE_POLICY,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "validationActions": ["Warn"] } })),
        )
        .await
        .unwrap();
    for who in [&admin, &bob] {
        let status = guard::status(who).await.unwrap();
        assert_eq!(status.state, GuardState::Outdated, "{status:?}");
        assert!(
            status.summary.contains(
                "binding corral-vdi-claim-leases: validationActions is [Warn], this version ships [Deny]"
            ) && status.summary.contains("was changed on the cluster"),
            "{}",
            status.summary
        );
        let binding = status
            .objects
            .iter()
            .find(|o| o.kind == "ValidatingAdmissionPolicyBinding" && o.name == guard::LEASE_POLICY)
            .unwrap();
        assert!(binding.present && !binding.current, "{binding:?}");
    }
    // The CLI says so in its exit status too, for scripts that watch the guard.
    let cli = std::process::Command::new(corral_tests::cli_binary())
        .env("KUBECONFIG", &corral_tests::sandbox().kubeconfig)
        .args(["--context", "admin", "guard", "status"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&cli.stdout);
    assert_eq!(cli.status.code(), Some(1), "{said}");
    assert!(said.contains("validationActions is [Warn]"), "{said}");

    // A policy's expression edited by hand, and the other binding narrowed to some namespaces.
    let mut policy = policies.get(guard::MEMBER_POLICY).await.unwrap();
    policy.data["spec"]["validations"][2]["expression"] = json!("true");
    policies
        .replace(guard::MEMBER_POLICY, &PostParams::default(), &policy)
        .await
        .unwrap();
    bindings
        .patch(
            guard::MEMBER_POLICY,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "matchResources": {
                "namespaceSelector": { "matchLabels": { "guarded": "yes" } } } } })),
        )
        .await
        .unwrap();
    let status = guard::status(&admin).await.unwrap();
    assert_eq!(status.state, GuardState::Outdated, "{status:?}");
    for difference in [
        "binding corral-vdi-claim-leases: validationActions is [Warn], this version ships [Deny]",
        "policy corral-vdi-pool-members: validations[2].expression differs from this version's",
        "binding corral-vdi-pool-members: matchResources is set, this version ships none",
    ] {
        assert!(
            status.summary.contains(difference),
            "{difference}: {}",
            status.summary
        );
    }
    assert_eq!(
        status.objects.iter().filter(|o| !o.current).count(),
        3,
        "{status:?}"
    );

    // Install restores every one of them, the hand-added selector included.
    let status = guard::install(&admin).await.unwrap();
    assert_eq!(status.state, GuardState::Installed, "{status:?}");
    assert!(
        status.objects.iter().all(|o| o.present && o.current),
        "{status:?}"
    );
    let binding = bindings.get(guard::MEMBER_POLICY).await.unwrap();
    assert!(
        binding.data["spec"].get("matchResources").is_none_or(|m| {
            m.get("namespaceSelector")
                .is_none_or(|s| s.as_object().is_some_and(|s| s.is_empty()))
        }),
        "{:?}",
        binding.data
    );
    uninstall(&admin).await;
}

#[tokio::test]
async fn only_a_cluster_administrator_installs_or_removes_the_guard_and_the_broker_said_in_words() {
    let (_serial, admin, bob) = installed_as_shipped().await;
    let before = guard::status(&admin).await.unwrap();
    // Removing: the request refused, said as a cluster administrator's job.
    for (what, err) in [
        (
            "remove the guard",
            guard::uninstall(&bob).await.unwrap_err(),
        ),
        (
            "remove the broker",
            vdi_core::broker::uninstall(&bob).await.unwrap_err(),
        ),
    ] {
        assert_eq!(
            err.kind(),
            vdi_core::error::ErrorKind::Forbidden,
            "{what}: {err}"
        );
        let text = err.to_string();
        assert!(
            text.contains(&format!(
                "was refused: only a cluster administrator may {what} (cluster-wide objects)"
            )) && text.ends_with("nothing was changed"),
            "{what}: {text}"
        );
        assert!(
            err.suggestion()
                .unwrap()
                .starts_with("ask a cluster administrator to run it"),
            "{what}: {:?}",
            err.suggestion()
        );
    }
    // Installing: the first object refused, named (the guard comes first for the broker too).
    for err in [
        guard::install(&bob).await.unwrap_err(),
        vdi_core::broker::install(&bob, None).await.unwrap_err(),
    ] {
        assert_eq!(err.kind(), vdi_core::error::ErrorKind::Forbidden, "{err}");
        assert!(
            err.to_string()
                .starts_with("you may not install the Corral VDI guard: "),
            "{err}"
        );
        assert!(
            err.suggestion()
                .unwrap()
                .starts_with("installing it takes a cluster administrator"),
            "{:?}",
            err.suggestion()
        );
    }
    assert_eq!(
        guard::status(&admin).await.unwrap(),
        before,
        "nothing moved"
    );
    uninstall(&admin).await;
}
