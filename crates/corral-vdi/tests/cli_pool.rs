//! `corral-vdi pool create` and `pool delete` against the sandbox: the walkthrough's output,
//! progress on stderr, refusals with exit code 1, two processes racing, and delete's
//! refusal and `--force`, and what it leaves alone as not ours.

mod common;

use std::process::{Command, Stdio};

use common::{corral, text};
use corral_tests::{add_knob, eventually, golden_vm, namespace, sandbox};
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::json;
use vdi_core::names::POOL_LABEL;
use vdi_core::resources::VirtualMachine;

#[tokio::test]
async fn create_and_delete_print_like_the_walkthrough() {
    let ns = namespace("clipool").await;
    golden_vm(&ns, "golden-desktop", "Halted", |_| {}).await;

    let out = corral(&[
        "pool",
        "create",
        "devpool",
        "--from",
        "golden-desktop",
        "--size",
        "3",
        "-n",
        &ns,
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stdout,
        format!(
            "pool \"devpool\" created: 3 members\ndevpool-1\ndevpool-2\ndevpool-3\npool \
             \"devpool\" is open to everyone who may claim in namespace \"{ns}\"\n"
        )
    );
    assert!(
        stderr.starts_with(&format!(
            "creating pool \"devpool\" in namespace {ns}: 3 members from golden VM \"golden-desktop\""
        )),
        "{stderr}"
    );
    for member in ["devpool-1", "devpool-2", "devpool-3"] {
        assert!(
            stderr.contains(&format!("{member}: SnapshotInProgress")),
            "{stderr}"
        );
        assert!(stderr.contains(&format!("{member}: done")), "{stderr}");
    }

    let out = corral(&["pool", "list", "-n", &ns]);
    let listing = text(&out.stdout);
    assert!(
        listing.contains(&format!("devpool (ns/{ns}, 3 members: 3 free, 0 claimed)")),
        "{listing}"
    );

    let out = corral(&[
        "pool",
        "create",
        "devpool",
        "--from",
        "golden-desktop",
        "--size",
        "3",
        "-n",
        &ns,
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "error: pool \"devpool\" already exists in namespace \"{ns}\""
        )) && stderr.contains("hint: pick another pool name"),
        "{stderr}"
    );

    let out = corral(&["pool", "delete", "devpool", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "pool \"devpool\" deleted: 3 members\ndevpool-1\ndevpool-2\ndevpool-3\n"
    );
    // Twice: the pool is not found (as kubectl says of a deleted object), unless that is asked
    // to be a success.
    let out = corral(&["pool", "delete", "devpool", "-n", &ns]);
    assert_eq!(out.status.code(), Some(1), "a second delete is an error");
    assert!(out.stdout.is_empty());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "error: pool \"devpool\" not found in namespace \"{ns}\""
        )) && stderr.contains("--ignore-not-found"),
        "{stderr}"
    );
    let out = corral(&["pool", "delete", "devpool", "-n", &ns, "--ignore-not-found"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("pool \"devpool\" in namespace {ns}: nothing to delete\n")
    );
}

