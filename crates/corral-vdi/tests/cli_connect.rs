//! `corral-vdi connect | vnc | ssh | rdp` against the sandbox, no virtctl: the paths printed,
//! refusals with exit 1, SSH through our forward to a real sshd, VNC's proxy speaking RFB
//! again and again while respecting a viewer, an .rdp file pointing at a forward that
//! speaks RDP, and every forward serving only the user who started it (the test makes a
//! second Unix user: it needs root, as CI has).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use corral_tests::{
    OTHER_USER, assert_echoes, assert_other_gets_nothing, eventually, namespace, other_user,
    rdp_connection_confirm, rfb_handshake, rfb_update, running_vm, sandbox, streams_as,
    try_rfb_handshake, wait_power,
};
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use vdi_core::error::ErrorKind;
use vdi_core::session::Supervisor;

fn cli() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_corral-vdi"));
    command
        .env("KUBECONFIG", &sandbox().kubeconfig)
        .env_remove("RUST_LOG");
    command
}

fn free(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// Sends SIGINT (Ctrl-C) to `child` and expects a clean exit.
fn interrupt(child: &mut std::process::Child) {
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let status = child.wait().unwrap();
    assert!(status.success(), "Ctrl-C ends it cleanly: {status}");
}

/// Sets `vm`'s run strategy as an administrator and waits for the power state it leads to.
async fn power(ns: &str, vm: &str, strategy: &str, printable: &str) {
    corral_tests::vms(&corral_tests::client_as("admin").await, ns)
        .patch(
            vm,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "runStrategy": strategy } })),
        )
        .await
        .unwrap();
    wait_power(ns, vm, printable).await;
}

