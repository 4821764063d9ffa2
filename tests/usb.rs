//! USB redirection against the sandbox, through the CLI: every refusal before anything
//! starts, a redirect end to end with the stand-in `usbredirect` (no USB bus here; it speaks
//! usbredir on the wire like the real one), four attached and the fifth refused, the real
//! `usbredirect`'s "Failed to open device!" turned into a plain sentence, no helper left
//! when the CLI is killed, and the bridge taking only its own usbredirect's connection (the
//! test makes a second Unix user: it needs root, as CI has). Device lists come from the recorded fixture
//! (tests/fixtures/usb-devices.json, `CORRAL_USB_FIXTURE`), which needs the `usb-fixture`
//! feature (`make test` builds everything with every feature).

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use corral_tests::{
    OTHER_USER, assert_other_gets_nothing, cli_binary, desktop_member, eventually, namespace,
    other_user, sandbox, stand_in_usbredirect_dir, usb_fixture, wait_power,
};

const YUBIKEY: &str = "1050:0407";

/// Names the running test in the environment of what it starts, so that its usbredirect
/// children can be told from those of the tests running beside it.
const TEST_TAG: &str = "CORRAL_USB_TEST";

/// The running test's name (libtest names each test's thread after it).
fn test_name() -> String {
    std::thread::current().name().unwrap_or("main").to_owned()
}

/// `corral-vdi` as `context`, with the recorded devices, the stand-in usbredirect first on
/// PATH, and `present` as the devices the stand-in can open. Tagged with the running test
/// (`TEST_TAG`), which the usbredirect it starts inherits.
fn cli(context: &str, present: &str) -> Command {
    let path = format!(
        "{}:{}",
        stand_in_usbredirect_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = Command::new(cli_binary());
    command
        .env("KUBECONFIG", &sandbox().kubeconfig)
        .env("CORRAL_USB_FIXTURE", usb_fixture())
        .env("CORRAL_STAND_IN_DEVICES", present)
        .env("PATH", path)
        .env(TEST_TAG, test_name())
        .env_remove("RUST_LOG")
        .args(["--context", context]);
    command
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// alice's running desktop `<pool>-1` in a namespace of its own.
async fn alices_desktop(prefix: &str, passthrough: bool) -> (String, String) {
    let ns = namespace(prefix).await;
    let member = format!("{prefix}-1");
    desktop_member(&ns, prefix, &member, passthrough).await;
    let out = cli("alice", "")
        .args(["assign", prefix, "alice", "-n", &ns])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    wait_power(&ns, &member, "Running").await;
    (ns, member)
}

/// How many devices the emulated virt-api says are attached to `member`'s VMI.
async fn attached(ns: &str, member: &str) -> u32 {
    let admin = corral_tests::client_as("admin").await;
    let vmis = corral_tests::vmis(&admin, ns);
    vmis.get(member)
        .await
        .ok()
        .and_then(|v| {
            v.metadata
                .annotations
                .and_then(|a| a.get("sandbox.corral.dev/usbredir-attached").cloned())
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

async fn wait_attached(ns: &str, member: &str, want: u32) {
    eventually(
        &format!("{want} device(s) attached to {member}"),
        Duration::from_secs(10),
        || async { (attached(ns, member).await == want).then_some(()) },
    )
    .await;
}

/// Starts `usb redir` and waits until it says the device is attached.
fn redirect(context: &str, ns: &str, member: &str, device: &str, present: &str) -> Child {
    let mut child = cli(context, present)
        .args([
            "usb", "redir", member, "--device", device, "--yes", "-n", ns,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    if !line.starts_with("attached") {
        let mut err = String::new();
        let _ = std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err);
        panic!("not attached: {line}{err}");
    }
    child
}

/// The usbredirect processes started by this test (not by the tests running beside it): those
/// whose environment carries this test's `TEST_TAG`.
fn usbredirect_pids() -> Vec<u32> {
    let tag = format!("{TEST_TAG}={}", test_name());
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "usbredirect")
                && std::fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == tag.as_bytes()))
        })
        .collect()
}

#[test]
fn the_list_marks_devices_and_names_what_you_cannot_open() {
    let out = cli("alice", "").args(["usb", "list"]).output().unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let row = |id: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_else(|| panic!("{id} in {stdout}"))
            .to_owned()
    };
    assert!(row(YUBIKEY).contains("smartcard,security-key"), "{stdout}");
    assert!(row(YUBIKEY).contains("1-7") && row(YUBIKEY).contains("Yubico"));
    assert!(row("076b:3031").contains("smartcard"));
    assert!(row("046d:c31c").contains(" -  "), "a keyboard is no key");
    assert!(
        row("0781:5567").contains("no write access to /dev/bus/usb/002/002"),
        "{stdout}"
    );
    assert!(
        stderr.contains("ATTRS{idVendor}==\"0781\"") && stderr.contains("uaccess"),
        "the udev fix: {stderr}"
    );
    // The real list of this machine (no fixture): it has no USB bus, and says so.
    let out = Command::new(cli_binary())
        .args(["usb", "list"])
        .env_remove("CORRAL_USB_FIXTURE")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("no USB bus") || stdout.contains("ID "),
        "either the machine's real devices or why there are none: {stdout}"
    );
}

