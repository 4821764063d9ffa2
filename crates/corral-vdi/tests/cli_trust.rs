//! Claims you can trust, through the CLI against the sandbox's real API server: identity only
//! from the cluster (`--user` is an assertion, `--as` is the cluster's impersonation), every
//! bad input refused before any request with nothing changed, and debris found and removed.

mod common;

use std::collections::BTreeMap;

use common::{corral, text};
use corral_tests::{client_as, golden_vm, namespace};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, ListParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use vdi_core::names::{ASSIGNED_TO_LABEL, MEMBER_LABEL, POOL_LABEL};
use vdi_core::pool::{RUN_LABEL, creation_mark_patch};
use vdi_core::resources::VirtualMachine;

/// Every VM, Lease and VirtualMachineClone of `ns` with its resourceVersion (and, for VMs, the
/// run strategy): if nothing in it changes, nothing was written.
async fn snapshot(admin: &Client, ns: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), ns);
    for vm in vms.list(&ListParams::default()).await.unwrap() {
        out.insert(
            format!("vm/{}", vm.name_any()),
            format!(
                "{} {:?}",
                vm.resource_version().unwrap_or_default(),
                vm.spec.run_strategy
            ),
        );
    }
    let leases: Api<Lease> = Api::namespaced(admin.clone(), ns);
    for lease in leases.list(&ListParams::default()).await.unwrap() {
        out.insert(
            format!("lease/{}", lease.name_any()),
            lease.resource_version().unwrap_or_default(),
        );
    }
    for clone in corral_tests::clones(admin, ns)
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        out.insert(
            format!("clone/{}", clone.name_any()),
            clone.resource_version().unwrap_or_default(),
        );
    }
    out
}

/// Waits until `vm` runs (the emulator stops changing its status).
async fn running(admin: &Client, ns: &str, vm: &str) {
    let api: Api<VirtualMachine> = Api::namespaced(admin.clone(), ns);
    corral_tests::eventually(
        &format!("{vm} running"),
        std::time::Duration::from_secs(15),
        || async { (api.get(vm).await.ok()?.printable_status() == "Running").then_some(()) },
    )
    .await;
}

/// Runs `corral-vdi args`, expects exit 1 with `needle` on stderr, and nothing on stdout.
fn refused(args: &[&str], needle: &str) {
    let out = corral(args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out.stdout));
    assert!(stderr.contains(needle), "{args:?}: {stderr}");
    assert!(stderr.contains("hint: "), "{args:?}: {stderr}");
}

