//! Each SPEC rule and refusal of pool create, with the message checked and the cluster checked
//! unchanged: bad input, the golden VM's namespace, an existing pool or taken name or leftover
//! Lease, golden VMs KubeVirt would fail late, a running golden VM, and an RBAC denial.

use std::collections::BTreeMap;
use std::time::Duration;

use corral_tests::{client_as, eventually, golden_vm, namespace};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, DynamicObject, ListParams, ObjectMeta, PostParams};
use serde_json::json;
use vdi_core::error::ErrorKind;
use vdi_core::names::{MEMBER_LABEL, POOL_LABEL, lease_name};
use vdi_core::pool::{MAX_POOL_SIZE, create_pool};

use crate::{assert_member_ready, request, world};

#[tokio::test]
async fn bad_input_is_refused_and_changes_nothing() {
    let admin = client_as("admin").await;
    let ns = namespace("input").await;
    golden_vm(&ns, "gold", "Halted", |_| {}).await;
    let before = world(&ns).await;
    let long = "p".repeat(61);
    let cases = [
        (
            request(&ns, "Dev_Pool", "gold", 3),
            ErrorKind::Invalid,
            "is not a valid pool name",
        ),
        (
            request(&ns, "devpool", "gold", 0),
            ErrorKind::Invalid,
            "out of range",
        ),
        (
            request(&ns, "devpool", "gold", MAX_POOL_SIZE + 1),
            ErrorKind::Invalid,
            "out of range",
        ),
        (
            request(&ns, &long, "gold", 10),
            ErrorKind::Invalid,
            "64 characters",
        ),
        (
            request("no-such-namespace", "devpool", "gold", 3),
            ErrorKind::NotFound,
            "namespace \"no-such-namespace\" does not exist",
        ),
    ];
    for (req, kind, needle) in cases {
        let err = create_pool(&admin, &req, |_| {}).await.unwrap_err();
        assert_eq!(err.kind(), kind, "{err}");
        assert!(err.to_string().contains(needle), "{err}");
        assert!(err.suggestion().is_some(), "{err} has a fix");
    }
    assert_eq!(world(&ns).await, before);
}

#[tokio::test]
async fn the_golden_vm_is_looked_up_only_in_the_target_namespace() {
    let admin = client_as("admin").await;
    let ns = namespace("golden").await;
    let before = world(&ns).await;
    let demo_before = world("corral-vms").await;
    // golden-desktop exists, but in corral-vms.
    let err = create_pool(
        &admin,
        &request(&ns, "devpool", "golden-desktop", 2),
        |_| {},
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert_eq!(
        err.to_string(),
        format!("golden VM \"golden-desktop\" not found in namespace \"{ns}\"")
    );
    assert!(err.suggestion().unwrap().contains("pass -n"), "{err:?}");
    assert_eq!(world(&ns).await, before);
    assert_eq!(world("corral-vms").await.clones, demo_before.clones);
}

#[tokio::test]
async fn an_existing_pool_a_taken_name_or_a_leftover_lease_is_refused() {
    let admin = client_as("admin").await;
    let ns = namespace("taken").await;
    golden_vm(&ns, "gold", "Halted", |_| {}).await;
    // A VM that already carries pool "one"'s label (under another name).
    golden_vm(&ns, "stray", "Halted", |vm| {
        vm["metadata"]["labels"][POOL_LABEL] = json!("one");
    })
    .await;
    // An unlabelled VM with the name of pool "two"'s second member.
    golden_vm(&ns, "two-2", "Halted", |_| {}).await;
    // A claim Lease left over for pool "three"'s first member.
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(lease_name("three-1")),
            labels: Some(BTreeMap::from([
                (POOL_LABEL.to_owned(), "three".to_owned()),
                (MEMBER_LABEL.to_owned(), "three-1".to_owned()),
            ])),
            ..Default::default()
        },
        spec: Some(LeaseSpec::default()),
    };
    Api::<Lease>::namespaced(admin.clone(), &ns)
        .create(&PostParams::default(), &lease)
        .await
        .unwrap();
    let before = world(&ns).await;

    let err = create_pool(&admin, &request(&ns, "one", "gold", 2), |_| {})
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict);
    assert_eq!(
        err.to_string(),
        format!("pool \"one\" already exists in namespace \"{ns}\" (1 member: stray)")
    );
    assert!(
        err.suggestion()
            .unwrap()
            .contains("corral-vdi pool delete one")
    );
    assert!(!err.retryable());

    let err = create_pool(&admin, &request(&ns, "two", "gold", 3), |_| {})
        .await
        .unwrap_err();
    assert!(
        err.to_string().starts_with(&format!(
            "VirtualMachine \"two-2\" already exists in namespace \"{ns}\""
        )),
        "{err}"
    );

    let err = create_pool(&admin, &request(&ns, "three", "gold", 2), |_| {})
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("claim Lease \"corral-vdi-three-1\" already exists"),
        "{err}"
    );
    assert_eq!(world(&ns).await, before, "refusals change nothing");
}