#[tokio::test]
async fn every_refusal_comes_before_anything_starts() {
    let (ns, member) = alices_desktop("usbref", true).await;
    // Hers (by label, as the Go CLI assigns) but stopped.
    let (ns2, stopped) = {
        let ns2 = namespace("usbstop").await;
        desktop_member(&ns2, "usbstop", "usbstop-1", true).await;
        corral_tests::vms(&corral_tests::client_as("admin").await, &ns2)
            .patch(
                "usbstop-1",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(serde_json::json!({ "metadata": { "labels": {
                    vdi_core::names::ASSIGNED_TO_LABEL: "alice" } } })),
            )
            .await
            .unwrap();
        (ns2, "usbstop-1".to_owned())
    };
    let (ns3, no_passthrough) = alices_desktop("usbnocp", false).await;
    let cases: Vec<(&str, Vec<&str>, &str, &str)> = vec![
        (
            "bob",
            vec![&member, "--device", YUBIKEY, "-n", &ns],
            "",
            "is not your desktop (it is assigned to alice)",
        ),
        (
            "bob",
            vec![&member, "--device", YUBIKEY, "--user", "alice", "-n", &ns],
            "",
            "you are bob, not alice",
        ),
        (
            "alice",
            vec![&stopped, "--device", YUBIKEY, "-n", &ns2],
            "",
            "is Stopped, not running",
        ),
        (
            "alice",
            vec![&no_passthrough, "--device", YUBIKEY, "-n", &ns3],
            "",
            "not configured for USB redirection",
        ),
        (
            "alice",
            vec![&member, "--device", "dead:beef", "-n", &ns],
            "",
            "device dead:beef is not present",
        ),
        (
            "alice",
            vec![&member, "--device", "0781:5567", "-n", &ns],
            "",
            "its node /dev/bus/usb/002/002 is not writable",
        ),
        (
            "alice",
            vec!["golden-desktop", "--device", YUBIKEY, "-n", "corral-vms"],
            "",
            "is not your desktop",
        ),
        (
            "alice",
            vec!["no-such-vm", "--device", YUBIKEY, "-n", &ns],
            "",
            "is not a KubeVirt VirtualMachine",
        ),
        (
            "alice",
            vec![&member, "--device", "yubikey", "-n", &ns],
            "",
            "is not a USB device",
        ),
        // The stand-in cannot open it (not in its list): like the real one, exit 0 and
        // "Failed to open device!", turned into a sentence.
        (
            "alice",
            vec![&member, "--device", YUBIKEY, "-n", &ns],
            "",
            "device 1050:0407 is not present (usbredirect: Failed to open device)",
        ),
    ];
    for (context, args, present, needle) in cases {
        let out = cli(context, present)
            .args(["usb", "redir"])
            .args(&args)
            .arg("--yes")
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stdout}{stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(stderr.contains("hint: "), "{args:?}: {stderr}");
        assert_eq!(attached(&ns, &member).await, 0, "nothing attached");
    }
    // The security notice not accepted: nothing starts.
    let mut child = cli("alice", YUBIKEY)
        .args(["usb", "redir", &member, "--device", YUBIKEY, "-n", &ns])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.as_mut().unwrap().write_all(b"n\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr.contains("Live migration of the desktop's VM is blocked")
            && stderr.contains("not attached: the security notice was not accepted"),
        "{stderr}"
    );
    // usbredirect missing: the packages to install.
    let out = cli("alice", "")
        .env("PATH", "/nonexistent")
        .args([
            "usb", "redir", &member, "--device", YUBIKEY, "--yes", "-n", &ns,
        ])
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert!(
        stderr.contains("usbredirect is not installed")
            && stderr.contains("apt install usbredirect")
            && stderr.contains("dnf install"),
        "{stderr}"
    );
    assert_eq!(
        usbredirect_pids(),
        Vec::<u32>::new(),
        "no usbredirect left running"
    );
}

