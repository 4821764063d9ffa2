//! The broker's command line refuses bad values before it touches any cluster: a sentence naming
//! the flag, exit code 2.

use std::process::Command;

/// Runs the broker binary with `args` and no cluster configuration at all.
fn broker(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_corral-vdi-broker"))
        .args(args)
        .env_remove("POD_NAME")
        .env("KUBECONFIG", "/nonexistent/corral-vdi-broker-test")
        .output()
        .expect("run corral-vdi-broker")
}

#[test]
fn bad_flag_values_are_refused_with_the_flag_named_and_exit_code_2() {
    for (args, names) in [
        (&["--lease-seconds", "2"][..], "--lease-seconds"),
        (&["--lease-seconds", "fifteen"][..], "--lease-seconds"),
        (
            &["--reclaim-margin-seconds", "-5"][..],
            "--reclaim-margin-seconds",
        ),
        (
            &["--identity", "broker/0"][..],
            "replica.corral.dev/<identity>",
        ),
        (&["--no-such-flag"][..], "--no-such-flag"),
    ] {
        let out = broker(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(names), "{args:?} names {names}: {stderr}");
    }
}

#[test]
fn no_cluster_configuration_is_a_clear_fatal_error() {
    let out = broker(&["--identity", "broker-0"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("KUBECONFIG"), "{stderr}");
}