#[tokio::test]
async fn connect_prints_each_path_and_a_stopped_desktop_is_refused_plainly() {
    let ns = namespace("cliconn").await;
    running_vm(&ns, "desk-1", |vm| {
        vm["metadata"]["annotations"]["sandbox.corral.dev/guest-ports"] = json!("22");
    })
    .await;
    let out = cli()
        .args(["connect", "desk-1", "-n", &ns])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with(&format!("desk-1 (ns/{ns}, VMI Running)")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("VNC  available    corral-vdi vnc desk-1 -n {ns}")),
        "{stdout}"
    );
    assert!(
        stdout.contains("RDP  unavailable  nothing answers on port 3389 in desk-1"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("SSH  available    corral-vdi ssh desk-1 -n {ns}")),
        "{stdout}"
    );

    power(&ns, "desk-1", "Halted", "Stopped").await;
    let out = cli()
        .args(["vnc", "desk-1", "--proxy-only", "-n", &ns])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(out.stdout.is_empty(), "no port printed, nothing listens");
    assert!(
        stderr.contains("error: desk-1 is not running — start it") && stderr.contains("hint:"),
        "{stderr}"
    );
    // A stopped desktop answers `connect` with its reasons; a name that is no VM at all is an
    // error of its own.
    let out = cli()
        .args(["connect", "desk-1", "-n", &ns])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("VNC  unavailable  desk-1 is not running — start it"),
        "{stdout}"
    );
    let out = cli()
        .args(["connect", "nosuch", "-n", &ns])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "error: there is no VirtualMachine \"nosuch\" in namespace \"{ns}\""
        )),
        "{stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "no paths for a VM that does not exist"
    );
    // A viewer that fails (here: no display for remote-viewer) makes the command fail too.
    power(&ns, "desk-1", "Always", "Running").await;
    let out = cli()
        .args(["vnc", "desk-1", "-n", &ns])
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: the viewer for desk-1 failed:") && stderr.contains("exited ("),
        "{stderr}"
    );
    // Bad input: refused before any request.
    for (args, needle) in [
        (vec!["connect", "desk-1/x"], "is not a valid member name"),
        (vec!["port-forward", "desk-1", "70000"], "is not a port"),
        (
            vec!["port-forward", "desk-1", "--stdio", "22", "23"],
            "exactly one port",
        ),
    ] {
        let out = cli().args(&args).args(["-n", &ns]).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

#[tokio::test]
async fn ssh_runs_a_command_through_our_forward() {
    let ns = namespace("clissh").await;
    running_vm(&ns, "shell-1", |_| {}).await;
    let shared = sandbox();
    let key = shared.ssh_client_key.display().to_string();
    let out = cli()
        .args([
            "ssh",
            "shell-1",
            "-n",
            &ns,
            "-l",
            &shared.ssh_user,
            "--",
            "-i",
            &key,
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "LogLevel=ERROR",
            "echo",
            "hello-through-corral",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "hello-through-corral"
    );
}

/// A viewer through the proxy at `local`, its RFB handshake done (the framebuffer size it was
/// told beside it), once virt-api lets it in: a moment after the last viewer's stream is gone.
async fn next_viewer(local: SocketAddr, what: &str) -> (TcpStream, (u16, u16)) {
    eventually(what, Duration::from_secs(10), || async {
        let mut viewer = TcpStream::connect(local).await.ok()?;
        let size = try_rfb_handshake(&mut viewer).await.ok()?;
        Some((viewer, size))
    })
    .await
}

#[tokio::test]
async fn vnc_proxy_only_speaks_rfb_over_and_over_and_respects_a_viewer() {
    let ns = namespace("clivnc").await;
    running_vm(&ns, "view-1", |_| {}).await;
    let (mut proxy, line) = start(&["vnc", "view-1", "--proxy-only", "-n", &ns]);
    let local = proxy_address(&line);
    let port = local.port();

    let mut viewer = TcpStream::connect(local).await.unwrap();
    let (w, h) = rfb_handshake(&mut viewer).await;
    assert_eq!((w, h), (1024, 768));
    assert!(
        rfb_update(&mut viewer, w, h).await >= 1,
        "a framebuffer update"
    );
    drop(viewer);
    for cycle in 0..20 {
        let (_, size) = next_viewer(local, &format!("the viewer of cycle {cycle}")).await;
        assert_eq!(size, (1024, 768), "cycle {cycle}");
    }

    // Someone views through the proxy (preserveSession): another viewer is refused with the
    // reason, and taking over disconnects the first.
    let (mut first, _) = next_viewer(local, "the first viewer").await;
    let supervisor = Supervisor::new();
    let alice = streams_as("alice").await;
    let err = supervisor
        .start_console(alice.clone(), &ns, "view-1", true)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Busy, "{err}");
    assert!(
        err.to_string()
            .contains("someone is viewing view-1's console"),
        "{err}"
    );
    let endpoint = supervisor
        .start_console(alice, &ns, "view-1", false)
        .await
        .unwrap();
    assert!(endpoint.url.starts_with("ws://127.0.0.1:"));
    let mut rest = Vec::new();
    let kicked = tokio::time::timeout(Duration::from_secs(10), first.read_to_end(&mut rest)).await;
    assert!(
        kicked.is_ok(),
        "the first viewer is disconnected by the take-over"
    );

    interrupt(&mut proxy);
    assert!(
        free(port),
        "the proxy's port is free after Ctrl-C (its process is gone)"
    );
}

#[tokio::test]
async fn an_rdp_file_points_at_a_forward_that_speaks_rdp() {
    let ns = namespace("clirdp").await;
    running_vm(&ns, "win-1", |_| {}).await;
    let file = std::env::temp_dir().join(format!("corral-test-{}.rdp", std::process::id()));
    let file_arg = file.display().to_string();
    let (mut rdp, line) = start(&["rdp", "win-1", "-n", &ns, "--rdp-file", &file_arg]);
    let text = std::fs::read_to_string(&file).unwrap();
    let port: u16 = text
        .lines()
        .next()
        .and_then(|l| l.trim().rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap();
    assert!(line.contains(&format!("127.0.0.1:{port}")), "{line}");
    // An RDP X.224 Connection Request gets a Connection Confirm through the forward.
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    rdp_connection_confirm(&mut tcp).await;
    interrupt(&mut rdp);
    assert!(free(port));
    let _ = std::fs::remove_file(file);
}

/// Starts `corral-vdi ARGS` with its stdout and stderr piped, and returns it with its first
/// line on stdout.
fn start(args: &[&str]) -> (std::process::Child, String) {
    let mut child = cli()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line)
}

/// Where `vnc --proxy-only` listens, from the `{"port":N}` it prints.
fn proxy_address(line: &str) -> SocketAddr {
    let port = serde_json::from_str::<Value>(line)
        .ok()
        .and_then(|v| v["port"].as_u64())
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or_else(|| panic!("{{\"port\":N}}, not {line:?}"));
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// The `127.0.0.1:PORT` in `line`.
fn local_address(line: &str) -> SocketAddr {
    line.split_whitespace()
        .find_map(|w| w.trim_end_matches(';').parse().ok())
        .unwrap_or_else(|| panic!("an address in {line:?}"))
}

#[tokio::test]
async fn each_forward_serves_only_the_user_who_started_it() {
    let other = other_user();
    let ns = namespace("cliowner").await;
    running_vm(&ns, "mine-1", |vm| {
        vm["metadata"]["annotations"]["sandbox.corral.dev/guest-ports"] = json!("22,3389,7777");
    })
    .await;
    let (mut vnc, line) = start(&["vnc", "mine-1", "--proxy-only", "-n", &ns]);
    let vnc_at = proxy_address(&line);
    let (mut forward, line) = start(&["port-forward", "mine-1", "7777", "-n", &ns]);
    let forward_at = local_address(&line);
    let file = std::env::temp_dir().join(format!("corral-owner-{}.rdp", std::process::id()));
    let file_arg = file.display().to_string();
    let (mut rdp, line) = start(&["rdp", "mine-1", "-n", &ns, "--rdp-file", &file_arg]);
    let rdp_at = local_address(&line);

    // Another user: closed at once, nothing from the desktop (VNC's server and the echo would
    // have answered through a stream within the probe's wait).
    assert_other_gets_nothing("vnc --proxy-only", vnc_at, b"").await;
    assert_other_gets_nothing("port-forward", forward_at, b"echo me").await;
    assert_other_gets_nothing(
        "rdp --rdp-file",
        rdp_at,
        &corral_tests::RDP_CONNECTION_REQUEST,
    )
    .await;

    // The owner still gets RFB, the echo and an RDP answer.
    let mut viewer = TcpStream::connect(vnc_at).await.unwrap();
    assert_eq!(rfb_handshake(&mut viewer).await, (1024, 768));
    drop(viewer);
    assert_echoes(forward_at).await;
    let mut tcp = TcpStream::connect(rdp_at).await.unwrap();
    rdp_connection_confirm(&mut tcp).await;

    // Each refusal was logged with the other user's uid.
    for (what, child) in [
        ("vnc", &mut vnc),
        ("port-forward", &mut forward),
        ("rdp", &mut rdp),
    ] {
        interrupt(child);
        let mut stderr = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
        assert!(
            stderr.contains(&format!("its socket belongs to uid {other}")),
            "{what} logs the refusal of {OTHER_USER} (uid {other}): {stderr}"
        );
    }
    let _ = std::fs::remove_file(file);
}