#[tokio::test]
async fn the_real_usbredirect_failing_to_open_a_device_is_said_plainly() {
    let (ns, member) = alices_desktop("usbreal", true).await;
    // The machine's own usbredirect (Debian's), which cannot open a device here.
    let out = cli("alice", "")
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .args([
            "usb", "redir", &member, "--device", YUBIKEY, "--yes", "-n", &ns,
        ])
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("device 1050:0407 is not present (usbredirect: Failed to open device)"),
        "{stderr}"
    );
}

#[tokio::test]
async fn four_devices_attach_the_fifth_is_refused_and_detaching_frees_a_slot() {
    let (ns, member) = alices_desktop("usbfour", true).await;
    let present = "1050:0407,076b:3031,046d:c31c,20a0:42b2,1-9";
    let mut children = Vec::new();
    for device in [YUBIKEY, "076b:3031", "046d:c31c", "20a0:42b2"] {
        children.push(redirect("alice", &ns, &member, device, present));
    }
    wait_attached(&ns, &member, 4).await;
    let out = cli("alice", present)
        .args([
            "usb", "redir", &member, "--device", "1-9", "--yes", "-n", &ns,
        ])
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("four USB devices are already redirected to usbfour-1"),
        "{stderr}"
    );
    // Detach one (Ctrl-C): a slot frees and the fifth attaches.
    let first = children.remove(0);
    let _ = Command::new("kill")
        .args(["-INT", &first.id().to_string()])
        .status();
    let out = first.wait_with_output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("detached 1050:0407"));
    wait_attached(&ns, &member, 3).await;
    children.push(redirect("alice", &ns, &member, "1-9", present));
    wait_attached(&ns, &member, 4).await;

    // Killing the CLI outright leaves no usbredirect behind (it dies with its parent).
    let before = usbredirect_pids();
    assert!(before.len() >= 4, "{before:?}");
    for mut child in children {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    eventually("no usbredirect left", Duration::from_secs(5), || async {
        usbredirect_pids().is_empty().then_some(())
    })
    .await;
    wait_attached(&ns, &member, 0).await;
}

#[tokio::test]
async fn the_bridge_takes_only_its_own_usbredirect() {
    let other = other_user();
    let (ns, member) = alices_desktop("usbown", true).await;
    // The stand-in waits 8 s before connecting (longer than a probe waits for an answer):
    // others try the port first.
    let mut child = cli("alice", YUBIKEY)
        .env("CORRAL_STAND_IN_CONNECT_DELAY_MS", "8000")
        .args([
            "usb", "redir", &member, "--device", YUBIKEY, "--yes", "-n", &ns,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let to: std::net::SocketAddr = eventually(
        "usbredirect started, with its --to",
        Duration::from_secs(10),
        || async {
            let pid = *usbredirect_pids().first()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let args: Vec<String> = cmdline
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let at = args.iter().position(|a| a == "--to")?;
            args.get(at + 1)?.parse().ok()
        },
    )
    .await;
    // Another user, then another process of the same user: each closed at once.
    assert_other_gets_nothing("the USB bridge", to, b"").await;
    let mut mine = tokio::net::TcpStream::connect(to).await.unwrap();
    let mut got = Vec::new();
    // Closed at once; the bound is a loaded machine's.
    let read = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::io::AsyncReadExt::read_to_end(&mut mine, &mut got),
    )
    .await;
    assert!(
        matches!(read, Ok(Ok(0))),
        "a process that is not its usbredirect is closed at once: {read:?}"
    );
    assert_eq!(attached(&ns, &member).await, 0, "nothing attached for them");
    // Its own usbredirect still gets the bridge.
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("attached"), "{line}");
    wait_attached(&ns, &member, 1).await;
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    let out = child.wait_with_output().unwrap();
    let (_, stderr) = text(&out);
    assert!(
        stderr.contains(&format!("(a socket of uid {other}): it is not process")),
        "the refusal of {OTHER_USER} logged with its uid: {stderr}"
    );
    assert_eq!(
        stderr.matches("it is not process").count(),
        2,
        "both refusals logged: {stderr}"
    );
    wait_attached(&ns, &member, 0).await;
}