#[tokio::test]
async fn golden_vms_kubevirt_would_fail_late_are_refused_early() {
    let admin = client_as("admin").await;
    let ns = namespace("unfit").await;
    golden_vm(&ns, "tpm", "Halted", |vm| {
        vm["spec"]["template"]["spec"]["domain"]["devices"]["tpm"] = json!({ "persistent": true });
    })
    .await;
    golden_vm(&ns, "efi", "Halted", |vm| {
        vm["spec"]["template"]["spec"]["domain"]["firmware"] =
            json!({ "bootloader": { "efi": { "persistent": true } } });
    })
    .await;
    let nosnap = golden_vm(&ns, "nosnap", "Halted", |vm| {
        vm["metadata"]["annotations"] =
            json!({ sandbox::emulator::knobs::SNAPSHOT_DISABLED_ANNOTATION: "rootdisk" });
    })
    .await;
    // The emulator reports the volume as KubeVirt does.
    let statuses = nosnap.status.unwrap().other["volumeSnapshotStatuses"].clone();
    assert_eq!(statuses[0]["enabled"], json!(false), "{statuses}");
    let reason = statuses[0]["reason"].as_str().unwrap().to_owned();
    assert!(reason.starts_with("No VolumeSnapshotClass"), "{reason}");

    let before = world(&ns).await;
    let cases = [
        ("tpm", "has a persistent TPM", "without a persistent TPM"),
        (
            "efi",
            "has persistent EFI variables",
            "without persistent EFI",
        ),
        (
            "nosnap",
            "volume \"rootdisk\" does not support snapshots",
            "VolumeSnapshotClass",
        ),
    ];
    for (golden, cause, fix) in cases {
        let err = create_pool(
            &admin,
            &request(&ns, &format!("p{golden}"), golden, 2),
            |_| {},
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Invalid, "{err}");
        let text = err.to_string();
        assert!(
            text.contains(&format!("golden VM \"{golden}\"")) && text.contains(cause),
            "{text}"
        );
        assert!(err.suggestion().unwrap().contains(fix), "{err:?}");
        if golden == "nosnap" {
            assert!(
                text.contains(&reason),
                "the cluster's reason is quoted: {text}"
            );
        }
    }
    assert_eq!(world(&ns).await, before, "nothing was created");

    // What the refusal spares: on KubeVirt (and the emulator) such a clone stays pending for
    // ever, with the event VMVolumeSnapshotsInvalid.
    let clone: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "clone.kubevirt.io/v1beta1", "kind": "VirtualMachineClone",
        "metadata": { "name": "by-hand", "namespace": ns },
        "spec": { "source": { "apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "nosnap" },
                  "target": { "apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "by-hand-vm" } }
    }))
    .unwrap();
    corral_tests::clones(&admin, &ns)
        .create(&PostParams::default(), &clone)
        .await
        .unwrap();
    let events: Api<Event> = Api::namespaced(admin.clone(), &ns);
    let event = eventually(
        "VMVolumeSnapshotsInvalid",
        Duration::from_secs(15),
        || async {
            let list = events
                .list(&ListParams::default().fields("involvedObject.name=by-hand"))
                .await
                .ok()?;
            list.items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some("VMVolumeSnapshotsInvalid"))
        },
    )
    .await;
    assert_eq!(
        event.message.as_deref(),
        Some("Virtual Machine volume rootdisk does not support snapshots")
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let pending = corral_tests::clones(&admin, &ns)
        .get("by-hand")
        .await
        .unwrap();
    assert_eq!(pending.data.pointer("/status/phase"), None, "still pending");
}

#[tokio::test]
async fn a_running_golden_vm_is_refused_unless_allowed() {
    let admin = client_as("admin").await;
    let ns = namespace("running").await;
    golden_vm(&ns, "live", "Always", |_| {}).await;
    let before = world(&ns).await;
    let err = create_pool(&admin, &request(&ns, "hot", "live", 2), |_| {})
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Invalid);
    assert!(
        err.to_string()
            .contains("golden VM \"live\" is Running, not Stopped")
            && err.to_string().contains("crash-consistent"),
        "{err}"
    );
    assert!(err.suggestion().unwrap().contains("--allow-running"));
    assert_eq!(world(&ns).await, before);

    let mut allowed = request(&ns, "hot", "live", 2);
    allowed.options.allow_running = true;
    let created = create_pool(&admin, &allowed, |_| {})
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for member in &created.members {
        assert_member_ready(&admin, &ns, "hot", member).await;
    }
}

#[tokio::test]
async fn an_rbac_denial_changes_nothing() {
    // bob may read clones but not create them.
    let ns = namespace("denied").await;
    golden_vm(&ns, "gold", "Halted", |_| {}).await;
    let before = world(&ns).await;
    let bob = client_as("bob").await;
    let err = create_pool(&bob, &request(&ns, "bp", "gold", 3), |_| {})
        .await
        .unwrap_err();
    // Refused up front (a SelfSubjectAccessReview), naming the permission that is missing.
    assert_eq!(err.kind(), ErrorKind::Forbidden, "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "cannot create pool \"bp\": RBAC does not let you create \
             virtualmachineclones.clone.kubevirt.io in namespace \"{ns}\"; nothing was changed"
        )
    );
    assert!(
        err.suggestion().is_some_and(|s| s.contains("RBAC access")),
        "{err:?}"
    );
    assert_eq!(world(&ns).await, before);
}