#[tokio::test]
async fn user_is_an_assertion_and_acting_as_someone_else_is_the_clusters_impersonation() {
    let ns = namespace("trust").await;
    let admin = client_as("admin").await;
    corral_tests::pool_vms(&admin, &ns, "sec", 1).await.unwrap();
    let out = corral(&["--context", "alice", "assign", "sec", "alice", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    running(&admin, &ns, "sec-1").await;

    // bob claiming to be alice: refused, and nothing about sec-1 changes (Lease, label,
    // annotation, power: all in the resourceVersions).
    let before = snapshot(&admin, &ns).await;
    refused(
        &[
            "--context",
            "bob",
            "unassign",
            "sec-1",
            "--user",
            "alice",
            "-n",
            &ns,
        ],
        "you are bob, not alice",
    );
    // bob through the cluster's impersonation: the API server says no, plainly.
    refused(
        &[
            "--context",
            "bob",
            "--as",
            "alice",
            "unassign",
            "sec-1",
            "-n",
            &ns,
        ],
        "the cluster refused to let you act as someone else (--as): users \"alice\" is forbidden: User \"bob\" cannot impersonate",
    );
    // The same for a claim: the refused identity is the whole answer, with no word about the
    // cluster's broker read under it.
    let args = [
        "--context",
        "bob",
        "--as",
        "alice",
        "assign",
        "sec",
        "alice",
        "-n",
        &ns,
    ];
    refused(&args, "cannot impersonate");
    let stderr = text(&corral(&args).stderr);
    assert!(!stderr.contains("broker"), "{stderr}");
    assert_eq!(snapshot(&admin, &ns).await, before, "nothing moved");

    // --user naming yourself is fine; an administrator may act as alice through impersonation.
    let out = corral(&[
        "--context",
        "admin",
        "--as",
        "alice",
        "unassign",
        "sec-1",
        "--user",
        "alice",
        "-n",
        &ns,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("released sec-1 (was alice)"),
        "{}",
        text(&out.stdout)
    );
}

#[tokio::test]
async fn bad_input_is_refused_before_any_request_and_changes_nothing() {
    let ns = namespace("badin").await;
    let admin = client_as("admin").await;
    golden_vm(&ns, "golden-desktop", "Halted", |_| {}).await;
    corral_tests::pool_vms(&admin, &ns, "alpha", 3)
        .await
        .unwrap();
    // alice's running, assigned desktop alpha-3.
    let out = corral(&["--context", "alice", "assign", "alpha", "alice", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let alices = text(&out.stdout)
        .split_whitespace()
        .nth(1)
        .unwrap()
        .to_owned();
    running(&admin, &ns, &alices).await;
    let free_member = ["alpha-1", "alpha-2", "alpha-3"]
        .into_iter()
        .find(|m| *m != alices)
        .unwrap();

    let before = snapshot(&admin, &ns).await;
    let slash = format!("{alices}/status");
    for (args, needle) in [
        (
            vec!["--context", "alice", "unassign", slash.as_str(), "-n", &ns],
            "is not a valid member name",
        ),
        (
            vec!["unassign", "../alpha-1", "-n", &ns],
            "is not a valid member name",
        ),
        (
            vec![
                "pool",
                "create",
                "beta",
                "--from",
                "golden-desktop",
                "--size",
                "1",
                "--timeout",
                "5000000000h",
                "-n",
                &ns,
            ],
            "clone timeout",
        ),
        (
            vec!["assign", "alpha", "bob", "--lease-seconds", "0", "-n", &ns],
            "a Lease of 0 seconds is out of range",
        ),
        (
            vec!["assign", "alpha", "bob", "--lease-seconds", "-1", "-n", &ns],
            "a Lease of -1 seconds is out of range",
        ),
        (
            vec![
                "assign",
                "alpha",
                "bob",
                "--lease-seconds",
                "2147483647",
                "-n",
                &ns,
            ],
            "a Lease of 2147483647 seconds is out of range",
        ),
        (
            vec!["assign", "alpha", "bob\nroot", "-n", &ns],
            "contains a control character",
        ),
        (
            vec!["assign", "alpha", "", "-n", &ns],
            "the user name is empty",
        ),
        (
            vec!["assign", "Alpha", "bob", "-n", &ns],
            "is not a valid pool name",
        ),
        (
            vec!["pool", "list", "-n", ""],
            "namespace \"\" (empty) is not a valid namespace name",
        ),
        (
            vec!["pool", "list", "-n", "Bad_NS"],
            "namespace \"Bad_NS\" is not a valid namespace name",
        ),
        (
            vec!["assign", "alpha", "bob", "-n", "Bad_NS"],
            "not a valid namespace name",
        ),
        (
            vec!["pool", "delete", "alpha", "-n", ""],
            "not a valid namespace name",
        ),
        // A member as golden VM: alice's assigned, running desktop never, even allowing running.
        (
            vec![
                "pool",
                "create",
                "stolen",
                "--from",
                alices.as_str(),
                "--size",
                "2",
                "--allow-running",
                "--from-member",
                "-n",
                &ns,
            ],
            "would copy a user's desktop into a pool anyone can claim",
        ),
        // An unassigned member only when asked for explicitly.
        (
            vec![
                "pool",
                "create",
                "copy",
                "--from",
                free_member,
                "--size",
                "1",
                "-n",
                &ns,
            ],
            "pass --from-member",
        ),
    ] {
        refused(&args, needle);
    }
    assert_eq!(snapshot(&admin, &ns).await, before, "nothing moved");
}

#[tokio::test]
async fn pool_delete_removes_what_its_own_clone_objects_made_and_go_cli_debris() {
    let ns = namespace("debris").await;
    let admin = client_as("admin").await;
    golden_vm(&ns, "golden-desktop", "Halted", |_| {}).await;
    let clone_api = corral_tests::clones(&admin, &ns);
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), &ns);
    let clone_of = |name: &str, target: &str, labels: serde_json::Value| {
        serde_json::from_value::<DynamicObject>(json!({
            "apiVersion": "clone.kubevirt.io/v1beta1", "kind": "VirtualMachineClone",
            "metadata": { "name": name, "namespace": ns, "labels": labels },
            "spec": {
                "source": { "apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "golden-desktop" },
                "target": { "apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": target },
            }
        }))
        .unwrap()
    };
    let succeeded = |name: &'static str| {
        let api = clone_api.clone();
        move || {
            let api = api.clone();
            async move {
                let c = api.get(name).await.ok()?;
                (c.data.pointer("/status/phase") == Some(&json!("Succeeded"))).then_some(())
            }
        }
    };
    let timeout = std::time::Duration::from_secs(20);

    // An interrupted create of ours: its clone object (with our labels and the patch writing our
    // creation mark) made an unlabelled VM.
    let ours = json!({ POOL_LABEL: "half", MEMBER_LABEL: "half-1", RUN_LABEL: "0123456789abcdef" });
    let mut half = clone_of("corral-vdi-clone-half-1", "half-1", ours);
    half.data["spec"]["patches"] = json!([creation_mark_patch(
        "corral-vdi-clone-half-1",
        "0123456789abcdef"
    )]);
    clone_api.create(&Default::default(), &half).await.unwrap();
    corral_tests::eventually(
        "our clone done",
        timeout,
        succeeded("corral-vdi-clone-half-1"),
    )
    .await;
    assert!(vms.get_opt("half-1").await.unwrap().is_some());
    let out = corral(&["pool", "delete", "half", "-n", &ns]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.contains("leftover clone objects removed: corral-vdi-clone-half-1")
            && stdout.contains("never labelled, removed: half-1"),
        "{stdout}"
    );
    corral_tests::eventually("half-1 gone", timeout, || async {
        vms.get_opt("half-1").await.unwrap().is_none().then_some(())
    })
    .await;

    // The Go CLI's pool: clone objects `clone-<pool>-<i>-<unixtime>` it never deletes; its
    // `pool delete` removed the VMs only.
    clone_api
        .create(
            &Default::default(),
            &clone_of("clone-up1-1-1764547200", "up1-1", json!({})),
        )
        .await
        .unwrap();
    corral_tests::eventually(
        "Go clone done",
        timeout,
        succeeded("clone-up1-1-1764547200"),
    )
    .await;
    vms.delete("up1-1", &Default::default()).await.unwrap();
    corral_tests::eventually("up1-1 gone", timeout, || async {
        vms.get_opt("up1-1").await.unwrap().is_none().then_some(())
    })
    .await;
    let create = [
        "pool",
        "create",
        "up1",
        "--from",
        "golden-desktop",
        "--size",
        "1",
        "-n",
        &ns,
    ];
    let out = corral(&create);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("\"clone-up1-1-1764547200\"")
            && stderr.contains("in phase Succeeded, but no such VM exists: it is debris")
            && stderr.contains(&format!("corral-vdi pool delete up1 -n {ns}")),
        "{stderr}"
    );
    // The hint works: delete finds the debris by its target's name.
    let out = corral(&["pool", "delete", "up1", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("leftover clone objects removed: clone-up1-1-1764547200"),
        "{}",
        text(&out.stdout)
    );
    let out = corral(&create);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let vm = vms.get("up1-1").await.unwrap();
    assert_eq!(vm.labels().get(POOL_LABEL).map(String::as_str), Some("up1"));
    assert!(!vm.labels().contains_key(ASSIGNED_TO_LABEL));
}

#[tokio::test]
async fn guard_status_says_the_sandbox_enforces_the_claim_rules() {
    let out = corral(&["guard", "status"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.starts_with("the Corral VDI guard is installed: the API server itself enforces"),
        "{stdout}"
    );
    assert_eq!(
        stdout.matches(" current").count(),
        8,
        "four policies and their bindings: {stdout}"
    );
    // Every signed-in user may read it.
    let out = corral(&["--context", "bob", "guard", "status"]);
    assert!(
        text(&out.stdout).starts_with("the Corral VDI guard is installed"),
        "{}",
        text(&out.stderr)
    );
}
