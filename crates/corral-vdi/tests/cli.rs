//! The `corral-vdi` binary against the sandbox: output shape, kubeconfig and context handling,
//! and refusals with a non-zero exit.

mod common;

use std::process::Command;

use common::{corral, text};
use corral_tests::sandbox;

#[test]
fn pool_list_prints_the_legacy_pool_like_the_walkthrough() {
    let out = corral(&["pool", "list"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.contains("legacy (ns/corral-vms, 3 members: 2 free, 1 claimed)"),
        "{stdout}"
    );
    let row = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("legacy-2"))
        .expect("a legacy-2 row");
    assert!(
        row.contains("assigned (legacy, label-only)") && row.contains("alice"),
        "{row}"
    );
    // Times as every message gives them: to the second, with the zone, and how long ago.
    assert!(row.contains("2026-01-15 09:30:00 UTC ("), "{row}");
    assert!(row.contains("d ago)"), "{row}");
}

/// A reader that stops reading (`corral-vdi pool list | head -1`) ends the CLI quietly: exit 0,
/// nothing on stderr but the notice of a cluster without a broker, printed before the listing
/// (it used to panic with "failed printing to stdout: Broken pipe").
#[test]
fn a_reader_that_closes_the_pipe_ends_the_listing_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_corral-vdi"))
        .args(["pool", "list"])
        .env("KUBECONFIG", &sandbox().kubeconfig)
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run corral-vdi");
    // Closed before the CLI has asked the cluster anything, so its first line meets no reader.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert_eq!(
        stderr,
        format!(
            "warning: {}\n",
            vdi_core::claim::cluster_half::NO_BROKER_NOTICE
        )
    );
}

#[test]
fn context_and_kubeconfig_flags_are_honoured() {
    let kubeconfig = sandbox().kubeconfig.display().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_corral-vdi"))
        .args([
            "--kubeconfig",
            &kubeconfig,
            "--context",
            "alice",
            "pool",
            "list",
            "-n",
            "corral-vms",
        ])
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("legacy (ns/corral-vms"));

    let out = corral(&["--context", "nobody", "pool", "list"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("context \"nobody\"") && stderr.contains("hint:"),
        "{stderr}"
    );
}

#[tokio::test]
async fn forbidden_listing_fails_with_a_hint() {
    let out = corral(&["--context", "bob", "pool", "list", "-A"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "nothing printed on stdout");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("forbidden") && stderr.contains("\"bob\""),
        "{stderr}"
    );
    assert!(
        stderr.contains("hint: ask a cluster administrator"),
        "{stderr}"
    );

    let empty = corral_tests::namespace("cli-empty").await;
    let out = corral(&["pool", "list", "-n", &empty]);
    assert!(out.status.success());
    assert_eq!(
        text(&out.stdout).trim(),
        format!("no pools in namespace {empty}")
    );

    // No pools because there is no such namespace: said, with where to look, and a failure.
    let out = corral(&["pool", "list", "-n", "nosuchns"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("error: namespace \"nosuchns\" does not exist")
            && stderr.contains("hint: kubectl get namespaces lists them"),
        "{stderr}"
    );
}

#[tokio::test]
async fn assign_and_unassign_print_the_walkthrough_lines() {
    use kube::api::{Api, PostParams};
    use vdi_core::names::POOL_LABEL;
    use vdi_core::resources::{VirtualMachine, VirtualMachineSpec};

    let ns = corral_tests::namespace("cli-claims").await;
    let admin = corral_tests::client_as("admin").await;
    let mut vm = VirtualMachine::new(
        "devpool-1",
        VirtualMachineSpec {
            run_strategy: Some("Halted".into()),
            ..Default::default()
        },
    );
    vm.metadata.labels = Some([(POOL_LABEL.to_owned(), "devpool".to_owned())].into());
    Api::<VirtualMachine>::namespaced(admin, &ns)
        .create(&PostParams::default(), &vm)
        .await
        .unwrap();

    let out = corral(&["assign", "devpool", "alice", "-n", &ns]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        stdout.starts_with("assigned devpool-1 → alice\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains("connect: corral-vdi connect devpool-1"),
        "{stdout}"
    );

    let out = corral(&["assign", "devpool", "bob", "-n", &ns]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("pool has no free members"));

    // bob may not release alice's claim; alice (her context) may.
    let out = corral(&["--context", "bob", "unassign", "devpool-1", "-n", &ns]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("claimed by alice") && stderr.contains("only alice can release it"),
        "{stderr}"
    );
    let out = corral(&["--context", "alice", "unassign", "devpool-1", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("released devpool-1 (was alice)"));
    // Released again, it is free: nothing to release, and it says so.
    let out = corral(&["--context", "bob", "unassign", "devpool-1", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("devpool-1 was not assigned: nothing to release\n"),
        "{}",
        text(&out.stdout)
    );
}

#[tokio::test]
async fn pool_list_watch_prints_again_on_every_change_until_interrupted() {
    use std::io::{BufRead, BufReader};
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    let ns = corral_tests::namespace("cli-watch").await;
    let admin = corral_tests::client_as("admin").await;
    corral_tests::pool_vms(&admin, &ns, "wp", 2).await.unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_corral-vdi"))
        .args(["pool", "list", "--watch", "-n", &ns])
        .env("KUBECONFIG", &sandbox().kubeconfig)
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.unwrap_or_default()).is_err() {
                return;
            }
        }
    });
    let wait_for = |needle: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut seen = Vec::new();
        while Instant::now() < deadline {
            if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
                if line.contains(needle) {
                    return line;
                }
                seen.push(line);
            }
        }
        panic!("never printed {needle:?}; printed:\n{}", seen.join("\n"));
    };
    wait_for("wp (ns/");
    // A claim made elsewhere shows up without asking again.
    let out = corral(&["assign", "wp", "alice", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let row = wait_for("alice");
    assert!(row.trim_start().starts_with("wp-"), "{row}");
    // Ctrl-C ends it cleanly.
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    // A loaded machine's bound: what is tested is that it ends, and cleanly.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(Instant::now() < deadline, "still running after SIGINT");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test]
async fn keep_renews_the_holders_own_claim_and_refuses_anyone_else() {
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::ResourceExt;
    use kube::api::Api;
    use vdi_core::names::{KEPT_AT_ANNOTATION, lease_name};

    let ns = corral_tests::namespace("cli-keep").await;
    let admin = corral_tests::client_as("admin").await;
    corral_tests::pool_vms(&admin, &ns, "kp", 1).await.unwrap();
    let out = corral(&["assign", "kp", "alice", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let leases: Api<Lease> = Api::namespaced(admin, &ns);
    let before = leases.get(&lease_name("kp-1")).await.unwrap();

    // bob may not keep alice's claim: refused, the Lease as it was.
    let out = corral(&["--context", "bob", "keep", "kp-1", "-n", &ns]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("kp-1 is held by alice, not by you (bob)"),
        "{stderr}"
    );
    let after = leases.get(&lease_name("kp-1")).await.unwrap();
    assert_eq!(after.resource_version(), before.resource_version());

    // alice keeps it: the time is recorded on the Lease, and the new end said.
    let out = corral(&["--context", "alice", "keep", "kp-1", "-n", &ns]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("kept kp-1: the claim now lasts until "),
        "{stdout}"
    );
    let kept = leases.get(&lease_name("kp-1")).await.unwrap();
    assert!(kept.annotations().contains_key(KEPT_AT_ANNOTATION));
    let renewed = |l: Lease| l.spec.and_then(|s| s.renew_time).map(|t| t.0);
    assert!(renewed(kept) > renewed(before));
}