#[tokio::test]
async fn refusals_exit_non_zero_with_the_cause_and_a_hint() {
    let ns = namespace("clirefuse").await;
    golden_vm(&ns, "running", "Always", |_| {}).await;
    let cases: [(&[&str], &str); 4] = [
        (
            &[
                "pool",
                "create",
                "p",
                "--from",
                "golden-desktop",
                "--size",
                "2",
            ],
            "golden VM \"golden-desktop\" not found in namespace",
        ),
        (
            &["pool", "create", "p", "--from", "running", "--size", "0"],
            "pool size 0 is out of range",
        ),
        (
            &["pool", "create", "p", "--from", "running", "--size", "2"],
            "golden VM \"running\" is Running, not Stopped",
        ),
        (
            &[
                "pool",
                "create",
                "p",
                "--from",
                "running",
                "--size",
                "2",
                "--timeout",
                "0s",
            ],
            "a clone timeout of 0 s is out of range: 1 s to 24 h",
        ),
    ];
    for (args, needle) in cases {
        let mut args = args.to_vec();
        args.extend(["-n", &ns]);
        let out = corral(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(
            stderr.contains(needle) && stderr.contains("hint:"),
            "{args:?}: {stderr}"
        );
    }
    // The golden VM missing from the namespace: the hint says to pass -n.
    let out = corral(&[
        "pool",
        "create",
        "p",
        "--from",
        "golden-desktop",
        "--size",
        "2",
        "-n",
        &ns,
    ]);
    assert!(text(&out.stderr).contains("pass -n"));
    // A malformed duration is a usage error.
    let out = corral(&[
        "pool",
        "create",
        "p",
        "--from",
        "running",
        "--size",
        "2",
        "--timeout",
        "soon",
        "-n",
        &ns,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("write it like 90s, 15m or 1h30m"));
    // A negative count is a number that is wrong, not a flag: said in the flag's terms, never
    // the parser's tip to write `-- -1` or its range 0..=4294967295.
    for (flag, value, said) in [
        (
            "--size",
            "-1",
            "\"-1\" is not a number of members: write a whole number (1 to 500)",
        ),
        (
            "--size",
            "99999999999",
            "99999999999 is out of range (1 to 500)",
        ),
        ("--warm", "-2", "\"-2\" is not a number of warm members"),
    ] {
        let mut args = vec!["pool", "create", "p", "--from", "running", flag, value];
        if flag == "--warm" {
            args.extend(["--size", "1"]);
        }
        args.extend(["-n", &ns]);
        let out = corral(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(said) && !stderr.contains("-- -") && !stderr.contains("4294967295"),
            "{args:?}: {stderr}"
        );
    }

    let out = corral(&[
        "pool",
        "create",
        "p",
        "--from",
        "running",
        "--size",
        "2",
        "--allow-running",
        "--timeout",
        "1m",
        "-n",
        &ns,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!(
            "pool \"p\" created: 2 members\np-1\np-2\npool \"p\" is open to everyone who may \
             claim in namespace \"{ns}\"\n"
        )
    );

    // bob may not delete VMs: refused before anything is deleted (no "run it again"), and the
    // pool is untouched, even with --force.
    let out = corral(&[
        "--context",
        "bob",
        "pool",
        "delete",
        "p",
        "--force",
        "-n",
        &ns,
    ]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "error: cannot delete pool \"p\": RBAC does not let you delete \
             virtualmachines.kubevirt.io in namespace \"{ns}\"; nothing was changed"
        )) && stderr.contains("hint: ask a cluster administrator")
            && !stderr.contains("again"),
        "{stderr}"
    );
    let out = corral(&["pool", "list", "-n", &ns]);
    assert!(
        text(&out.stdout).contains("p (ns/") && text(&out.stdout).contains("2 members"),
        "{}",
        text(&out.stdout)
    );
}

#[tokio::test]
async fn of_two_processes_racing_exactly_one_creates_the_pool() {
    let ns = namespace("clirace").await;
    golden_vm(&ns, "gold", "Halted", |_| {}).await;
    let spawn = || {
        Command::new(env!("CARGO_BIN_EXE_corral-vdi"))
            .args([
                "pool", "create", "raced", "--from", "gold", "--size", "5", "-n", &ns,
            ])
            .env("KUBECONFIG", &sandbox().kubeconfig)
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run corral-vdi")
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let (won, lost) = match (a.status.success(), b.status.success()) {
        (true, false) => (a, b),
        (false, true) => (b, a),
        _ => panic!(
            "expected one winner:\n{}\n{}\n---\n{}\n{}",
            text(&a.stdout),
            text(&a.stderr),
            text(&b.stdout),
            text(&b.stderr)
        ),
    };
    assert!(text(&won.stdout).starts_with("pool \"raced\" created: 5 members"));
    assert_eq!(lost.status.code(), Some(1));
    assert!(
        text(&lost.stderr).contains("already exists"),
        "{}",
        text(&lost.stderr)
    );
    let listing = text(&corral(&["pool", "list", "-n", &ns]).stdout);
    assert!(listing.contains("raced (ns/"), "{listing}");
    assert!(listing.contains("5 members: 5 free"), "{listing}");
}

#[test]
fn delete_refuses_an_assigned_member_unless_forced() {
    // The seeded Phase 1 pool `legacy` has legacy-2 assigned to alice (label only).
    let out = corral(&["pool", "delete", "legacy", "-n", "corral-vms"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "error: pool \"legacy\" in namespace \"corral-vms\" has assigned members: legacy-2 \
             (assigned to alice, label only)"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("--force"), "{stderr}");
    let listing = text(&corral(&["pool", "list", "-n", "corral-vms"]).stdout);
    assert!(
        listing.contains("legacy (ns/corral-vms, 3 members"),
        "nothing deleted: {listing}"
    );

    let out = corral(&["pool", "delete", "legacy", "-n", "corral-vms", "--force"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "pool \"legacy\" deleted: 3 members\nlegacy-1\nlegacy-2\nlegacy-3\n"
    );
    assert!(text(&out.stderr).contains("deleted while assigned (--force): legacy-2 (alice)"));
    let listing = text(&corral(&["pool", "list", "-n", "corral-vms"]).stdout);
    assert!(!listing.contains("legacy"), "{listing}");
}

#[tokio::test]
async fn ctrl_c_cancels_a_create_and_leaves_no_clone_behind() {
    let ns = namespace("clictrlc").await;
    golden_vm(&ns, "gold", "Halted", |_| {}).await;
    // The second member's clone never finishes: only Ctrl-C ends this create.
    add_knob("stallClones", "ctrlc-2").await;
    let child = Command::new(env!("CARGO_BIN_EXE_corral-vdi"))
        .args([
            "pool", "create", "ctrlc", "--from", "gold", "--size", "2", "-n", &ns,
        ])
        .env("KUBECONFIG", &sandbox().kubeconfig)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run corral-vdi");
    // Once ctrlc-1 is a member and ctrlc-2's clone object exists, the create waits on that
    // clone alone (until Ctrl-C): interrupt it then.
    let admin = corral_tests::client_as("admin").await;
    let clones = corral_tests::clones(&admin, &ns);
    let vms = corral_tests::vms(&admin, &ns);
    let within = std::time::Duration::from_secs(60);
    eventually(
        "ctrlc-1 made, and the clone object of ctrlc-2",
        within,
        || async {
            let first = vms.get_opt("ctrlc-1").await.ok()??;
            let member = first.labels().get(POOL_LABEL)? == "ctrlc";
            let clone = clones.get_opt("corral-vdi-clone-ctrlc-2").await.ok()?;
            (member && clone.is_some()).then_some(())
        },
    )
    .await;
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(stderr.contains("cancelling:"), "{stderr}");
    assert!(
        stderr.contains("member \"ctrlc-2\": cancelled while waiting for VirtualMachineClone \"corral-vdi-clone-ctrlc-2\""),
        "{stderr}"
    );
    // Nothing of the run is left but the members it finished: delete finds no clone objects.
    let out = corral(&["pool", "delete", "ctrlc", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("leftover clone"), "{stdout}");
}

#[tokio::test]
async fn delete_names_what_claims_to_belong_but_is_left_alone() {
    let ns = namespace("clileft").await;
    let admin = corral_tests::client_as("admin").await;
    golden_vm(&ns, "golden-desktop", "Halted", |_| {}).await;
    // A clone object labelled with the pool that names the golden VM, and a Lease labelled
    // with the pool that is no member's claim.
    let planted: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "clone.kubevirt.io/v1beta1", "kind": "VirtualMachineClone",
        "metadata": { "name": "planted", "namespace": ns, "labels": { POOL_LABEL: "tp" } },
        "spec": {
            "source": { "apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "gone" },
            "target": { "apiGroup": "kubevirt.io", "kind": "VirtualMachine", "name": "golden-desktop" },
        }
    }))
    .unwrap();
    corral_tests::clones(&admin, &ns)
        .create(&PostParams::default(), &planted)
        .await
        .unwrap();
    let lease: Lease = serde_json::from_value(json!({
        "metadata": { "name": "not-a-claim", "labels": { POOL_LABEL: "tp" } },
        "spec": { "holderIdentity": "mallory" }
    }))
    .unwrap();
    let leases: Api<Lease> = Api::namespaced(admin.clone(), &ns);
    leases.create(&PostParams::default(), &lease).await.unwrap();
    let stray = "  Lease not-a-claim (labelled with the pool, but not the claim Lease \
                 corral-vdi-<member> of a VM deleted here)\n";

    let out = corral(&["pool", "delete", "tp", "-n", &ns]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.starts_with(
            "pool \"tp\" deleted: 0 members\nleftover clone objects removed: planted\n\
             not ours, left alone:\n  VirtualMachine golden-desktop (named by clone object \
             \"planted\", but "
        ),
        "{stdout}"
    );
    assert!(stdout.ends_with(stray), "{stdout}");
    let vms: Api<VirtualMachine> = Api::namespaced(admin.clone(), &ns);
    assert!(
        vms.get("golden-desktop")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none()
    );

    // Nothing of the pool is left: "not found", still naming what was left alone and why.
    let out = corral(&["pool", "delete", "tp", "-n", &ns]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "pool \"tp\" not found in namespace \"{ns}\": no member, Lease or clone object of it \
             exists; not ours, left alone: Lease not-a-claim (labelled with the pool"
        )),
        "{stderr}"
    );
    let out = corral(&["pool", "delete", "tp", "-n", &ns, "--ignore-not-found"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        format!("pool \"tp\" in namespace {ns}: nothing to delete\nnot ours, left alone:\n{stray}")
    );
    assert!(leases.get_opt("not-a-claim").await.unwrap().is_some());
}
